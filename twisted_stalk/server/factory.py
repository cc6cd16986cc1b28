# -*- test-case-name: tests.test_wire -*-
"""The server factory: owns the engine, its one timer, the connections, and the
delivery of wake-ups.  It takes an engine already built (``twisted_stalk.engines``
chooses and builds one): which engine serves is no concern of the server."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Set

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.protocol import Factory
from twisted.logger import Logger

from ..core.engine import Engine
from ..core.session import Session
from . import _fastio
from .peers import ConnectionFacts, facts_of, peer_text
from .protocol import RENDER, BeanstalkServerProtocol
from .render import render_table


class BeanstalkServerFactory(Factory):
    """Builds :class:`BeanstalkServerProtocol` connections sharing one engine.

    All deadlines (delays, TTRs, reserve timeouts, DEADLINE_SOON, pauses) live
    in the engine's heaps; the factory keeps exactly one ``callLater`` armed
    at the earliest of them and re-arms it after every batch of input.

    Wake-ups (a waiting reserve's result, caused by another connection's
    command or by the timer) are delivered by :meth:`after_input`, after the
    reply of the command that caused them has been written.
    """

    protocol = BeanstalkServerProtocol
    log = Logger()
    #: Extension verbs (:class:`~twisted_stalk.server.admin.Extensions`), None when off.
    extensions = None
    #: :class:`~twisted_stalk.server.limits.ConnectionLimit`, None when unlimited.
    connection_limit = None

    def __init__(self, reactor: IReactorTime, engine: Engine) -> None:
        self.reactor = reactor
        self.engine = engine
        #: An engine that queues wake-ups outside a command calls this.
        self.engine.notify = self.after_input
        self.connections: Set[BeanstalkServerProtocol] = set()
        #: Outcome renderers by command name (see :meth:`set_stats_quoted`).
        self.render: Dict[str, Callable[[Any], bytes]] = RENDER
        #: Plain-socket connections read and write through _fastio.DirectIO.
        self.direct_io = _fastio.ENABLED
        self._timer: Optional[IDelayedCall] = None
        self._timer_at: Optional[float] = None
        self._delivering = False

    def connection_facts(self) -> List[ConnectionFacts]:
        """What a console shows of each open client connection."""
        return [facts_of(peer_text(proto.transport), proto.session)
                for proto in list(self.connections)
                if getattr(proto, "session", None) is not None and not proto.session.closed]

    def peer_of(self, session: Session) -> Optional[str]:
        """The peer of the connection whose engine session is ``session``
        (None: not one of this server's connections)."""
        proto = session.frontend
        if proto in self.connections:
            return peer_text(proto.transport)  # type: ignore[attr-defined]
        return None

    def set_stats_quoted(self, quoted: bool) -> None:
        """Stats string values in double quotes (beanstalkd 1.13, the
        default) or bare (beanstalkd 1.12, ``--stats-yaml=1.12``)."""
        self.render = RENDER if quoted else render_table(quoted=False)

    # Connections.

    def buildProtocol(self, addr):
        limit = self.connection_limit
        if limit is not None and len(self.connections) >= limit.maximum:
            return limit.refuse(addr)  # None: the port closes the socket at once
        return Factory.buildProtocol(self, addr)

    def connection_opened(self, proto: BeanstalkServerProtocol) -> None:
        self.connections.add(proto)
        if self.connection_limit is not None:
            self.connection_limit.opened(len(self.connections))

    def connection_closed(self, proto: BeanstalkServerProtocol) -> None:
        self.connections.discard(proto)
        if self.connection_limit is not None:
            self.connection_limit.closed(len(self.connections))

    def after_input(self) -> None:
        """After a read, a timer or a disconnect: deliver the engine's
        wake-ups (a woken connection then runs the input it had buffered,
        which may cause more), and re-arm the timer if the engine gained an
        earlier deadline.  A call made while delivering returns at once: the
        delivering loop picks up what it queued."""
        if self._delivering:
            return
        self._delivering = True
        engine = self.engine
        try:
            while engine.wakeups:
                wakeups = engine.wakeups
                engine.wakeups = []
                for s, outcome in wakeups:
                    if not s.closed:
                        try:
                            s.frontend.wake(outcome)
                        except Exception:  # one connection's failure is not another's
                            self.log.failure("delivering a wake-up")
        finally:
            self._delivering = False
        if engine.wake_changed:
            self.rearm()

    # The one timer.

    def rearm(self) -> None:
        """Point the one timer at the engine's next deadline."""
        at = self.engine.next_deadline()
        timer = self._timer
        if at is None:
            if timer is not None and timer.active():
                timer.cancel()
            self._timer = self._timer_at = None
            return
        delay = max(0.0, at - self.reactor.seconds())
        if timer is not None and timer.active():
            if self._timer_at != at:
                self._timer_at = at
                timer.reset(delay)
            return
        self._timer_at = at
        self._timer = self.reactor.callLater(delay, self._fire)

    def _fire(self) -> None:
        self._timer = self._timer_at = None
        self.engine.tick()
        self.after_input()
        self.rearm()
