"""The binlog writer: the :class:`~twisted_stalk.core.journal.Journal` the queue calls.

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
    Files are preallocated (``posix_fallocate``) to ``-s`` bytes when created,
    so writing into them cannot run out of space; running out shows when the
    next file cannot be created, which happens synchronously inside the
    change that needs the room: that change raises :class:`JournalError` and
    is refused, and the next one tries again.  The last ``SLACK`` bytes of a
    file are kept for releases, buries and deletes, so those keep working
    for a while after puts are refused.

Compaction
    A job's PUT record (or its latest full copy) lives in file
    ``job.binlog_file``.  When the files hold much more than the live jobs
    (see :meth:`BinlogJournal._should_compact`), compaction copies the full
    state of every job whose copy is older than the current file into the
    current file, a slice per reactor turn, and then deletes the older files.
    Updates and deletes never need copying: files are only ever deleted
    oldest-first, and a job's copy is always written after its older records.
"""
from __future__ import annotations

import errno
import gc
import os
import threading
from typing import Any, Callable, Dict, List, Optional, Set
from zlib import crc32

from twisted.logger import Logger

from ..core.job import BURIED, DELAYED, READY, RESERVED
from ..core.journal import (
    JournalError,
    UPDATE_BURY,
    UPDATE_KICK,
    UPDATE_RELEASE,
    UPDATE_RESERVE,
    UPDATE_TIMEOUT,
)
from ..protocol.constants import DEFAULT_BINLOG_SIZE
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
    file_header,
    file_name,
)
from .lock import DirectoryLock
from .replay import BinlogError, Recovery, read_directory

_PUT_PACK = PUT.pack
_UPDATE_PACK = UPDATE.pack
_DELETE_PACK = DELETE.pack
_CRC_PACK = CRC.pack
_ZEROS = (0, 0, 0, 0, 0)
_TAIL = PUT_FIXED - PUT_PAYLOAD_FIXED  # record header and crc: bytes besides the payload
_join = b"".join
_PUT_PAYLOAD = PUT_PAYLOAD_FIXED
_UPDATE_RECORD_TAIL = UPDATE_PAYLOAD

#: Jobs copied per compaction slice (one slice per reactor turn).
COMPACT_SLICE = 2000
#: Seconds between retries after a failed write, or after no room for a new file.
RETRY_SECONDS = 1.0
ROOM_RETRY_SECONDS = 0.25
#: Compact when the directory holds this many files and more garbage than live data.
MANY_FILES = 8


class _Syncer(threading.Thread):
    """Runs the periodic fsync of ``-f MS`` off the reactor thread.

    ``fdatasync`` releases the GIL, so the server keeps serving while the disk
    catches up.  ``lock`` is held while syncing; the reactor takes it before
    it replaces or closes the file descriptor.
    """

    def __init__(self, journal: "BinlogJournal") -> None:
        super().__init__(name="binlog-fsync", daemon=True)
        self.journal = journal
        self.lock = threading.Lock()
        self._cond = threading.Condition()
        self._wanted = False
        self._stopping = False
        self.error: Optional[OSError] = None
        self.syncs = 0

    def request(self) -> None:
        with self._cond:
            self._wanted = True
            self._cond.notify()

    def stop(self) -> None:
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
                fd = self.journal.fd
                if fd >= 0:
                    try:
                        os.fdatasync(fd)
                        self.syncs += 1
                    except OSError as e:
                        self.error = e


def round_size(size: int) -> int:
    """``-s`` rounded up to a multiple of 4096 bytes (as beanstalkd documents)."""
    size = max(int(size), 4096)
    return (size + 4095) // 4096 * 4096


class BinlogJournal:
    """Write-ahead log of every change that must survive a restart.

    ``clock`` is the reactor (``seconds``, ``callLater``, and, when present,
    ``addSystemEventTrigger``) or a ``twisted.internet.task.Clock`` in tests.
    Use :meth:`open` (lock, read the directory), then :meth:`attach` (restore
    the jobs into the queue and start a new file).
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
        self._syncer: Optional[_Syncer] = None
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
        self._compact_call = None
        self._last_sync = 0.0
        self._room_retry_at = 0.0
        self._room_error: Optional[str] = None
        #: Why writing is impossible (a failed write is being retried), else None.
        self.broken: Optional[str] = None
        self.queue: Any = None
        self.fd = -1
        self.seq = 0
        self.pos = 0
        self.limit = 0
        #: Bytes left in the current file after what is written and buffered.
        self._free = 0
        #: True while changes can be recorded (open, not broken).
        self._ok = False
        #: [seq, size] of every file before the current one, oldest first.
        self.files: List[List[int]] = []
        self.old_bytes = 0
        self.live_bytes = 0
        self.written = 0
        self.migrated = 0
        self.damaged_files: Set[int] = set()
        self._boundary: Optional[int] = None
        self._todo: Optional[list] = None
        self._todo_i = 0
        self._force_compact = False
        self._lock: Optional[DirectoryLock] = None
        self._recovery: Optional[Recovery] = None
        self.recovery: Optional[Recovery] = None
        self.closed = False

    # ------------------------------------------------------------------ start

    def open(self) -> "BinlogJournal":
        """Check and lock the directory and read it (raises :class:`BinlogError`)."""
        d = self.directory
        try:
            st = os.stat(d)
        except FileNotFoundError:
            raise BinlogError(f"binlog directory {d} does not exist")
        except OSError as e:
            raise BinlogError(f"cannot use binlog directory {d}: {e.strerror}")
        import stat
        if not stat.S_ISDIR(st.st_mode):
            raise BinlogError(f"binlog directory {d} is not a directory")
        self._lock = DirectoryLock(d).acquire()
        # Replay creates an object or two per job and frees nothing: the
        # cyclic GC would rescan them all, again and again (a third of the
        # time for a million jobs).
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._recovery = read_directory(d)
        except BinlogError:
            self._lock.release()
            raise
        except OSError as e:
            self._lock.release()
            raise BinlogError(f"cannot read binlog directory {d}: {e.strerror}")
        finally:
            if was_enabled:
                gc.enable()
        return self

    def attach(self, queue) -> None:
        """Restore the recovered jobs into ``queue`` and open a fresh file."""
        rec = self._recovery
        if rec is None:
            raise RuntimeError("BinlogJournal.attach() before open()")
        self.queue = queue
        for level, text in rec.notes:
            (self.log.error if level == "error" else self.log.warn)(text.replace("{", "{{").replace("}", "}}"))
        now = queue.clock.seconds()
        tubes: Dict[bytes, Any] = {}
        restore = queue.restore
        live = 0
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            for job in rec.jobs.values():
                name = job.tube
                t = tubes.get(name)
                if t is None:
                    t = tubes[name] = queue.tube(name)
                job.tube = t
                state = job.state
                if state == DELAYED and job.deadline_at <= now:
                    state = READY
                restore(job, state, job.deadline_at)
                live += len(name) + len(job.body)
        finally:
            if was_enabled:
                gc.enable()
        if rec.next_id > queue.next_id:
            queue.next_id = rec.next_id
        self.live_bytes = live + PUT_FIXED * len(rec.jobs)
        # Tidy the old files: remove empty ones, cut torn tails and unused
        # preallocated space so they are not reported (or kept) again.
        last = 0
        for info in rec.files:
            last = max(last, info.seq)
            if info.drop:
                _unlink(info.path)
                continue
            size = info.size
            if not info.damaged and info.valid_end < size:
                try:
                    os.truncate(info.path, info.valid_end)
                    size = info.valid_end
                except OSError:
                    pass
            if info.damaged:
                self.damaged_files.add(info.seq)
            self.files.append([info.seq, size])
            self.old_bytes += size
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
        if self._want_sync_thread:
            self._syncer = _Syncer(self)
            self._syncer.start()
        self._sync_dir()
        self.recovery = rec
        self._recovery = None
        if rec.records:
            self.log.info("binlog: replayed {records} records from {files} files: "
                          "{jobs} jobs restored", records=rec.records,
                          files=len(rec.files), jobs=len(rec.jobs))
        self._force_compact = bool(self.damaged_files)
        self._schedule_compaction()

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
            self._make_room(size, True)
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
        boundary = self._boundary
        if boundary is not None and job.binlog_file < boundary:
            # Compacting, and this job's full copy is in a file about to go:
            # write a full copy with the new state instead of an update.
            self._write_full(job, state, deadline, (r, t, rl, b, k))
            return
        if self._free < UPDATE_SIZE:
            self._make_room(UPDATE_SIZE, False)
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
            self._make_room(_size, False)
        rec = _pack(_mark, T_DELETE, 0, DELETE_PAYLOAD, job.id)
        buf = self._buf
        buf += rec
        buf += _crc(_crc32(rec))
        self._free -= _size
        self.live_bytes -= PUT_FIXED + len(job.tube.name) + len(job.body)
        self.written += 1
        if not self.pending:
            self._set_pending()

    def stats(self):
        return {
            "oldest": self.files[0][0] if self.files else self.seq,
            "current": self.seq,
            "migrated": self.migrated,
            "written": self.written,
            "max_size": self.max_size,
        }

    def when_settled(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once everything recorded so far is written (and
        synced, with -f 0).  The server holds a connection's replies until then."""
        if self.pending or self.broken is not None:
            self._settled.append(callback)
        else:
            callback()

    # ------------------------------------------------------------ internals

    def _refuse(self) -> None:
        if self.fd < 0:
            raise JournalError("binlog is closed")
        raise JournalError(f"binlog cannot write: {self.broken}")

    def _set_pending(self) -> None:
        self.pending = True
        if self._flush_call is None:
            self._flush_call = self.clock.callLater(0, self._flush)

    def _write_full(self, job, state: int, deadline: float, counts, flags: int = F_MIGRATED) -> None:
        """A full copy of ``job`` (compaction, or an update during compaction)."""
        tube = job.tube.name
        body = job.body
        tl = len(tube)
        bl = len(body)
        size = PUT_FIXED + tl + bl
        if self._free < size:
            self._make_room(size, False)
        c0, c1, c2, c3, c4 = counts or _ZEROS
        head = _PUT_PACK(MARK, T_PUT, flags, _PUT_PAYLOAD + tl + bl, job.id, job.pri, job.delay,
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

    def _migrate(self, job) -> None:
        state = job.state
        if state == DELAYED:
            deadline = job.deadline_at
        else:
            deadline = 0.0
            if state == RESERVED:
                state = READY  # what it becomes after a restart
        self._write_full(job, state, deadline, job.counts)

    def _write_out(self) -> None:
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

    def _sync(self) -> None:
        os.fdatasync(self.fd)
        self._last_sync = self.clock.seconds()

    def _flush(self) -> None:
        """End of a reactor turn: write the turn's records, sync per policy,
        then release the replies held meanwhile."""
        self._flush_call = None
        if self.fd < 0:
            return
        try:
            self._write_out()
            if self.sync_each_turn:
                self._sync()
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
            self._sync()
        except OSError as e:
            self._fail(e)

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

    def _retry(self) -> None:
        self._retry_call = None
        if self.fd < 0:
            return
        try:
            self._write_out()
            if not self.no_fsync:
                self._sync()
        except OSError as e:
            self._fail(e)
            return
        self.broken = None
        self._ok = True
        self.log.warn("binlog: writing {file} works again", file=file_name(self.seq))
        self._settle()
        self._schedule_compaction()

    def _make_room(self, size: int, is_put: bool) -> None:
        """Start a new file for a record of ``size`` bytes, or raise JournalError."""
        now = self.clock.seconds()
        if now < self._room_retry_at:
            raise JournalError(f"binlog: no room for a new file: {self._room_error}")
        try:
            self._write_out()
        except OSError as e:
            self._fail(e)
            raise JournalError(f"binlog write failed: {self.broken}")
        try:
            fd, limit = self._create_file(self.seq + 1, size)
        except OSError as e:
            self._room_retry_at = now + ROOM_RETRY_SECONDS
            if self._room_error is None:
                self.log.error("binlog: cannot create {file} in {dir} ({why}): refusing "
                               "changes that need it until there is room",
                               file=file_name(self.seq + 1), dir=self.directory,
                               why=e.strerror or e)
            self._room_error = e.strerror or str(e)
            raise JournalError(f"binlog: no room for a new file: {self._room_error}")
        if self._room_error is not None:
            self._room_error = None
            self.log.warn("binlog: there is room again in {dir}", dir=self.directory)
        old_fd, old_seq, old_pos = self.fd, self.seq, self.pos
        if self._syncer is not None:
            with self._syncer.lock:
                self.fd = fd
        self.fd, self.seq, self.pos, self.limit = fd, old_seq + 1, HEADER_SIZE, limit
        self._free = limit - HEADER_SIZE
        try:
            os.ftruncate(old_fd, old_pos)  # give back unused preallocated space
            if not self.no_fsync:
                os.fsync(old_fd)
        except OSError as e:
            self.log.error("binlog: finishing {file} failed: {why}",
                           file=file_name(old_seq), why=e.strerror or e)
        os.close(old_fd)
        self.files.append([old_seq, old_pos])
        self.old_bytes += old_pos
        self._sync_dir()
        self._schedule_compaction()

    def _create_file(self, seq: int, need: int):
        """Create, head and preallocate ``binlog.<seq>``; returns (fd, capacity)."""
        path = os.path.join(self.directory, file_name(seq))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            header = file_header(seq, self.queue.next_id if self.queue is not None else 1)
            os.pwrite(fd, header, 0)
            capacity = max(self.max_size, HEADER_SIZE + need + self.slack)
            try:
                os.posix_fallocate(fd, 0, capacity)
            except OSError as e:
                if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    raise
        except BaseException:
            os.close(fd)
            _unlink(path)
            raise
        return fd, capacity

    def _sync_dir(self) -> None:
        if self.no_fsync:
            return
        try:
            dfd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass

    # ----------------------------------------------------------- compaction

    def _should_compact(self) -> bool:
        if not self.files:
            return False
        if self._force_compact:
            return True
        live = self.live_bytes
        garbage = self.old_bytes + self.pos - live
        return (garbage > live + self.max_size
                or (len(self.files) >= MANY_FILES and garbage > live))

    def _schedule_compaction(self, delay: float = 0.0) -> None:
        if self._compact_call is None and self.fd >= 0:
            self._compact_call = self.clock.callLater(delay, self._compact_step)

    def _compact_step(self) -> None:
        """One slice of compaction (runs once per reactor turn while needed)."""
        self._compact_call = None
        if self.fd < 0 or self.queue is None:
            return
        if self.broken is not None:
            return  # _retry reschedules
        try:
            if self._boundary is None:
                if not self._should_compact():
                    return
                self._start_compaction()
            jobs = self.queue.jobs
            boundary = self._boundary
            todo = self._todo
            assert boundary is not None and todo is not None
            i = self._todo_i
            n = len(todo)
            budget = COMPACT_SLICE
            migrate = self._migrate
            while i < n and budget:
                job = todo[i]
                if job.binlog_file < boundary and jobs.get(job.id) is job:
                    migrate(job)
                    budget -= 1
                i += 1
            self._todo_i = i
            if i < n:
                self._write_out()
                self._schedule_compaction()
                return
            self._finish_compaction()
        except (JournalError, OSError) as e:
            self.log.warn("binlog: compaction paused ({why}); retrying", why=e)
            self._schedule_compaction(RETRY_SECONDS)

    def _start_compaction(self) -> None:
        boundary = self._boundary = self.seq
        self._force_compact = False
        # Buried jobs come back in burial order, which is the order of their
        # last records: copy each tube's buried list from its first old copy
        # to its end, in order, so the copies keep that order.
        for t in list(self.queue.tube_list):
            if not t.buried:
                continue
            buried = list(t.buried.values())
            for i, job in enumerate(buried):
                if job.binlog_file < boundary:
                    for j in buried[i:]:
                        self._migrate(j)
                    break
        self._todo = list(self.queue.jobs.values())
        self._todo_i = 0

    def _finish_compaction(self) -> None:
        boundary = self._boundary
        assert boundary is not None
        self._write_out()
        if not self.no_fsync:
            self._sync()
        removed = 0
        freed = 0
        keep = []
        for entry in self.files:
            seq, size = entry
            if seq >= boundary:
                keep.append(entry)
                continue
            path = os.path.join(self.directory, file_name(seq))
            if seq in self.damaged_files:
                try:
                    os.rename(path, path + ".damaged")
                    self.log.warn("binlog: {file} had damage; its good records are now "
                                  "in newer files and it was kept as {file}.damaged",
                                  file=file_name(seq))
                except OSError:
                    _unlink(path)
                self.damaged_files.discard(seq)
            else:
                _unlink(path)
            removed += 1
            freed += size
        self.files = keep
        self.old_bytes = sum(size for _, size in keep)
        self._sync_dir()
        self.log.info("binlog: compacted: removed {removed} files ({freed} bytes); live "
                      "jobs now start at {file}", removed=removed, freed=freed,
                      file=file_name(boundary))
        self._boundary = None
        self._todo = None
        self._todo_i = 0

    # -------------------------------------------------------------- closing

    def flush(self) -> None:
        """Write and sync everything now (tests, shutdown)."""
        if self.fd < 0:
            return
        if self._flush_call is not None:
            self._flush_call.cancel()
            self._flush_call = None
        try:
            self._write_out()
            if not self.no_fsync:
                self._sync()
        except OSError as e:
            self._fail(e)
            return
        self._settle()

    def close(self) -> None:
        """Flush, sync and close (SIGTERM / reactor shutdown)."""
        if self.closed:
            return
        self.closed = True
        self._ok = False
        for name in ("_flush_call", "_sync_call", "_retry_call", "_compact_call"):
            call = getattr(self, name)
            if call is not None and call.active():
                call.cancel()
            setattr(self, name, None)
        if self._syncer is not None:
            self._syncer.stop()
            self._syncer = None
        if self.fd >= 0:
            try:
                self._write_out()
                os.ftruncate(self.fd, self.pos)
                if not self.no_fsync:
                    os.fsync(self.fd)
            except OSError as e:
                # Held replies are never sent: their changes are not on disk.
                self._settled = []
                self.log.error("binlog: final write of {file} failed: {why}",
                               file=file_name(self.seq), why=e.strerror or e)
            os.close(self.fd)
            self.fd = -1
            self._settle()
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def open_journal(config, reactor) -> BinlogJournal:
    """Build the journal for ``twistd beanstalk -b`` / ``stalkd -b`` (see tap.make_factory).

    Raises :class:`BinlogError` with a one-line message when the directory
    cannot be used.  The caller attaches it to the queue
    (:meth:`BinlogJournal.attach`); reactor shutdown (SIGTERM) flushes it.
    """
    import signal
    try:  # a file size limit must turn into an error reply, not kill us
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not main thread
        pass
    journal = BinlogJournal(
        config["binlog-dir"], reactor,
        max_size=config.get("binlog-size") or DEFAULT_BINLOG_SIZE,
        fsync_ms=50 if config.get("fsync-ms") is None else config["fsync-ms"],
        no_fsync=bool(config.get("no-fsync")),
        sync_thread=True)
    journal.open()
    add_trigger = getattr(reactor, "addSystemEventTrigger", None)
    if add_trigger is not None:
        add_trigger("before", "shutdown", journal.close)
    return journal
