# -*- test-case-name: tests.test_binlog -*-
"""Getting disk space back: compaction, and dropping files no live job needs.

A job's PUT record (or its latest full copy) lives in file ``job.binlog_file``;
its later UPDATEs, and its DELETE, are in that file or newer ones.  So the
old files can only go oldest-first, and a file can go once every job whose
full copy is in it or in an older file is gone:

Dropping dead files (:meth:`Compactor.drop_dead_files`)
    Removes the old files before the oldest one holding a live job's full
    copy.  Nothing is copied, so it works when no new file can be made (a
    full disk), and startup does it before it creates its file.

Compaction (:meth:`Compactor.step`)
    When the files hold much more than the live jobs (:meth:`Compactor.wanted`),
    the current file number becomes the boundary, the full state of every job
    whose copy is older than that is copied into the current file, a slice per
    reactor turn, and then the older files are removed.  Updates and deletes
    never need copying: files only go oldest-first, and a job's copy is always
    written after its older records.  Buried jobs are copied first, tube by
    tube, so that burial order survives.  With no room for a new file it only
    starts when the copies fit in the current file with room to spare.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional

from twisted.logger import Logger

from ..core.journal import JournalError
from ..wording import counted
from .files import sync_directory
from .format import file_name

if TYPE_CHECKING:  # pragma: no cover
    from .writer import BinlogJournal

#: Jobs copied per compaction slice (one slice per reactor turn).
COMPACT_SLICE = 2000
#: Seconds before a compaction that could not write goes on.
RETRY_SECONDS = 1.0
#: Compact when the directory holds this many files and more garbage than live data.
MANY_FILES = 8


def oldest_live_file(jobs, floor: int, ceiling: int) -> int:
    """The oldest file holding the full copy of one of ``jobs`` (a dict of
    live jobs), at most ``ceiling``; stops looking once it finds one at or
    before ``floor`` (the oldest file there is).  Jobs are in id order, which
    roughly is file order, so that is usually at once."""
    oldest = ceiling
    for job in jobs.values():
        seq = job.binlog_file
        if seq < oldest:
            oldest = seq
            if seq <= floor:
                break
    return oldest


class Compactor:
    """Reclaims the space of a :class:`~twisted_stalk.binlog.writer.BinlogJournal`.

    :attr:`boundary` is the file number a running compaction copies jobs up
    to (None when none runs): the journal writes a full copy instead of an
    UPDATE for a job whose copy is older, so nothing waits to be copied twice.
    """

    log = Logger(namespace="twisted_stalk.binlog")

    def __init__(self, journal: "BinlogJournal") -> None:
        self.journal = journal
        self.boundary: Optional[int] = None
        #: Compact at the next chance whatever the sizes (damage was found).
        self.force = False
        self._todo: Optional[List[Any]] = None
        self._todo_i = 0
        #: Bytes of the current file the copies leave free (for deletes).
        self._reserve = 0
        self._call: Any = None

    # ---------------------------------------------------------------- dropping

    def drop_dead_files(self) -> int:
        """Remove the old files no live job needs; returns how many went.

        What is buffered is written and synced first (raises :class:`OSError`
        if that fails): a job's newer copy must be on disk before its old one
        goes, and so must the current file's header, which carries the next
        job id.
        """
        j = self.journal
        keep_from = self._first_needed(j.seq)
        if keep_from is None:
            return 0
        j.write_out()
        if not j.no_fsync:
            j.sync()
        return self._remove_below(keep_from)

    def drop_dead_files_before_start(self) -> int:
        """:meth:`drop_dead_files` for a journal that has no file yet (startup):
        the newest old file stays, since until the new file's header is on
        disk it is what says how high job ids went."""
        newest = self.journal.old_files.newest
        keep_from = None if newest is None else self._first_needed(newest)
        if keep_from is None:
            return 0
        return self._remove_below(keep_from)

    def _first_needed(self, ceiling: int) -> Optional[int]:
        """The oldest file to keep (at most ``ceiling``), or None when every
        old file is still needed."""
        j = self.journal
        first = j.old_files.oldest
        if first is None or j.engine is None:
            return None
        keep_from = oldest_live_file(j.engine.jobs, first, ceiling)
        return keep_from if keep_from > first else None

    def _remove_below(self, keep_from: int) -> int:
        j = self.journal
        removed, freed = j.old_files.remove_below(keep_from)
        if removed:
            if not j.no_fsync:
                sync_directory(j.directory)
            self.log.info("binlog: removed {files} no live job needs ({size})",
                          files=counted(removed, "file"), size=counted(freed, "byte"),
                          removed=removed, freed=freed)
        return removed

    # -------------------------------------------------------------- compaction

    def wanted(self) -> bool:
        """Whether compaction should start now."""
        j = self.journal
        if not j.old_files:
            return False
        live = j.live_bytes
        if not self.force:
            garbage = j.old_files.total + j.pos - live
            if not (garbage > live + j.max_size
                    or (len(j.old_files) >= MANY_FILES and garbage > live)):
                return False
        if j.room_error is not None:
            # No new file can be made: the copies must fit in the current
            # one, and leave half of what is left for deletes and releases.
            return live <= j.free_bytes // 2
        return True

    def schedule(self, delay: float = 0.0) -> None:
        """Run :meth:`step` after ``delay`` seconds (if it is not due already)."""
        j = self.journal
        if self._call is None and j.fd >= 0:
            self._call = j.clock.callLater(delay, self.step)

    def cancel(self) -> None:
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()

    def step(self) -> None:
        """One slice of compaction (runs once per reactor turn while needed)."""
        self._call = None
        j = self.journal
        if j.fd < 0 or j.engine is None:
            return
        if j.broken is not None:
            return  # the journal's retry reschedules
        try:
            if self.boundary is None:
                if not self.wanted():
                    return
                self.start()
            jobs = j.engine.jobs
            boundary = self.boundary
            todo = self._todo
            assert boundary is not None and todo is not None
            i = self._todo_i
            n = len(todo)
            budget = COMPACT_SLICE
            migrate = j.migrate
            reserve = self._reserve
            while i < n and budget:
                job = todo[i]
                if job.binlog_file < boundary and jobs.get(job.id) is job:
                    migrate(job, reserve)
                    budget -= 1
                i += 1
            self._todo_i = i
            if i < n:
                j.write_out()
                self.schedule()
                return
            self._finish()
        except (JournalError, OSError) as e:
            self.log.warn("binlog: compaction paused ({why}); retrying", why=e)
            self.schedule(RETRY_SECONDS)

    def start(self) -> None:
        """Fix the boundary and copy the buried jobs (the rest go slice by slice)."""
        j = self.journal
        boundary = self.boundary = j.seq
        self.force = False
        # The copies leave the room puts leave, kept for deletes and releases
        # (should the disk fill meanwhile); with no room for a new file, what
        # wanted() saw fit, half of what is left.
        self._reserve = j.slack if j.room_error is None else j.free_bytes // 2
        # Buried jobs come back in burial order, which is the order of their
        # last records: copy each tube's buried list from its first old copy
        # to its end, in order, so the copies keep that order.
        for t in list(j.engine.tube_list):
            if not t.buried:
                continue
            buried = list(t.buried.values())
            for i, job in enumerate(buried):
                if job.binlog_file < boundary:
                    for later in buried[i:]:
                        j.migrate(later, self._reserve)
                    break
        self._todo = list(j.engine.jobs.values())
        self._todo_i = 0

    def _finish(self) -> None:
        j = self.journal
        boundary = self.boundary
        assert boundary is not None
        j.write_out()
        if not j.no_fsync:
            j.sync()
        removed, freed = j.old_files.remove_below(boundary)
        if not j.no_fsync:
            sync_directory(j.directory)
        self.log.info("binlog: compacted: removed {files} ({size}); live "
                      "jobs now start at {file}", removed=removed, freed=freed,
                      files=counted(removed, "file"), size=counted(freed, "byte"),
                      file=file_name(boundary))
        self.boundary = None
        self._todo = None
        self._todo_i = 0
        j.space_freed()
