# -*- test-case-name: tests.test_binlog -*-
"""Getting disk space back: compaction.

A job's PUT record (or its latest full copy) lives in file ``job.binlog_file``;
its later UPDATEs, and its DELETE, are in that file or newer ones.  When the
files hold much more than the live jobs (:meth:`Compactor.wanted`), the
current file number becomes the boundary, the full state of every job whose
copy is older than that is copied into the current file, a slice per reactor
turn (:meth:`Compactor.step`), and then the older files are removed.  Updates
and deletes never need copying: files only go oldest-first, and a job's copy
is always written after its older records.  Buried jobs are copied first,
tube by tube, so that burial order survives.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional

from twisted.logger import Logger

from ..core.journal import JournalError
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
        self._call: Any = None

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
        if j.fd < 0 or j.queue is None:
            return
        if j.broken is not None:
            return  # the journal's retry reschedules
        try:
            if self.boundary is None:
                if not self.wanted():
                    return
                self.start()
            jobs = j.queue.jobs
            boundary = self.boundary
            todo = self._todo
            assert boundary is not None and todo is not None
            i = self._todo_i
            n = len(todo)
            budget = COMPACT_SLICE
            migrate = j.migrate
            while i < n and budget:
                job = todo[i]
                if job.binlog_file < boundary and jobs.get(job.id) is job:
                    migrate(job)
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
        # Buried jobs come back in burial order, which is the order of their
        # last records: copy each tube's buried list from its first old copy
        # to its end, in order, so the copies keep that order.
        for t in list(j.queue.tube_list):
            if not t.buried:
                continue
            buried = list(t.buried.values())
            for i, job in enumerate(buried):
                if job.binlog_file < boundary:
                    for later in buried[i:]:
                        j.migrate(later)
                    break
        self._todo = list(j.queue.jobs.values())
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
        self.log.info("binlog: compacted: removed {removed} files ({freed} bytes); live "
                      "jobs now start at {file}", removed=removed, freed=freed,
                      file=file_name(boundary))
        self.boundary = None
        self._todo = None
        self._todo_i = 0
