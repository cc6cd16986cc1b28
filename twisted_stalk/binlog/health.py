# -*- test-case-name: tests.test_binlog -*-
"""Whether the binlog can write, and what it does when it cannot: a part of
:class:`~twisted_stalk.binlog.writer.BinlogJournal`.

A failed write or sync makes the journal refuse changes (``JournalError``:
the command answers INTERNAL_ERROR) while the server keeps serving, and it
tries again every :data:`RETRY_SECONDS`; :meth:`WriteHealth.health` is what
metrics and the console show of it, :meth:`WriteHealth.stats` the binlog
figures of ``stats``.
"""
from __future__ import annotations

import os
from typing import Optional

from ..core.journal import JournalError, JournalHealth
from .format import file_name

#: Seconds between retries after a failed write.
RETRY_SECONDS = 1.0


class WriteHealth:
    """A part of :class:`~twisted_stalk.binlog.writer.BinlogJournal`."""

    def stats(self):
        oldest = self.old_files.oldest
        return {
            "oldest": self.seq if oldest is None else oldest,
            "current": self.seq,
            "migrated": self.migrated,
            "written": self.written,
            "max_size": self.max_size,
        }

    def health(self) -> JournalHealth:
        """On, whether it can write (or why not), its files and their size on disk."""
        if self.closed:
            problem: Optional[str] = "closed"
        elif self.broken:
            problem = str(self.broken)
        elif self.room_error:
            problem = f"no room for a new file: {self.room_error}"
        else:
            problem = None
        size = files = 0
        try:
            with os.scandir(self.directory) as entries:
                for entry in entries:
                    if entry.name.startswith("binlog.") and entry.is_file():
                        files += 1
                        size += entry.stat().st_size
        except OSError:
            pass
        return JournalHealth(True, self.directory, problem, files, size)

    def _refuse(self) -> None:
        if self.fd < 0:
            raise JournalError("binlog is closed")
        raise JournalError(f"binlog cannot write: {self.broken}")

    def _fail(self, e: OSError) -> None:
        """A write or sync failed: refuse changes, keep serving, retry."""
        first = self.broken is None
        self.broken = f"{e.strerror or e}"
        self._ok = False
        # Replies already held stay held until the retry succeeds; others flow.
        self.pending = False
        if first:
            self.log.error("binlog: writing {file} failed ({why}): refusing changes "
                           "and retrying every {secs:g} s",
                           file=file_name(self.seq), why=self.broken, secs=RETRY_SECONDS)
        if self._retry_call is None:
            self._retry_call = self.clock.callLater(RETRY_SECONDS, self._retry)

    def _write_and_sync(self) -> bool:
        """Write out what is buffered and sync it (unless -F); False, the
        failure taken care of (:meth:`_fail`), if that failed."""
        try:
            self.write_out()
            if not self.no_fsync:
                self.sync()
        except OSError as e:
            self._fail(e)
            return False
        return True

    def _retry(self) -> None:
        self._retry_call = None
        if self.fd < 0 or not self._write_and_sync():
            return
        self.broken = None
        self._ok = True
        self.log.warn("binlog: writing {file} works again", file=file_name(self.seq))
        self._settle()
        self.compactor.schedule()


__all__ = ["RETRY_SECONDS", "WriteHealth"]
