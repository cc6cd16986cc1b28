# -*- test-case-name: tests.test_client_connection,tests.test_client_wire -*-
"""A client's main connection: reconnected with backoff (with jitter, so that
the clients a server restart cut off do not all come back at once), its
default tubes applied before it is used, commands run on it now or once it is
up.  A part of :class:`~twisted_stalk.client.client.BeanstalkClient`; its
reserves run on connections of their own (:mod:`.reserve`)."""
from __future__ import annotations

import random
from typing import Any, Callable, Optional, TypeVar

from twisted.application.internet import ClientService
from twisted.internet.defer import CancelledError, Deferred, TimeoutError, fail, succeed
from twisted.internet.task import deferLater
from twisted.python.failure import Failure

from .errors import ClientClosed, ConnectTimeout
from .protocol import BeanstalkClientFactory, BeanstalkProtocol

T = TypeVar("T")


def backoff_with_jitter(initial: float = 0.1, factor: float = 1.5, maximum: float = 10.0,
                        spread: float = 0.5,
                        rng: Callable[[], float] = random.random) -> Callable[[int], float]:
    """A reconnect policy: before attempt *n* wait ``initial * factor ** n``
    seconds, at most ``maximum``, times a random factor between ``1 - spread``
    and 1, so that clients cut off by one server restart do not all
    reconnect at the same instant."""
    def delay(attempt: int) -> float:
        return min(maximum, initial * factor ** min(attempt, 100)) * (1.0 - spread * rng())
    return delay


#: Default reconnect policy: 0.1 s growing 1.5x per failure up to 10 s, each
#: delay shortened by a random 0-50 % (jitter).
DEFAULT_RETRY_POLICY = backoff_with_jitter()


class MainLink:
    """A client's main connection, managed by a ClientService (reconnects
    with backoff): a part of :class:`~twisted_stalk.client.client.BeanstalkClient`."""

    def __init__(self, client: Any) -> None:
        #: The :class:`~twisted_stalk.client.client.BeanstalkClient` (not
        #: imported: it imports this module).
        self.client = client
        self.proto: Optional[BeanstalkProtocol] = None
        self.factory = BeanstalkClientFactory(
            client.clock, timeout=client.timeout, reserve_grace=client.reserve_grace,
            max_job_size=client.max_job_size, codec=client.codec, client=client)
        self.service = ClientService(client.endpoint, self.factory,
                                     retryPolicy=client.retry_policy, clock=client.clock,
                                     prepareConnection=self._prepare)
        self.connections = 0

    def start(self) -> None:
        if not self.service.running:
            self.service.startService()

    def stop(self) -> Deferred:
        proto, self.proto = self.proto, None
        if proto is not None:
            proto.close()
        if not self.service.running:
            return succeed(None)
        return self.service.stopService()

    def _prepare(self, connected: Any) -> Deferred:
        proto: BeanstalkProtocol = getattr(connected, "_protocol", connected)
        d = self.client.defaults.apply(proto)

        def ready(_: Any) -> None:
            if proto.connected:
                self.proto = proto
                self.connections += 1
                proto.when_lost().addCallback(self._lost, proto)
                self.client._connection_made(self.connections > 1)
        return d.addCallback(ready)

    def _lost(self, _: Any, proto: BeanstalkProtocol) -> None:
        if self.proto is proto:
            self.proto = None
        self.client._connection_lost(proto.closed_reason or "connection closed")

    def call(self, fn: Callable[[BeanstalkProtocol], "Deferred[T]"]) -> "Deferred[T]":
        """Run ``fn`` with the connected protocol, now or once connected."""
        proto = self.proto
        if proto is not None and proto.connected:
            return fn(proto)
        return self.later(fn)

    def _when_connected(self) -> "Deferred[BeanstalkProtocol]":
        def check(proto: Any) -> Any:
            if proto.connected:
                return proto
            # The connection just closed and the service has not noticed yet
            # (we are inside the protocol's connectionLost): ask again later.
            later = deferLater(self.client.clock, 0, lambda: None)
            return later.addCallback(lambda _: self._when_connected())
        return self.service.whenConnected().addCallback(check)

    def later(self, fn: Callable[[BeanstalkProtocol], "Deferred[T]"]) -> "Deferred[T]":
        client = self.client
        if client._closed:
            return fail(ClientClosed("the client is closed"))
        self.start()
        d = self._when_connected()
        if client.connect_timeout is not None:
            d.addTimeout(client.connect_timeout, client.clock)

        def failed(f: Failure) -> Failure:
            if f.check(TimeoutError):
                return Failure(ConnectTimeout(
                    f"no connection to {client.name} within "
                    f"{client.connect_timeout:g} s"))
            if f.check(CancelledError) and client._closed:
                return Failure(ClientClosed("the client was closed"))
            return f
        d.addErrback(failed)
        return d.addCallback(fn)


__all__ = ["DEFAULT_RETRY_POLICY", "MainLink", "backoff_with_jitter"]
