"""The server factory: owns the queue, its one timer, and the set of connections."""
from __future__ import annotations

from typing import List, Optional, Set

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.protocol import Factory
from twisted.logger import Logger

from .. import PROTOCOL_VERSION
from ..core import WorkQueue
from ..protocol.constants import DEFAULT_MAX_JOB_SIZE
from .facts import ProcessFacts
from .protocol import BeanstalkServerProtocol


class BeanstalkServerFactory(Factory):
    """Builds :class:`BeanstalkServerProtocol` connections sharing one :class:`WorkQueue`.

    All deadlines (delays, TTRs, reserve timeouts, DEADLINE_SOON, pauses) live
    in the queue's heaps; the factory keeps exactly one ``callLater`` armed at
    the earliest of them and re-arms it after every batch of input.
    """

    protocol = BeanstalkServerProtocol
    log = Logger()
    #: Extension verbs (:class:`~twisted_stalk.server.admin.Extensions`), None when off.
    extensions = None
    #: :class:`~twisted_stalk.server.limits.ConnectionLimit`, None when unlimited.
    connection_limit = None
    #: True: string stats values in double quotes, as beanstalkd 1.13 prints
    #: them; False: bare, as 1.12 does.
    stats_quoted = True

    def __init__(self, reactor: IReactorTime, max_job_size: int = DEFAULT_MAX_JOB_SIZE,
                 journal=None, queue: Optional[WorkQueue] = None,
                 version: str = PROTOCOL_VERSION) -> None:
        self.reactor = reactor
        self.queue = queue or WorkQueue(
            reactor, max_job_size=max_job_size, journal=journal,
            facts=ProcessFacts(version, reactor.seconds()))
        self.connections: Set[BeanstalkServerProtocol] = set()
        self._timer: Optional[IDelayedCall] = None
        self._timer_at: Optional[float] = None
        #: Connections woken with input buffered, to process after this batch.
        self.resume_queue: List[BeanstalkServerProtocol] = []
        self._resuming = False

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

    def resume_later(self, proto: BeanstalkServerProtocol) -> None:
        """``proto`` was woken with input buffered: process it once the
        current operation is over (never re-entering the queue)."""
        self.resume_queue.append(proto)

    def after_input(self) -> None:
        """Called after each batch of input: resume woken clients, re-arm the
        timer if the queue gained an earlier deadline."""
        if self.resume_queue:
            self._drain_resumes()
        if self.queue.wake_changed:
            self.rearm()

    def _drain_resumes(self) -> None:
        if self._resuming:
            return
        self._resuming = True
        try:
            while self.resume_queue:
                batch, self.resume_queue = self.resume_queue, []
                for proto in batch:
                    proto.resume()
        finally:
            self._resuming = False

    # The one timer.

    def rearm(self) -> None:
        """Point the one timer at the queue's next deadline."""
        at = self.queue.next_deadline()
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
        self.queue.tick()
        self._drain_resumes()
        self.rearm()
