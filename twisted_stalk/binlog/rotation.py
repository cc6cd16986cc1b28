# -*- test-case-name: tests.test_binlog -*-
"""Starting a new binlog file when one is full, and what happens when there is
no room for it: a part of :class:`~twisted_stalk.binlog.writer.BinlogJournal`.

The new file is created inside the change that needs it; with no room, the
old files no live job needs are removed and it is tried once more; then the
change is refused (``JournalError``), compaction is asked to make room, and
the next change tries again (at once if a job was deleted meanwhile, else
after :data:`ROOM_RETRY_SECONDS`).
"""
from __future__ import annotations

from typing import Tuple

from ..core.journal import JournalError
from .files import create_file, finish_file, sync_directory
from .format import HEADER_SIZE, file_name

#: Seconds before a change tries again to make a new file after there was no room.
ROOM_RETRY_SECONDS = 0.25


class FileRotation:
    """A part of :class:`~twisted_stalk.binlog.writer.BinlogJournal`."""

    def _make_room(self, size: int) -> None:
        """Start a new file for a record of ``size`` bytes, or raise JournalError."""
        now = self.clock.seconds()
        if now < self._room_retry_at and self.live_bytes >= self._room_live_bytes:
            raise JournalError(f"binlog: no room for a new file: {self.room_error}")
        try:
            self.write_out()
        except OSError as e:
            self._fail(e)
            raise JournalError(f"binlog write failed: {self.broken}")
        try:
            fd, limit = self._create_file(self.seq + 1, size)
        except OSError as e:
            fd, limit = self._reclaim_for(size, e, now)
        if self.room_error is not None:
            self.room_error = None
            self.log.warn("binlog: there is room again in {dir}", dir=self.directory)
        old_fd, old_seq, old_pos = self.fd, self.seq, self.pos
        if self._syncer is not None:
            with self._syncer.lock:
                self.fd = fd
        self.fd, self.seq, self.pos, self.limit = fd, old_seq + 1, HEADER_SIZE, limit
        self._free = limit - HEADER_SIZE
        error = finish_file(old_fd, old_pos, not self.no_fsync)
        if error is not None:
            self.log.error("binlog: finishing {file} failed: {why}",
                           file=file_name(old_seq), why=error.strerror or error)
        self.old_files.add(old_seq, old_pos)
        self._sync_dir()
        self.compactor.schedule()

    def _reclaim_for(self, size: int, error: OSError, now: float) -> Tuple[int, int]:
        """No room for a new file: remove the old files no live job needs and
        try once more; else refuse the change (JournalError) until there is
        room, and let compaction try to make some."""
        try:
            dropped = self.compactor.drop_dead_files()
        except OSError as e:
            self._fail(e)
            raise JournalError(f"binlog write failed: {self.broken}")
        if dropped:
            try:
                return self._create_file(self.seq + 1, size)
            except OSError as e:
                error = e
        self._room_retry_at = now + ROOM_RETRY_SECONDS
        self._room_live_bytes = self.live_bytes
        if self.room_error is None:
            self.log.error("binlog: cannot create {file} in {dir} ({why}): refusing "
                           "changes that need it until there is room",
                           file=file_name(self.seq + 1), dir=self.directory,
                           why=error.strerror or error)
        self.room_error = error.strerror or str(error)
        self.compactor.schedule()
        raise JournalError(f"binlog: no room for a new file: {self.room_error}")

    def _create_file(self, seq: int, need: int) -> Tuple[int, int]:
        """Create ``binlog.<seq>`` with room for a ``need``-byte record; (fd, capacity)."""
        capacity = max(self.max_size, HEADER_SIZE + need + self.slack)
        next_id = self.engine.next_id if self.engine is not None else 1
        return create_file(self.directory, seq, next_id, capacity), capacity

    def _sync_dir(self) -> None:
        if not self.no_fsync:
            sync_directory(self.directory)


__all__ = ["FileRotation", "ROOM_RETRY_SECONDS"]
