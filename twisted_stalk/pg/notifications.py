# -*- test-case-name: tests.test_pg_nodes -*-
"""LISTEN on the queue's channel: how a node hears what other nodes did.

One dedicated connection per node runs ``LISTEN <schema>_events`` and hands
each notification's payload to the engine (:mod:`.notices` reads it).  Notifications sent while the
connection was down are lost (PostgreSQL keeps none for a listener that is
not there), so every time it comes back the engine is told to look again
(``on_up``): waiting reserves retry, timers are re-read.
"""
from __future__ import annotations

from typing import Any, Callable, Dict

from twisted.internet import defer
from twisted.logger import Logger

from .driver import PgConnection

log = Logger(namespace="twisted_stalk.pg")


class Notifications:
    """Keeps one LISTEN connection up (see the module docstring)."""

    def __init__(self, reactor: Any, conninfo: str, channel: str,
                 on_event: Callable[[bytes], None], on_up: Callable[[], None]) -> None:
        self.reactor = reactor
        self.conninfo = conninfo
        self.channel = channel
        self.on_event = on_event
        self.on_up = on_up
        #: Session settings made at connect (the node's ``application_name``).
        self.settings: Dict[str, str] = {}
        self.conn: Any = None
        self.listening = False
        self._stopped = False
        self._pause = 0.05

    def start(self) -> defer.Deferred:
        """Connect and LISTEN; fires when listening (fails if the first attempt does)."""
        conn = self.conn = PgConnection(self.reactor, self.conninfo,
                                        on_notify=self._notified, on_lost=self._lost,
                                        settings=self.settings)
        d = conn.connect()
        d.addCallback(lambda _: conn.query(f'LISTEN "{self.channel}"'))
        d.addCallback(self._listening)
        return d

    def _listening(self, _: Any) -> None:
        self.listening = True
        self._pause = 0.05
        self.on_up()

    def _notified(self, channel: bytes, payload: bytes) -> None:
        self.on_event(payload)

    def _lost(self, _: Any) -> None:
        self.listening = False
        if not self._stopped:
            self.reactor.callLater(self._pause, self._again)

    def _again(self) -> None:
        if self._stopped:
            return

        def failed(failure: Any) -> None:
            self.listening = False
            if self.conn is not None and not self.conn.lost:
                self.conn.close()
            self._pause = min(1.0, self._pause * 2)
            if not self._stopped:
                self.reactor.callLater(self._pause, self._again)

        self.start().addErrback(failed)

    def stop(self) -> None:
        self._stopped = True
        if self.conn is not None:
            self.conn.close()


__all__ = ["Notifications"]
