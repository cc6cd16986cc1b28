# -*- test-case-name: tests.test_client_memory -*-
"""An in-memory beanstalk server and connected clients for unit tests.

No sockets and no real time: the real server protocol
(:class:`~twisted_stalk.server.BeanstalkServerFactory`) talks to the real
client over :mod:`twisted.test.iosim` transports, and everything that waits
(delays, TTRs, reserve timeouts, reconnect backoff, response timeouts) runs on
one :class:`~twisted.internet.task.Clock`::

    from twisted_stalk.testing import MemoryBeanstalk

    def test_producer():
        server = MemoryBeanstalk()
        client = server.client()
        d = client.tube("emails").put(b"hello")
        server.flush()                         # move bytes until nothing moves
        assert server.stats_tube("emails")["current-jobs-ready"] == 1

Call :meth:`MemoryBeanstalk.flush` after issuing calls (Deferreds fire during
it) and :meth:`MemoryBeanstalk.advance` to let time pass.
:meth:`MemoryBeanstalk.result` flushes and returns a Deferred's result (or
raises its error).

:class:`MemoryCluster` is several such servers on one clock, for code that
uses a :class:`~twisted_stalk.client.BeanstalkPool`::

    cluster = MemoryCluster(3)
    pool = cluster.pool()
    job_id = cluster.result(pool.put(b"hello"))   # a JobId: job_id.server
"""
from __future__ import annotations

import itertools
from typing import Any, Dict, List, Optional, Tuple

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.interfaces import IProtocolFactory, IStreamClientEndpoint
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.test.iosim import FakeAddress, FakeTransport, IOPump
from twisted.test.iosim import connect as _iosim_connect
from zope.interface import implementer

from ..client import BeanstalkClient, BeanstalkClientFactory, BeanstalkPool, BeanstalkProtocol
from ..core.outcomes import NOT_FOUND
from ..engines import open_engine
from ..protocol.constants import DEFAULT_MAX_JOB_SIZE
from ..protocol.yaml import StatValue, as_dict
from ..server import BeanstalkServerFactory

__all__ = ["MemoryBeanstalk", "MemoryCluster", "MemoryEndpoint"]

_names = itertools.count(1)


@implementer(IStreamClientEndpoint)
class MemoryEndpoint:
    """A client endpoint whose connections go to a :class:`MemoryBeanstalk`."""

    def __init__(self, server: "MemoryBeanstalk") -> None:
        self.server = server

    def __repr__(self) -> str:
        return f"<MemoryEndpoint {self.server.name}>"

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred:
        return self.server._connect(protocolFactory)


def _advance(clock: Clock, flush: Any, seconds: float, step: Optional[float]) -> None:
    """Move ``clock`` ``seconds`` on, stopping at every timer due in that span
    (and every ``step`` seconds if given) to ``flush()``."""
    flush()
    end = clock.seconds() + seconds
    while True:
        now = clock.seconds()
        due = [c.getTime() for c in clock.getDelayedCalls()
               if c.active() and c.getTime() <= end]
        if not due and now >= end - 1e-9:
            return
        target = min(due) if due else end
        if step is not None:
            target = min(target, now + step)
        clock.advance(max(0.0, target - now))
        flush()


class MemoryBeanstalk:
    """A beanstalk server living in memory, driven by a ``Clock``.

    :param clock: the clock for the server and its clients (a new one by default).
    :param max_job_size: the server's ``-z``.
    :param name: how clients name it (default ``memory1``, ``memory2`` ...).
    """

    def __init__(self, clock: Optional[Clock] = None,
                 max_job_size: int = DEFAULT_MAX_JOB_SIZE, name: Optional[str] = None) -> None:
        self.name = name or f"memory{next(_names)}"
        self.clock = clock if clock is not None else Clock()
        self.factory = BeanstalkServerFactory(
            self.clock, open_engine("memory:", self.clock, max_job_size=max_job_size))
        self._pumps: List[IOPump] = []
        #: While True, new connections are refused (the server is "down").
        self.refusing = False
        self.clients: List[BeanstalkClient] = []

    # ------------------------------------------------------------ connections

    def endpoint(self) -> MemoryEndpoint:
        """An endpoint connecting to this server."""
        return MemoryEndpoint(self)

    def _connect(self, factory: IProtocolFactory) -> Deferred:
        if self.refusing:
            return fail(ConnectionRefusedError("the in-memory server is refusing connections"))
        client = factory.buildProtocol(FakeAddress())
        if client is None:
            return fail(ConnectionRefusedError("the factory built no protocol"))
        server = self.factory.buildProtocol(FakeAddress())
        pump = _iosim_connect(server, FakeTransport(server, isServer=True),
                              client, FakeTransport(client, isServer=False),
                              greet=False, clock=self.clock)
        self._pumps.append(pump)
        return succeed(client)

    def client(self, *, connect: bool = True, **settings: Any) -> BeanstalkClient:
        """A :class:`BeanstalkClient` of this server (connected unless ``connect=False``).

        ``settings`` are :class:`BeanstalkClient` keyword arguments; the
        reconnect policy defaults to a fixed 1 s and the connect timeout to None.
        """
        settings.setdefault("retry_policy", lambda attempt: 1.0)
        settings.setdefault("connect_timeout", None)
        client = BeanstalkClient(self.endpoint(), reactor=self.clock, **settings)
        self.clients.append(client)
        if connect:
            d = client.connect()
            self.flush()
            self.result(d)
        return client

    def protocol(self, **settings: Any) -> BeanstalkProtocol:
        """One plain connected :class:`BeanstalkProtocol` (no reconnects)."""
        factory = BeanstalkClientFactory(self.clock, **settings)
        d = self._connect(factory)
        proto = self.result(d)
        self.flush()
        return proto

    @property
    def connections(self) -> int:
        """Open server-side connections."""
        return len(self.factory.connections)

    def drop_connections(self) -> None:
        """Close every connection from the server side (as a restart would)."""
        for pump in self._pumps:
            pump.serverIO.loseConnection()
        self.flush()

    # ------------------------------------------------------------------ time

    def flush(self) -> None:
        """Move bytes between clients and server (running zero-delay calls)
        until nothing moves."""
        for _ in range(100000):
            if not self._pump():
                return
        raise RuntimeError("flush() did not settle: something keeps writing")

    def _pump(self) -> bool:
        """Move bytes once on every connection; True if any moved."""
        moved = False
        for pump in list(self._pumps):
            if pump.pump():
                moved = True
            elif pump.clientIO.disconnected and pump.serverIO.disconnected:
                self._pumps.remove(pump)
        return moved

    def advance(self, seconds: float, step: Optional[float] = None) -> None:
        """Let ``seconds`` pass on the clock, stopping at every timer due in
        that span (and every ``step`` seconds if given) to flush."""
        _advance(self.clock, self.flush, seconds, step)

    def result(self, d: Deferred) -> Any:
        """Flush, then return ``d``'s result or raise its error
        (``AssertionError`` if it has not fired)."""
        self.flush()
        box: List[Tuple[bool, Any]] = []
        d.addBoth(lambda r: box.append((isinstance(r, Failure), r)))
        if not box:
            raise AssertionError(f"{d!r} has not fired")
        failed, value = box[0]
        if failed:
            value.raiseException()
        return value

    # -------------------------------------------------------------- inspecting

    def stats(self) -> Dict[str, StatValue]:
        """The server's ``stats``, read directly from the engine."""
        return as_dict(self.factory.engine.server_stats())

    def stats_tube(self, name: str) -> Dict[str, StatValue]:
        """A tube's ``stats-tube`` (empty if there is no such tube)."""
        pairs = self.factory.engine.tube_stats(name.encode("ascii"))
        return as_dict(pairs) if pairs is not NOT_FOUND else {}

    def stats_job(self, job_id: int) -> Dict[str, StatValue]:
        """A job's ``stats-job`` (empty if there is no such job)."""
        pairs = self.factory.engine.job_stats(job_id)
        return as_dict(pairs) if pairs is not NOT_FOUND else {}

    def tubes(self) -> List[str]:
        """Existing tubes."""
        return [name.decode("ascii") for name in self.factory.engine.tube_names()]

    def close(self) -> None:
        """Close every client made by :meth:`client` and flush."""
        for client in self.clients:
            client.close()
        self.flush()


class MemoryCluster:
    """``count`` :class:`MemoryBeanstalk` servers sharing one ``Clock``.

    :ivar servers: the servers (``servers[i].refusing = True`` and
        ``servers[i].drop_connections()`` take one down).
    """

    def __init__(self, count: int = 3, clock: Optional[Clock] = None, **settings: Any) -> None:
        self.clock = clock if clock is not None else Clock()
        self.servers = [MemoryBeanstalk(self.clock, **settings) for _ in range(count)]
        self.pools: List[BeanstalkPool] = []

    def pool(self, *, connect: bool = True, **settings: Any) -> BeanstalkPool:
        """A :class:`BeanstalkPool` of these servers (connected to all of them
        unless ``connect=False``).  Reconnects default to a fixed 1 s and the
        health checks to none."""
        settings.setdefault("retry_policy", lambda attempt: 1.0)
        settings.setdefault("health_interval", None)
        pool = BeanstalkPool([s.endpoint() for s in self.servers], reactor=self.clock,
                             **settings)
        self.pools.append(pool)
        if connect:
            pool.start()
            self.flush()
        return pool

    def flush(self) -> None:
        """Move bytes between every client and server until nothing moves."""
        for _ in range(100000):
            moved = False
            for server in self.servers:
                moved = server._pump() or moved
            if not moved:
                return
        raise RuntimeError("flush() did not settle: something keeps writing")

    def advance(self, seconds: float, step: Optional[float] = None) -> None:
        """Let ``seconds`` pass, stopping at every timer (and every ``step``) to flush."""
        _advance(self.clock, self.flush, seconds, step)

    def result(self, d: Deferred) -> Any:
        """Flush, then ``d``'s result (or raise its error)."""
        self.flush()
        return self.servers[0].result(d)

    def close(self) -> None:
        """Close the pools made by :meth:`pool`, and every server's clients."""
        for pool in self.pools:
            pool.close()
        for server in self.servers:
            server.close()
        self.flush()
