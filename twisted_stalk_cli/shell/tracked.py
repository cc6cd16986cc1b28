# -*- test-case-name: tests.test_shell_repl -*-
"""A connection plus what the shell remembers about it across reconnects:
the tube in use, the watch list, the jobs reserved and the extension verbs."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple, Union

from twisted_stalk.protocol.constants import DEFAULT_TUBE
from twisted_stalk.protocol.replies import Reply

from .conn import Connection, WireHook
from .errors import InterruptedRequest, StalkError
from .target import Target


@dataclass
class Reserved:
    """A job this connection holds, and when its TTR runs out (monotonic)."""

    job_id: int
    deadline: Optional[float] = None
    ttr: Optional[int] = None


class TrackedConnection:
    """A :class:`~.conn.Connection` plus the state the shell keeps across
    reconnects.

    ``use`` and ``watch`` are what the user asked for; after a reconnect they
    are sent again.  ``reserved`` are the jobs reserved on the current
    connection (the server returns them to ready when it closes).
    """

    def __init__(self, target: Target, *, connect_timeout: float = 5.0,
                 reply_timeout: float = 30.0, wire: Optional[WireHook] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.conn = Connection(target, connect_timeout=connect_timeout,
                               reply_timeout=reply_timeout, wire=wire)
        self.use = DEFAULT_TUBE.decode()
        self.watch: List[str] = [DEFAULT_TUBE.decode()]
        self.reserved: Dict[int, Reserved] = {}
        self.clock = clock
        #: True once a connection has been made (so later ones are reconnects).
        self.ever_connected = False
        #: The extension verbs the server advertises (``capabilities``, asked
        #: on each connect); empty for beanstalkd or ours without --extensions.
        self.capabilities: FrozenSet[str] = frozenset()

    @property
    def target(self) -> Target:
        return self.conn.target

    @property
    def connected(self) -> bool:
        return self.conn.connected

    def set_wire(self, hook: Optional[WireHook]) -> None:
        self.conn.wire = hook

    def connect(self) -> List[str]:
        """Connect, learn the server's extension verbs and restore use/watch;
        returns the commands replayed."""
        self.conn.connect()
        self.reserved.clear()
        self.capabilities = frozenset()
        self.ever_connected = True
        self.learn_capabilities()
        return self.restore()

    def learn_capabilities(self) -> FrozenSet[str]:
        """Ask ``capabilities`` quietly (not shown by ``\\wire``: a stock
        server answers UNKNOWN_COMMAND, which means none)."""
        hook, self.conn.wire = self.conn.wire, None
        try:
            reply = self.internal("capabilities")
        finally:
            self.conn.wire = hook
        self.track([], reply)
        return self.capabilities

    def restore(self) -> List[str]:
        replayed: List[str] = []
        default = DEFAULT_TUBE.decode()
        if self.use != default:
            self.internal("use", self.use)
            replayed.append(f"use {self.use}")
        for tube in self.watch:
            if tube != default:
                self.internal("watch", tube)
                replayed.append(f"watch {tube}")
        if default not in self.watch and self.watch:
            self.internal("ignore", default)
            replayed.append(f"ignore {default}")
        return replayed

    def internal(self, name: str, *args: Union[int, str]) -> Reply:
        """Send a command of the shell's own (not typed by the user); not
        while the server holds part of a command (it would read this one as
        the rest of it)."""
        if self.conn.framing.waiting:
            raise StalkError(f"{name} not sent: {self.conn.framing.describe()}")
        return self.conn.command(name, *args)

    def take_loss(self) -> Optional[Tuple[str, List[int]]]:
        """A loss not reported yet (noticed outside a request: by
        :meth:`poll_closed` while idle): why, and the reserved job ids the
        server returned to ready; the connection is then forgotten."""
        why = self.conn.lost
        if why is None or self.conn.connected:
            return None
        return why, self.drop()

    def poll_closed(self) -> bool:
        """Whether the connection is closed, noticing (never waiting) that
        the server closed it while the shell was idle (see :meth:`take_loss`)."""
        return self.conn.poll_closed()

    def drop(self) -> List[int]:
        """Close the connection; returns the reserved job ids the server frees."""
        returned = sorted(self.reserved)
        self.reserved.clear()
        self.conn.close()
        return returned

    def request(self, data: bytes, *,
                on_wait: Optional[Callable[[], None]] = None) -> List[Reply]:
        """Send one request's bytes and read the reply to each command they
        complete (:meth:`~.conn.Connection.exchange`: none while the server
        waits for the rest of a command).

        ``on_wait`` is called if a blocking request has no answer after a
        moment.  Ctrl-C while waiting drops the connection, reconnects and
        restores use/watch, then raises :class:`InterruptedRequest`.
        """
        try:
            return self.conn.exchange(data, on_wait=on_wait)
        except KeyboardInterrupt:
            returned = self.drop()
            try:
                self.connect()
            except StalkError as e:
                raise InterruptedRequest(returned, False, str(e)) from None
            raise InterruptedRequest(returned, True) from None

    @property
    def waiting(self) -> str:
        """What the server waits for before it can answer ("" when nothing):
        the rest of a line sent without CRLF, or of a put's body."""
        return self.conn.framing.describe() if self.conn.connected else ""

    def track(self, args: Sequence[str], reply: Reply) -> None:
        """Update use/watch/reserved from ``reply`` to its command with ``args``."""
        command = reply.command
        word = reply.word
        if word == "USING" and reply.tube is not None:
            self.use = reply.tube
        elif word == "WATCHING" and args:
            tube = args[0]
            if command == "watch" and tube not in self.watch:
                self.watch.append(tube)
            elif command == "ignore" and tube in self.watch:
                self.watch.remove(tube)
        elif command == "list-tubes-watched" and reply.ok and reply.value:
            self.watch = list(reply.value)  # type: ignore[arg-type]
        elif word == "RESERVED":
            if reply.job_id is not None:
                self.reserved[reply.job_id] = Reserved(reply.job_id)
        elif command in ("delete", "release", "bury") and args and reply.ok:
            self.reserved.pop(_int(args[0]), None)
        elif command == "quit":
            self.reserved.clear()
        elif command == "capabilities":
            if reply.ok:
                self.capabilities = frozenset(reply.value)  # type: ignore[arg-type]
            elif word == "UNKNOWN_COMMAND":
                self.capabilities = frozenset()

    def learn_deadline(self, job_id: int) -> None:
        """Ask the server how long a reserved job has left (stats-job)."""
        job = self.reserved.get(job_id)
        if job is None:
            return
        reply = self.internal("stats-job", job_id)
        stats = reply.value
        if not reply.ok or not isinstance(stats, dict):
            return
        left, ttr, state = stats.get("time-left"), stats.get("ttr"), stats.get("state")
        if state != "reserved":
            self.reserved.pop(job_id, None)
            return
        if isinstance(left, int):
            # time-left is truncated to whole seconds: the real deadline is up
            # to a second later, so count from the start of that second.
            job.deadline = self.clock() + left
        if isinstance(ttr, int):
            job.ttr = ttr


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1


__all__ = ["Reserved", "TrackedConnection"]
