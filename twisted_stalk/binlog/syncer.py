# -*- test-case-name: tests.test_binlog -*-
"""The fsync thread: the periodic ``fdatasync`` of ``-f MS`` off the reactor thread.

``fdatasync`` releases the GIL, so the server keeps serving while the disk
catches up.  The reactor asks for a sync with :meth:`Syncer.request` (at most
once every MS milliseconds, see ``BinlogJournal._timed_sync``) and collects
any error from :attr:`Syncer.error` on its next request.
"""
from __future__ import annotations

import os
import threading
from typing import Callable, Optional


class Syncer(threading.Thread):
    """Runs ``fdatasync`` on the descriptor ``current_fd()`` returns, on request.

    :attr:`lock` is held while syncing; the reactor takes it before it
    replaces or closes that descriptor, so a sync never hits a closed or
    reused one.
    """

    def __init__(self, current_fd: Callable[[], int]) -> None:
        super().__init__(name="binlog-fsync", daemon=True)
        self._current_fd = current_fd
        self.lock = threading.Lock()
        self._cond = threading.Condition()
        self._wanted = False
        self._stopping = False
        #: The last fsync error, for the reactor to log (it clears it).
        self.error: Optional[OSError] = None
        #: fsyncs done (tests).
        self.syncs = 0

    def request(self) -> None:
        """Sync soon (returns at once)."""
        with self._cond:
            self._wanted = True
            self._cond.notify()

    def stop(self) -> None:
        """End the thread (waits up to 5 s for a sync in progress)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self.join(5)

    def run(self) -> None:
        while True:
            with self._cond:
                while not self._wanted and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                self._wanted = False
            with self.lock:
                fd = self._current_fd()
                if fd >= 0:
                    try:
                        os.fdatasync(fd)
                        self.syncs += 1
                    except OSError as e:
                        self.error = e
