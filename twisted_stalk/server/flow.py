# -*- test-case-name: tests.test_wire,tests.test_engine,tests.test_wire_abuse -*-
"""When a connection's input may run: held while its last reply is
outstanding or while its unsent replies pile up, resumed after.

:class:`FlowControl` is a part of
:class:`~twisted_stalk.server.protocol.BeanstalkServerProtocol`.  Input is
dispatched command by command until one of these holds it (``_halt``):

* **blocked**: the last command's reply is outstanding: a reserve waits for
  a job (its result arrives as a wake-up, :meth:`FlowControl.wake`), or the
  engine answers later (a Deferred, :meth:`FlowControl._later`; a delete
  of an engine with ``pipelined_puts``, a callback:
  :meth:`FlowControl._delete_later`); puts of such an engine form a chain
  instead (:meth:`FlowControl._chain_put`): the next puts still run,
  anything else waits for their replies;
* **stalled**: more than ``MAX_UNSENT`` bytes of replies wait for the client
  (Twisted calls :meth:`FlowControl.pauseProducing`, then
  :meth:`FlowControl.resumeProducing` once they are written);
* **yielding**: one read ran :data:`TURN_COMMANDS` commands; the rest runs on
  the reactor's next turn (:meth:`FlowControl._yield_turn`), so a client that
  pipelines thousands of costly commands (64 kB of ``stats``) cannot keep the
  others waiting for the whole read, as beanstalkd, which runs a client's
  commands one event at a time, does not;
* **closing**.

Input that arrives meanwhile is buffered (up to
:data:`MAX_BUFFERED_WHILE_WAITING`, then reading pauses) and run when the
hold ends, in order, so replies stay in order.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Callable, Deque, List, Optional

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from ..core.engine import Engine
from ..core.job import JobRecord
from ..core.later import LATER
from ..core.outcomes import WAITING
from ..protocol.constants import INTERNAL_ERROR, TIMED_OUT
from .output import MAX_BUFFERED_WHILE_WAITING
from .render import LINES, job_reply

log = Logger(namespace="twisted_stalk.protocol")

#: Puts a connection may have outstanding in one chain (then input waits).
MAX_CHAIN = 256
#: Commands one connection runs in a reactor turn before the others get theirs.
TURN_COMMANDS = 32


class FlowControl:
    """The hold/resume side of a connection (a part of the server protocol)."""

    transport: Any
    engine: Engine
    session: Any
    _buf: bytes

    def _init_flow(self) -> None:
        # Instance attributes, not class defaults (see output._init_output).
        self._eof = False
        self._closing = False
        #: True while the last command's reply is outstanding.
        self._blocked = False
        #: True while too many replies are unsent.
        self._stalled = False
        #: True from a read that used its turn until the reactor's next turn.
        self._yielding = False
        #: True while no input may be dispatched: closing, blocked, stalled or
        #: yielding (one flag for the hot loop to test).
        self._halt = False
        #: True while the transport is not being read.
        self._paused_reading = False
        #: Replies of the outstanding chained puts, in order (None: no chain).
        self._chain: Optional[Deque[List[Any]]] = None
        #: Set from the engine when the connection is made.
        self._pipelined_puts = False

    def wake(self, outcome: Any) -> None:
        """The waiting reserve's result (a JobRecord, TIMED_OUT or DEADLINE_SOON):
        the factory delivers it after the reply of the command that caused it."""
        if self._closing:
            return
        self._send(job_reply(b"RESERVED", outcome) if outcome.__class__ is JobRecord
                   else LINES[outcome])
        self._unblock()

    def withdraw_wait(self) -> bool:
        """Withdraw a waiting reserve without replying; True if one was waiting."""
        if not self._blocked or not self.engine.cancel_wait(self.session):
            return False
        self._unblock()
        return True

    def _block(self) -> None:
        self._blocked = self._halt = True

    def _later(self, d: Deferred, render: Callable[[Any], bytes]) -> None:
        """The engine will answer later: hold further input until it does."""
        self._block()
        d.addCallback(lambda outcome: self._answered(render, outcome))
        d.addErrback(self._engine_failed)

    def _chain_put(self, pri: int, delay: int, ttr: int, body: bytes) -> None:
        """A put the engine answers later while this connection's next puts
        may run (an engine with ``pipelined_puts``: puts never depend on each
        other, so one read's puts share the engine's batch statement).  The
        protocol lets only puts join (``_blocked`` with ``_halt`` clear);
        their replies go out in order, each once its own put has answered
        (``Engine.put_then``, core/later.py: a callback, no Deferred), and
        the chain's end runs what waited behind it."""
        chain = self._chain
        if chain is None:
            chain = self._chain = deque()
            self._blocked = True
        slot: List[Any] = [None]
        chain.append(slot)
        if len(chain) >= MAX_CHAIN:
            self._halt = True
        render = self._render["put"]

        def answered(outcome: Any) -> None:
            slot[0] = render(outcome)
            self._chain_answered()
        outcome = self.engine.put_then(self.session, pri, delay, ttr, body, answered)
        if outcome is not LATER:
            answered(outcome)

    def _chain_answered(self) -> None:
        chain = self._chain
        ready = []
        while chain and chain[0][0] is not None:
            ready.append(chain.popleft()[0])
        if self._closing:
            return
        if ready:
            self._write(b"".join(ready))
        if not chain:
            self._chain = None
            self._unblock()

    def _delete_later(self, job_id: int) -> None:
        """A delete the engine answers later (``Engine.delete_then``): hold
        further input until it does."""
        self._block()
        outcome = self.engine.delete_then(self.session, job_id, self._delete_answered)
        if outcome is not LATER:
            self._delete_answered(outcome)

    def _delete_answered(self, outcome: Any) -> None:
        self._answered(self._render["delete"], outcome)

    def _reserve_then(self, timeout: Optional[int]) -> None:
        """A reserve of an engine with ``pipelined_puts`` (``Engine.reserve_then``):
        input is held while it may answer later; a job or outcome it has at
        once (a job the node took for it) goes out as the plain path's does."""
        self._blocked = self._halt = True  # a command runs only while neither is set
        outcome = self.engine.reserve_then(self.session, timeout, self._reserve_answered)
        if outcome is LATER:
            return
        self._blocked = self._halt = False
        self._reserve_result(outcome)

    def _reserve_answered(self, outcome: Any) -> None:
        self._answered(self._render["reserve"], outcome)

    def _cannot_wait(self) -> bool:
        """A reserve found no job and would wait: a half-closed client
        cannot send again, so it cannot wait; its reserve times out (True)."""
        if not self._eof or self._closing:
            return False
        self.engine.cancel_wait(self.session)
        self._write(TIMED_OUT)
        return True

    def _engine_failed(self, failure) -> None:
        log.failure("engine failed a command", failure)
        self._answered(lambda _: INTERNAL_ERROR, None)

    def _answered(self, render: Callable[[Any], bytes], outcome: Any) -> None:
        if outcome is WAITING:
            # (half-closed while the engine looked: readConnectionLost
            # found no wait to cancel then)
            if self._cannot_wait():
                self._unblock()
            return  # still waiting: the result comes as a wake-up
        if self._closing:
            return
        self._write(render(outcome))
        self._unblock()

    def _yield_turn(self) -> None:
        """This read has run its turn's commands: hold the rest (buffered like
        input during any hold) until the reactor's next turn."""
        self._yielding = self._halt = True
        self.factory.reactor.callLater(0, self._next_turn)

    def _next_turn(self) -> None:
        self._yielding = False
        self._hold_ended()

    def _unblock(self) -> None:
        self._blocked = False
        self._hold_ended()

    def _hold_ended(self) -> None:
        """A hold ended: unless another lasts, read again and run what waited."""
        self._halt = self._closing or self._blocked or self._stalled or self._yielding
        if self._yielding:
            return  # the next turn runs what waits
        if self._paused_reading and not (self._blocked or self._stalled):
            self._paused_reading = False
            self.transport.resumeProducing()
        if self._buf or self._eof:
            self.resume()

    def resume(self) -> None:
        """Run the input that arrived while the hold lasted."""
        if self._halt:
            return
        if self._buf:
            buf, self._buf = self._buf, b""
            self.dataReceived(buf)
        if self._eof and not (self._blocked or self._yielding):
            self._close()

    def _buffer_while_held(self, data: bytes) -> None:
        """Input that arrives during a hold: keep it, within bounds."""
        self._buf += data
        if len(self._buf) > MAX_BUFFERED_WHILE_WAITING:
            if not self._paused_reading:
                self._paused_reading = True
                self.transport.pauseProducing()
            elif len(self._buf) > 4 * MAX_BUFFERED_WHILE_WAITING:
                # A transport that ignores pauseProducing: give up on
                # this client rather than grow without bound.
                self._buf = b""
                self.transport.abortConnection()

    # IPushProducer: Twisted's queue for this client passed its bound
    # (pause), then drained (resume).

    def pauseProducing(self) -> None:
        self._stalled = self._halt = True
        if not self._paused_reading:
            self._paused_reading = True
            self.transport.pauseProducing()

    def resumeProducing(self) -> None:
        if not self._stalled:
            return
        self._stalled = False
        self._hold_ended()

    def stopProducing(self) -> None:
        pass


__all__ = ["FlowControl", "MAX_BUFFERED_WHILE_WAITING", "TURN_COMMANDS"]
