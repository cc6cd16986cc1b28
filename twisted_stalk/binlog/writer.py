# -*- test-case-name: tests.test_binlog -*-
"""The binlog journal: the :class:`~twisted_stalk.core.journal.Journal` the engine calls.

:class:`BinlogJournal` owns the file being written: it packs records, writes
each reactor turn's records at the end of the turn, fsyncs by policy, starts
a new file when one is full, and refuses changes while it cannot write.  The
other concerns are its parts and helpers: :mod:`.rotation` (a new file when
one is full, and no room for it), :mod:`.health` (failed writes, retries,
what it reports), :mod:`.format` (the record layout),
:mod:`.files` (creating, finishing and removing files), :mod:`.syncer` (the
``-f MS`` fsync thread), :mod:`.compaction` (getting space back),
:mod:`.replay` (reading a directory back) and :mod:`.lock`.

Hot path
    ``job_put``/``job_updated``/``job_deleted`` pack one record into a
    bytearray (one ``struct.pack`` plus a CRC) and note that the journal is
    *pending*.  While it is pending the server holds every reply (see
    ``BeanstalkServerProtocol._send``).  A ``callLater(0)`` flush at the end
    of the reactor turn writes the whole turn's records with one ``pwrite``,
    fsyncs when the policy says so, and then lets the held replies go.  So no
    reply ever leaves before the records it depends on are written (and, with
    ``-f 0``, on disk), and a turn costs one write and at most one fsync however
    many commands it served.

Space
    Files are preallocated to ``-s`` bytes when created, so writing into them
    cannot run out of space; running out shows when the next file cannot be
    created, which happens synchronously inside the change that needs the
    room.  Then the old files no live job needs are removed and the file is
    tried again; if there is still no room, that change raises
    :class:`JournalError` and is refused, compaction starts if its copies fit
    in the current file, and the next change tries again (at once if a job
    was deleted meanwhile, else after ``ROOM_RETRY_SECONDS``).  The last
    ``slack`` bytes of a file are kept for releases, buries and deletes, so
    those keep working for a while after puts are refused.
"""
from __future__ import annotations

import os
from typing import Callable, List, Optional
from zlib import crc32

from twisted.logger import Logger

from ..core.job import BURIED, DELAYED, READY, RESERVED
from ..core.journal import (
    JournaledEngine,
    JournalError,
    UPDATE_BURY,
    UPDATE_KICK,
    UPDATE_RELEASE,
    UPDATE_RESERVE,
    UPDATE_TIMEOUT,
)
from ..protocol.constants import DEFAULT_BINLOG_SIZE
from ..wording import counted
from .compaction import Compactor
from .files import OldFiles, check_directory, finish_file, round_size
from .importer import BeanstalkdFiles, move_aside, read_beanstalkd_files
from .health import RETRY_SECONDS, WriteHealth
from .format import (
    CRC,
    DELETE,
    DELETE_PAYLOAD,
    DELETE_SIZE,
    F_MIGRATED,
    HEADER_SIZE,
    MARK,
    PUT,
    PUT_FIXED,
    PUT_PAYLOAD_FIXED,
    T_DELETE,
    T_PUT,
    T_UPDATE,
    UPDATE,
    UPDATE_PAYLOAD,
    UPDATE_SIZE,
    file_name,
)
from .lock import DirectoryLock
from .rotation import ROOM_RETRY_SECONDS, FileRotation
from .replay import BinlogError, Recovery, gc_paused, read_directory, restore_into
from .syncer import Syncer

_PUT_PACK = PUT.pack
_UPDATE_PACK = UPDATE.pack
_DELETE_PACK = DELETE.pack
_CRC_PACK = CRC.pack
_ZEROS = (0, 0, 0, 0, 0)
_TAIL = PUT_FIXED - PUT_PAYLOAD_FIXED  # record header and crc: bytes besides the payload
_join = b"".join
_PUT_PAYLOAD = PUT_PAYLOAD_FIXED
_UPDATE_RECORD_TAIL = UPDATE_PAYLOAD

__all__ = ["BinlogJournal", "RETRY_SECONDS", "ROOM_RETRY_SECONDS", "round_size"]


class BinlogJournal(FileRotation, WriteHealth):
    """Write-ahead log of every change that must survive a restart.

    ``clock`` is the reactor (``seconds``, ``callLater``, and, when present,
    ``addSystemEventTrigger``) or a ``twisted.internet.task.Clock`` in tests.
    Use :meth:`open` (lock, read the directory), then :meth:`attach` (restore
    the jobs into the engine and start a new file).
    """

    log = Logger(namespace="twisted_stalk.binlog")

    def __init__(self, directory: str, clock, max_size: int = DEFAULT_BINLOG_SIZE,
                 fsync_ms: int = 50, no_fsync: bool = False,
                 sync_thread: bool = False) -> None:
        self.directory = os.path.abspath(directory)
        self.clock = clock
        self.max_size = round_size(max_size)
        self.fsync_ms = int(fsync_ms)
        self.no_fsync = bool(no_fsync)
        self.sync_each_turn = self.fsync_ms == 0 and not self.no_fsync
        #: With -f MS, the periodic fsync runs in a thread (the server passes
        #: True; Clock-driven tests keep it inline and deterministic).
        self._syncer: Optional[Syncer] = None
        self._want_sync_thread = sync_thread and self.fsync_ms > 0 and not self.no_fsync
        #: Room kept in each file for updates and deletes when puts are refused.
        self.slack = min(65536, self.max_size // 8)
        #: True while records are buffered or written but not yet settled
        #: (written, and with -f 0 synced): the server holds replies meanwhile.
        self.pending = False
        self._settled: List[Callable[[], None]] = []
        self._buf = bytearray()
        self._flush_call = None
        self._sync_call = None
        self._retry_call = None
        self._last_sync = 0.0
        #: Why no new file can be made (no room), else None.
        self.room_error: Optional[str] = None
        self._room_retry_at = 0.0
        self._room_live_bytes = 0
        #: Why writing is impossible (a failed write is being retried), else None.
        self.broken: Optional[str] = None
        self.engine: Optional[JournaledEngine] = None
        self.fd = -1
        self.seq = 0
        self.pos = 0
        self.limit = 0
        #: Bytes left in the current file after what is written and buffered.
        self._free = 0
        #: True while changes can be recorded (open, not broken).
        self._ok = False
        #: The files before the current one.
        self.old_files = OldFiles(self.directory)
        self.compactor = Compactor(self)
        #: Bytes a full copy of every live job takes.
        self.live_bytes = 0
        self.written = 0
        self.migrated = 0
        self._lock: Optional[DirectoryLock] = None
        self._recovery: Optional[Recovery] = None
        #: beanstalkd's files found by open(), moved aside by attach().
        self._import: Optional[BeanstalkdFiles] = None
        self.recovery: Optional[Recovery] = None
        self.closed = False

    # ------------------------------------------------------------------ start

    def open(self) -> "BinlogJournal":
        """Check and lock the directory and read it (raises :class:`BinlogError`)."""
        d = self.directory
        check_directory(d)
        self._lock = DirectoryLock(d).acquire()
        try:
            with gc_paused():
                found = self._import = read_beanstalkd_files(d)
                if found is None:
                    self._recovery = read_directory(d)
                else:
                    self._recovery = read_directory(d, found.recovery, found.seqs)
        except BinlogError:
            self._lock.release()
            raise
        except OSError as e:
            self._lock.release()
            raise BinlogError(f"cannot read binlog directory {d}: {e.strerror}")
        return self

    def attach(self, engine: JournaledEngine) -> None:
        """Restore the recovered jobs into ``engine`` and open a fresh file.

        The old files no live job needs are removed first (so a full disk
        of dead records does not stop the start), except the newest, whose
        header and records say how high job ids went, until the new file's
        header says so.
        """
        rec = self._recovery
        if rec is None:
            raise RuntimeError("BinlogJournal.attach() before open()")
        self.engine = engine
        for level, text in rec.notes:
            (self.log.error if level == "error" else self.log.warn)(text.replace("{", "{{").replace("}", "}}"))
        self.live_bytes = restore_into(engine, rec)
        last = self.seq = self.old_files.adopt(rec.files)
        if self._import is not None:  # new files are numbered after beanstalkd's
            last = self.seq = max(last, self._import.last_seq)
        self.compactor.drop_dead_files_before_start()
        try:
            self.fd, self.limit = self._create_file(last + 1, 0)
        except OSError as e:
            if self._lock is not None:
                self._lock.release()
            raise BinlogError(f"cannot write to binlog directory {self.directory}: "
                              f"{e.strerror or e}")
        self.seq = last + 1
        self.pos = HEADER_SIZE
        self._free = self.limit - HEADER_SIZE
        self._ok = True
        self._last_sync = self.clock.seconds()
        self._finish_import()
        if self._want_sync_thread:
            self._syncer = Syncer(lambda: self.fd)
            self._syncer.start()
        self._sync_dir()
        self.recovery = rec
        self._recovery = None
        if rec.records:
            self.log.info("binlog: replayed {replayed} from {read}: {restored} restored",
                          replayed=counted(rec.records, "record"),
                          read=counted(len(rec.files), "file"),
                          restored=counted(len(rec.jobs), "job"), records=rec.records,
                          files=len(rec.files), jobs=len(rec.jobs))
        try:
            self.compactor.drop_dead_files()
        except OSError as e:
            self.log.warn("binlog: syncing {file} failed: {why}", file=file_name(self.seq),
                          why=e.strerror or e)
        self.compactor.force = bool(self.old_files.damaged)
        self.compactor.schedule()

    def _finish_import(self) -> None:
        """Copy the jobs read from beanstalkd's files into our file, sync it,
        then move their files aside (see :mod:`.importer`)."""
        found, self._import = self._import, None
        if found is None:
            return
        jobs = self.engine.jobs
        imported = [jobs[jid] for jid in found.job_ids if jid in jobs]
        try:
            for job in imported:
                if not job.binlog_file:  # else an earlier, cut-short start copied it
                    self.migrate(job, 0)
            self.write_out()
            if not self.no_fsync:
                self.sync()
            where = move_aside(found, self.clock.seconds(), not self.no_fsync)
        except (OSError, JournalError) as e:
            os.close(self.fd)
            self.fd = -1
            if self._lock is not None:
                self._lock.release()
            raise BinlogError(f"cannot import beanstalkd's binlog files in {self.directory}: "
                              f"{getattr(e, 'strerror', None) or e}")
        # A warning, so that it shows without -V: the directory changed.
        self.log.warn("binlog: {jobs} came from {files} (format version {version}, {records}); "
                      "the files were moved to {where}",
                      jobs=counted(len(imported), "job"),
                      files=counted(len(found.files), "beanstalkd binlog file"),
                      version=found.versions, records=counted(found.records, "record"),
                      where=where)

    # ------------------------------------------------------- Journal protocol

    def job_put(self, job, _pack=_PUT_PACK, _crc=_CRC_PACK, _join=_join, _crc32=crc32,
                _fixed=_PUT_PAYLOAD, _tail=_TAIL, _mark=MARK) -> None:
        if not self._ok:
            self._refuse()
        tube = job.tube.name
        body = job.body
        n = _fixed + len(tube) + len(body)
        size = n + _tail
        free = self._free - size
        if free < self.slack:
            self._make_room(size)
            free = self._free - size
        delay = job.delay
        if delay:
            rec = _join((_pack(_mark, T_PUT, 0, n, job.id, job.pri, delay, job.ttr, DELAYED,
                               len(tube), job.created_at + delay, job.created_at,
                               0, 0, 0, 0, 0, len(body)), tube, body))
        else:
            rec = _join((_pack(_mark, T_PUT, 0, n, job.id, job.pri, 0, job.ttr, READY,
                               len(tube), 0.0, job.created_at, 0, 0, 0, 0, 0, len(body)),
                         tube, body))
        buf = self._buf
        buf += rec
        buf += _crc(_crc32(rec))
        self._free = free
        job.binlog_file = self.seq
        self.live_bytes += size
        self.written += 1
        if not self.pending:
            self._set_pending()

    def job_updated(self, job, op: int) -> None:
        if not self._ok:
            self._refuse()
        r, t, rl, b, k = job.counts or _ZEROS
        deadline = 0.0
        if op == UPDATE_RELEASE:
            rl += 1
            if job.delay:
                state = DELAYED
                deadline = self.clock.seconds() + job.delay
            else:
                state = READY
        elif op == UPDATE_BURY:
            b += 1
            state = BURIED
        elif op == UPDATE_KICK:
            k += 1
            state = READY
        elif op == UPDATE_TIMEOUT:
            t += 1
            state = READY
        elif op == UPDATE_RESERVE:
            r += 1
            state = READY
        else:
            raise ValueError(f"unknown update {op!r}")
        boundary = self.compactor.boundary
        if boundary is not None and job.binlog_file < boundary:
            # Compacting, and this job's full copy is in a file about to go:
            # write a full copy with the new state instead of an update.
            self._write_full(job, state, deadline, (r, t, rl, b, k))
            return
        if self._free < UPDATE_SIZE:
            self._make_room(UPDATE_SIZE)
        rec = _UPDATE_PACK(MARK, T_UPDATE, 0, _UPDATE_RECORD_TAIL, job.id, job.pri, job.delay,
                           state, deadline, r, t, rl, b, k)
        buf = self._buf
        buf += rec
        buf += _CRC_PACK(crc32(rec))
        self._free -= UPDATE_SIZE
        self.written += 1
        if not self.pending:
            self._set_pending()

    def job_deleted(self, job, _pack=_DELETE_PACK, _crc=_CRC_PACK, _crc32=crc32,
                    _mark=MARK, _size=DELETE_SIZE) -> None:
        if not self._ok:
            self._refuse()
        if self._free < _size:
            self._make_room(_size)
        rec = _pack(_mark, T_DELETE, 0, DELETE_PAYLOAD, job.id)
        buf = self._buf
        buf += rec
        buf += _crc(_crc32(rec))
        self._free -= _size
        self.live_bytes -= PUT_FIXED + len(job.tube.name) + len(job.body)
        self.written += 1
        if not self.pending:
            self._set_pending()

    def when_settled(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once everything recorded so far is written (and
        synced, with -f 0).  The server holds a connection's replies until then."""
        if self.pending or self.broken is not None:
            self._settled.append(callback)
        else:
            callback()

    # ---------------------------------------------- used by the compactor

    @property
    def free_bytes(self) -> int:
        """Bytes left in the current file after what is written and buffered."""
        return self._free

    def migrate(self, job, reserve: int) -> None:
        """Write a full copy of ``job`` as it is now (compaction), leaving at
        least ``reserve`` bytes of the current file free (else it moves to a
        new file, or raises :class:`JournalError` if there is no room for one)."""
        state = job.state
        if state == DELAYED:
            deadline = job.deadline_at
        else:
            deadline = 0.0
            if state == RESERVED:
                state = READY  # what it becomes after a restart
        self._write_full(job, state, deadline, job.counts, reserve)

    def write_out(self) -> None:
        """Write the buffer at the current position (raises OSError)."""
        buf = self._buf
        n = len(buf)
        if not n:
            return
        done = 0
        try:
            done = os.pwrite(self.fd, buf, self.pos)
            if done < n:
                with memoryview(buf) as mv:
                    while done < n:
                        done += os.pwrite(self.fd, mv[done:], self.pos + done)
        finally:
            if done:
                self.pos += done
                if done == n:
                    buf.clear()
                else:
                    del buf[:done]

    def sync(self) -> None:
        """fdatasync the current file now (raises OSError)."""
        os.fdatasync(self.fd)
        self._last_sync = self.clock.seconds()

    def space_freed(self) -> None:
        """Old files were removed: the next change that needs a new file tries at once."""
        self._room_retry_at = 0.0

    # ------------------------------------------------------------ internals

    def _set_pending(self) -> None:
        self.pending = True
        if self._flush_call is None:
            self._flush_call = self.clock.callLater(0, self._flush)

    def _write_full(self, job, state: int, deadline: float, counts, reserve: int = 0) -> None:
        """A full copy of ``job`` (compaction, or an update during compaction)."""
        tube = job.tube.name
        body = job.body
        tl = len(tube)
        bl = len(body)
        size = PUT_FIXED + tl + bl
        if self._free - size < reserve:
            self._make_room(size)
        c0, c1, c2, c3, c4 = counts or _ZEROS
        head = _PUT_PACK(MARK, T_PUT, F_MIGRATED, _PUT_PAYLOAD + tl + bl, job.id, job.pri, job.delay,
                         job.ttr, state, tl, deadline, job.created_at, c0, c1, c2, c3, c4, bl)
        buf = self._buf
        buf += head
        buf += tube
        buf += body
        buf += _CRC_PACK(crc32(body, crc32(tube, crc32(head))))
        self._free -= size
        job.binlog_file = self.seq
        self.written += 1
        self.migrated += 1
        if not self.pending:
            self._set_pending()

    def _flush(self) -> None:
        """End of a reactor turn: write the turn's records, sync per policy,
        then release the replies held meanwhile."""
        self._flush_call = None
        if self.fd < 0:
            return
        try:
            self.write_out()
            if self.sync_each_turn:
                self.sync()
        except OSError as e:
            self._fail(e)
            return
        self._settle()
        if self._sync_call is None and not self.no_fsync and not self.sync_each_turn:
            delay = self._last_sync + self.fsync_ms / 1000.0 - self.clock.seconds()
            self._sync_call = self.clock.callLater(max(0.0, delay), self._timed_sync)

    def _settle(self) -> None:
        self.pending = False
        callbacks = self._settled
        if callbacks:
            self._settled = []
            for callback in callbacks:
                callback()

    def _timed_sync(self) -> None:
        self._sync_call = None
        if self.fd < 0 or self.broken is not None:
            return
        syncer = self._syncer
        if syncer is not None:
            error, syncer.error = syncer.error, None
            if error is not None:
                self.log.error("binlog: fsync of {file} failed: {why}",
                               file=file_name(self.seq), why=error.strerror or error)
            self._last_sync = self.clock.seconds()
            syncer.request()
            return
        try:
            self.sync()
        except OSError as e:
            self._fail(e)

    # -------------------------------------------------------------- closing

    def flush(self) -> None:
        """Write and sync everything now (tests, shutdown)."""
        if self.fd < 0:
            return
        if self._flush_call is not None:
            self._flush_call.cancel()
            self._flush_call = None
        if self._write_and_sync():
            self._settle()

    def close(self) -> None:
        """Flush, sync and close (SIGTERM / reactor shutdown)."""
        if self.closed:
            return
        self.closed = True
        self._ok = False
        for name in ("_flush_call", "_sync_call", "_retry_call"):
            call = getattr(self, name)
            if call is not None and call.active():
                call.cancel()
            setattr(self, name, None)
        self.compactor.cancel()
        if self._syncer is not None:
            self._syncer.stop()
            self._syncer = None
        if self.fd >= 0:
            try:
                self.write_out()
                error = None
            except OSError as e:
                error = e
            fd, self.fd = self.fd, -1
            error = finish_file(fd, self.pos, not self.no_fsync) or error
            if error is not None:
                # Held replies are never sent: their changes are not on disk.
                self._settled = []
                self.log.error("binlog: final write of {file} failed: {why}",
                               file=file_name(self.seq), why=error.strerror or error)
            self._settle()
        if self._lock is not None:
            self._lock.release()
            self._lock = None
