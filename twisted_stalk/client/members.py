# -*- test-case-name: tests.test_client_pool -*-
"""The servers of a :class:`~twisted_stalk.client.BeanstalkPool`, as the pool sees them.

:class:`PoolServer` wraps one server's
:class:`~twisted_stalk.client.BeanstalkClient`: its state (``connecting``,
``up``, ``down``: up once it answered a command on a new connection, since a
hung server's kernel still accepts connections), whether it is usable (up,
and no command waiting longer than the pool's ``stall_timeout``), and what the
pool did there.  :class:`ServerInfo` is the snapshot ``pool.servers()``
returns; :class:`JobId` is a job id that remembers its server.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional
from typing import Protocol as _Interface

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from .client import BeanstalkClient


class ServerHost(_Interface):
    """What a :class:`PoolServer` reports to (its pool): the clock, the stall
    timeout, the log, and two reports."""

    clock: IReactorTime
    stall_timeout: float
    log: Logger

    def server_up(self, server: "PoolServer") -> None:
        """``server`` answered on a new connection: it is up."""

    def server_changed(self, server: "PoolServer") -> None:
        """``server`` went down (or its state changed otherwise)."""


class JobId(int):
    """A job id (an int) that remembers its server: ids are per server.

    :ivar server: the name of the server that stored the job.
    """

    server: str

    def __new__(cls, value: int, server: str) -> "JobId":
        self = super().__new__(cls, value)
        self.server = server
        return self

    def __repr__(self) -> str:
        return f"JobId({int(self)}, {self.server!r})"


@dataclass(frozen=True)
class ServerInfo:
    """One server as the pool sees it (:meth:`BeanstalkPool.servers`).

    ``state`` is ``"connecting"`` (not connected yet), ``"up"`` or
    ``"down"``; ``since`` the clock time of the last change; ``downs`` how
    many times it went down; ``puts`` and ``reserved`` count this pool's jobs
    there; ``stalled`` is true while a command has waited longer than
    ``stall_timeout`` for its reply (the pool then sends it no puts and no
    first reserves).  A server is up once it answered on a new connection.
    """

    name: str
    state: str
    since: float
    last_error: Optional[str] = None
    downs: int = 0
    puts: int = 0
    reserved: int = 0
    stalled: bool = False


class PoolServer:
    """One server of a pool: its client and what the pool knows of it."""

    def __init__(self, pool: ServerHost, index: int, client: BeanstalkClient) -> None:
        self.pool = pool
        self.index = index
        self.client = client
        self.name = client.name
        self.state = "connecting"
        self.since = pool.clock.seconds()
        self.last_error: Optional[str] = None
        self.downs = 0
        self.puts = 0
        self.reserved = 0
        #: Fires at the first outcome: up, or a failed attempt to connect.
        self.settled: Deferred = Deferred()
        client.on_connect = self._up
        client.on_disconnect = self._down

    def __repr__(self) -> str:
        return f"<server {self.name} {self.state}>"

    @property
    def info(self) -> ServerInfo:
        return ServerInfo(self.name, self.state, self.since, self.last_error, self.downs,
                          self.puts, self.reserved,
                          stalled=self.state == "up" and not self.usable)

    @property
    def usable(self) -> bool:
        """Up, and no command waiting longer than the stall timeout."""
        client = self.client
        return (self.state == "up" and client.connected
                and client.main_wait < self.pool.stall_timeout)

    def stored(self, job_id: int) -> "JobId":
        self.puts += 1
        return JobId(job_id, self.name)

    def start(self) -> None:
        self.client.first_attempt().addErrback(self._first_failed)

    def _first_failed(self, failure: Failure) -> None:
        if failure.check(CancelledError):
            return
        self.last_error = failure.getErrorMessage()
        self._settle()

    def _settle(self) -> None:
        if not self.settled.called:
            self.settled.callback(None)

    def _up(self, client: BeanstalkClient, reconnected: bool) -> None:
        # Connected is not answering (a hung server's kernel still accepts
        # connections): the server is up once it has answered a command.
        proto = client.protocol
        if proto is not None:
            proto.list_tube_used().addCallbacks(self._answered, lambda f: None)

    def _answered(self, _: Any) -> None:
        proto = self.client.protocol
        if proto is None or not proto.connected or self.state == "up":
            return
        pool = self.pool
        was, down_since = self.state, self.since
        self.state, self.since = "up", pool.clock.seconds()
        self._settle()
        if was == "down":
            pool.log.info("beanstalk server {server} is back after {seconds:.1f} s",
                          server=self.name, seconds=self.since - down_since)
        pool.server_up(self)

    def _down(self, client: BeanstalkClient, reason: str) -> None:
        self.last_error = reason
        if self.state != "up":  # a failed attempt to bring it back
            self._settle()
            return
        pool = self.pool
        self.state, self.since = "down", pool.clock.seconds()
        self.downs += 1
        pool.log.warn("beanstalk server {server} is down: {reason}", server=self.name,
                      reason=reason)
        pool.server_changed(self)


def follow(d: Deferred) -> Deferred:
    """A Deferred that fires (with None) when ``d`` does; cancelling it leaves ``d`` alone."""
    out: Deferred = Deferred()

    def fire(result: Any) -> Any:
        if not out.called:
            out.callback(None)
        return result
    d.addBoth(fire)
    return out


__all__ = ["JobId", "PoolServer", "ServerHost", "ServerInfo"]
