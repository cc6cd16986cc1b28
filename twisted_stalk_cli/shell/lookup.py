# -*- test-case-name: tests.test_shell_units -*-
"""Completion's lookups, in the background.

Completing a tube name wants the server's tube list, but completion runs on
the prompt's own thread: a lookup there froze typing for as long as the
server took to answer (the 30 s reply timeout for a server that stopped).  A
:class:`TubeLookup` asks ``list-tubes`` in a thread of its own, on a
connection of its own (so it can never interleave with the user's commands
or be taken for their replies), with a short deadline; completion takes the
names of the last lookup that finished and uses what it knew meanwhile.
A Tab on a tube name asks for a lookup at once (:meth:`TubeLookup.refresh_now`)
and completes when its answer arrives, so the first Tab offers a tube created
a moment ago.

Completing a job id offers the ids the shell has seen; a job deleted since
(by a worker, another client) is still among them.  So a lookup asked with
job ids also asks ``stats-job`` for each (one pipelined round trip) and
:meth:`TubeLookup.take_gone` hands over those the server answered
``NOT_FOUND`` for, to be forgotten; a Tab on a job id waits for that answer
as it does for tubes.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, List, Optional, Sequence, Set

from .conn import Connection
from .target import Target

#: Seconds a lookup may take (connecting, then the reply).
LOOKUP_TIMEOUT = 2.0
#: Seconds between lookups.
LOOKUP_INTERVAL = 5.0
#: The most job ids one lookup checks (the most recent first).
MAX_CHECKED_IDS = 200


class TubeLookup:
    """Asks a server for its tube list in the background.

    :meth:`request` starts a lookup unless one is running or one started
    less than ``interval`` seconds ago; :meth:`take` returns the names found
    by a lookup that finished since the last call (None if none did).
    ``on_done`` is called, in the lookup's thread, when a lookup ends.
    """

    def __init__(self, target: Target, *, timeout: float = LOOKUP_TIMEOUT,
                 interval: float = LOOKUP_INTERVAL,
                 on_done: Optional[Callable[[], None]] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.target = target
        self.timeout = timeout
        self.interval = interval
        self.on_done = on_done
        self.clock = clock
        #: Why the last lookup failed (None after a success).
        self.failed: Optional[str] = None
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._conn: Optional[Connection] = None
        self._names: Optional[List[str]] = None
        #: The job ids the next lookup checks, and those found gone.
        self._check: List[int] = []
        self._gone: Set[int] = set()
        self._started: Optional[float] = None
        self._closed = False

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def request(self, job_ids: Sequence[int] = ()) -> bool:
        """Start a lookup if it is time for one; True if one started.
        ``job_ids``: the ids to check as well (see the module)."""
        with self._lock:
            if job_ids:
                self._check = list(job_ids)[:MAX_CHECKED_IDS]
            now = self.clock()
            if self._closed or self.running or (
                    self._started is not None and now - self._started < self.interval):
                return False
            self._start(now)
            return True

    def refresh_now(self, job_ids: Sequence[int] = ()) -> bool:
        """Start a lookup now, however recent the last (a Tab wants today's
        tubes, or to know which of ``job_ids`` are gone); True when one is
        under way, so ``on_done`` will be called."""
        with self._lock:
            if self._closed:
                return False
            if job_ids:
                self._check = list(job_ids)[:MAX_CHECKED_IDS]
            if self.running:
                return True
            self._start(self.clock())
            return True

    def _start(self, now: float) -> None:
        self._started = now
        self._thread = threading.Thread(target=self._run, name="stalk-lookup", daemon=True)
        self._thread.start()

    def take(self) -> Optional[List[str]]:
        """The tube names of the last lookup that finished since the last call."""
        with self._lock:
            names, self._names = self._names, None
        return names

    def take_gone(self) -> List[int]:
        """The job ids lookups found gone (``stats-job`` answered
        ``NOT_FOUND``) since the last call."""
        with self._lock:
            gone, self._gone = self._gone, set()
        return sorted(gone)

    def wait(self, timeout: float) -> None:
        """Wait for the running lookup (tests)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def close(self) -> None:
        """Stop for good: a running lookup ends with its connection."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _run(self) -> None:
        conn = self._conn
        try:
            if conn is None or not conn.connected:
                conn = Connection(self.target, connect_timeout=self.timeout,
                                  reply_timeout=self.timeout)
                conn.connect()
                with self._lock:
                    if self._closed:
                        conn.close()
                        return
                    self._conn = conn
            with self._lock:
                ids, self._check = self._check, []
            reply = conn.command("list-tubes")
            names = [str(n) for n in reply.value] if reply.ok and reply.value else None
            gone = [i for i, r in zip(ids, conn.pipeline([("stats-job", i) for i in ids]))
                    if r.word == "NOT_FOUND"] if ids else []
            with self._lock:
                if names is not None:
                    self._names = names
                self._gone.update(gone)
                self.failed = None if names is not None else reply.line.decode("ascii", "replace")
        except Exception as e:  # the connection failed, or anything else: never raise here
            self.failed = str(e) or e.__class__.__name__
            with self._lock:
                if self._conn is conn:
                    self._conn = None
            if conn is not None:
                conn.close()
        finally:
            if self.on_done is not None:
                try:
                    self.on_done()
                except Exception:
                    pass


__all__ = ["LOOKUP_INTERVAL", "LOOKUP_TIMEOUT", "MAX_CHECKED_IDS", "TubeLookup"]
