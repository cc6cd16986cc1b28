# -*- test-case-name: tests.test_binlog -*-
"""Reading a binlog directory back: every job's last recorded state.

:func:`read_directory` replays the files into a :class:`Recovery`;
:func:`restore_into` hands its jobs to the engine.

Recovery never trusts a byte it cannot check: each record's CRC must match.
What it finds after the last good record of a file decides what it says:

* only zeros (preallocated space never written): the normal end, nothing said;
* bytes that are not a good record and no good record after them: a torn
  write (the server stopped in the middle of it): the partial record is
  dropped and one warning names it;
* a bad stretch followed by good records: damage in the middle of a file.  It
  is reported as an error with its offsets, skipped, and the good records
  after it are used.  Jobs whose only records sat in the stretch are lost;
  jobs last recorded before it are restored as last recorded (the summary
  line counts them, since a delete or change of theirs may have been in the
  lost bytes).  No job is ever made up from bytes that fail their checksum.
"""
from __future__ import annotations

import gc
import os
from contextlib import contextmanager
from typing import Any, Collection, Dict, Iterator, List, Optional, Set, Tuple
from zlib import crc32

from ..core.job import BURIED, DELAYED, READY, JobRecord
from ..core.journal import JournaledEngine
from .format import (
    BEANSTALKD_VERSIONS,
    CRC,
    CRC_SIZE,
    DELETE,
    HEAD_SIZE,
    HEADER_SIZE,
    MARK,
    PUT,
    PUT_FIXED,
    REC_HEAD,
    T_DELETE,
    T_PUT,
    T_UPDATE,
    UPDATE,
    UPDATE_PAYLOAD,
    DELETE_PAYLOAD,
    file_name,
    parse_file_name,
    read_file_header,
)

MIN_RECORD = HEAD_SIZE + CRC_SIZE


class BinlogError(Exception):
    """The binlog directory cannot be used; the message is one line for the operator."""


class FileInfo:
    """What recovery learnt about one binlog file."""

    __slots__ = ("seq", "path", "size", "valid_end", "damaged", "drop", "records")

    def __init__(self, seq: int, path: str, size: int) -> None:
        self.seq = seq
        self.path = path
        self.size = size
        #: Offset just after the last good record (where a torn tail starts).
        self.valid_end = HEADER_SIZE
        #: Damage in the middle of the file (or in its header) was found.
        self.damaged = False
        #: The file holds nothing usable (empty, no header): remove it.
        self.drop = False
        self.records = 0


class Recovery:
    """The result of reading a directory.  Buried jobs are in the order of
    their last records (burial order); others in no particular order."""

    def __init__(self) -> None:
        #: id -> JobRecord; ``job.tube`` holds the tube *name* (bytes) until restored.
        self.jobs: Dict[int, Any] = {}
        self.next_id = 1
        self.files: List[FileInfo] = []
        #: (level, message) lines for the log: level is "warn" or "error".
        self.notes: List[Tuple[str, str]] = []
        self.records = 0
        self.damaged = False
        #: Jobs restored as last recorded although damage came after that record.
        self.uncertain = 0
        #: Good records after damage that refer to a job whose put was lost.
        self.orphans = 0

    @property
    def live_bytes(self) -> int:
        return sum(PUT_FIXED + len(j.tube) + len(j.body) for j in self.jobs.values())


def list_files(directory: str) -> List[Tuple[int, str]]:
    found = []
    for name in os.listdir(directory):
        seq = parse_file_name(name)
        if seq is not None:
            found.append((seq, os.path.join(directory, name)))
    found.sort()
    return found


def read_directory(directory: str, base: Optional[Recovery] = None,
                   skip: Collection[int] = ()) -> Recovery:
    """Replay every ``binlog.N`` file of ``directory`` in order.

    ``base`` holds jobs read before (beanstalkd's files, see :mod:`.importer`):
    the records are replayed on top of them.  Files numbered in ``skip`` are
    not read (they are beanstalkd's).
    """
    rec = Recovery() if base is None else base
    names: Dict[bytes, bytes] = {}
    state = _ReplayState()
    for seq, path in list_files(directory):
        if seq in skip:
            continue
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise BinlogError(f"cannot read binlog file {path}: {e.strerror}")
        info = FileInfo(seq, path, len(data))
        rec.files.append(info)
        _replay_file(data, info, rec, names, state)
        rec.records += info.records
    rec.next_id = max(state.header_next_id, state.max_id + 1, rec.next_id)
    if state.suspects is not None:
        rec.uncertain = len(state.suspects.intersection(rec.jobs))
        rec.orphans = state.orphans
        rec.notes.append((
            "error",
            f"binlog: recovered {len(rec.jobs)} jobs from {directory} despite damage: "
            f"{rec.uncertain} of them were last recorded before a damaged stretch and "
            f"are restored as recorded then (a later change or delete may have been lost); "
            f"{rec.orphans} later records refer to jobs whose put was lost"))
    return rec


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while replaying or restoring.

    Replay creates an object or two per job and frees nothing: the cyclic GC
    would rescan them all, again and again (a third of the time for a
    million jobs).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def restore_into(engine: JournaledEngine, rec: Recovery) -> int:
    """Put the recovered jobs into ``engine`` (delayed jobs whose delay ended
    come back ready); returns their live bytes (the size of a full copy of
    each).  ``engine.next_id`` is raised past every id seen."""
    now = engine.clock.seconds()
    tubes: Dict[bytes, Any] = {}
    restore = engine.restore
    live = 0
    with gc_paused():
        for job in rec.jobs.values():
            name = job.tube
            t = tubes.get(name)
            if t is None:
                t = tubes[name] = engine.tube(name)
            job.tube = t
            state = job.state
            if state == DELAYED and job.deadline_at <= now:
                state = READY
            restore(job, state, job.deadline_at)
            live += len(name) + len(job.body)
    if rec.next_id > engine.next_id:
        engine.next_id = rec.next_id
    return live + PUT_FIXED * len(rec.jobs)


class _ReplayState:
    __slots__ = ("max_id", "header_next_id", "suspects", "orphans")

    def __init__(self) -> None:
        self.max_id = 0
        self.header_next_id = 0
        self.suspects: Optional[Set[int]] = None
        self.orphans = 0


def _zeros(data: bytes, start: int) -> bool:
    return data.count(0, start) == len(data) - start


def _good_record_at(data: bytes, i: int) -> bool:
    end = len(data)
    if i + MIN_RECORD > end:
        return False
    mark, typ, _flags, n = REC_HEAD.unpack_from(data, i)
    if mark != MARK or typ not in (T_PUT, T_UPDATE, T_DELETE):
        return False
    q = i + HEAD_SIZE + n
    return q + CRC_SIZE <= end and crc32(data[i:q]) == CRC.unpack_from(data, q)[0]


def _next_good_record(data: bytes, start: int) -> Optional[int]:
    find = data.find
    i = find(MARK, start)
    while i >= 0:
        if _good_record_at(data, i):
            return i
        i = find(MARK, i + 1)
    return None


def _replay_file(data: bytes, info: FileInfo, rec: Recovery, names: Dict[bytes, bytes],
                 st: _ReplayState) -> None:
    name = os.path.basename(info.path)
    end = len(data)
    if _zeros(data, 0) or end < HEADER_SIZE:
        if data[:4] in BEANSTALKD_VERSIONS:
            raise BinlogError(f"{info.path} is a beanstalkd binlog file, not a twisted-stalk one: "
                              "move it out of the directory")
        info.drop = True
        what = "is empty" if _zeros(data, 0) else "holds only a partial header"
        rec.notes.append(("warn", f"binlog: {name} {what} ({end} bytes): "
                                  "the server stopped while creating it; removed"))
        return
    ok, ours, _seq, next_id = read_file_header(data)
    if ok:
        if next_id > st.header_next_id:
            st.header_next_id = next_id
    elif data[:4] in BEANSTALKD_VERSIONS and not ours:
        raise BinlogError(f"{info.path} is a beanstalkd binlog file, not a twisted-stalk one: "
                          "move it out of the directory")
    elif ours or _next_good_record(data, HEADER_SIZE) is not None:
        info.damaged = True
        rec.damaged = True
        rec.notes.append(("error", f"binlog: {name}: the file header is damaged; "
                                   "reading its records anyway"))
    else:
        raise BinlogError(f"{info.path} is not a twisted-stalk binlog file: "
                          "move it out of the directory")

    jobs = rec.jobs
    seq = info.seq
    unpack_head = REC_HEAD.unpack_from
    unpack_crc = CRC.unpack_from
    unpack_put = PUT.unpack_from
    unpack_update = UPDATE.unpack_from
    unpack_delete = DELETE.unpack_from
    put_size = PUT.size
    update_end = UPDATE.size
    pop = jobs.pop
    mv = memoryview(data)
    max_id = st.max_id
    suspects = st.suspects
    records = 0
    last_created = -1.0
    kept_states = (DELAYED, BURIED)
    p = HEADER_SIZE
    valid_end = p
    try:
        while p + MIN_RECORD <= end:
            typ = data[p + 2]
            if typ == T_PUT and p + put_size <= end:
                (mark, _t, flags, n, jid, pri, delay, ttr, state, tlen, deadline, created,
                 c0, c1, c2, c3, c4, blen) = unpack_put(data, p)
                q = p + HEAD_SIZE + n
                a = p + put_size
                if (mark != MARK or q + CRC_SIZE > end or a + tlen + blen != q
                        or crc32(mv[p:q]) != unpack_crc(data, q)[0]):
                    p = _bad(data, p, info, rec, st, name)
                    suspects = st.suspects
                    if p < 0:
                        return
                    continue
                tube = data[a:a + tlen]
                tube = names.setdefault(tube, tube)
                if created == last_created:
                    created = last_created  # share one float, as the engine does
                else:
                    last_created = created
                job = JobRecord(jid, pri, delay, ttr, data[a + tlen:q], tube, created)  # type: ignore[arg-type]
                if state in kept_states:
                    job.state = state
                    job.deadline_at = deadline
                if c0 or c1 or c2 or c3 or c4:
                    job.counts = [c0, c1, c2, c3, c4]
                job.binlog_file = seq
                if flags or state == BURIED:
                    # A copy of a job seen before (compaction), or a buried
                    # job: it moves to the end, since buried jobs come back
                    # in the order of their last records (burial order).
                    pop(jid, None)
                jobs[jid] = job
                if jid > max_id:
                    max_id = jid
                if suspects is not None:
                    suspects.discard(jid)
            elif typ == T_UPDATE and p + update_end + CRC_SIZE <= end:
                (mark, _t, _f, n, jid, pri, delay, state, deadline,
                 c0, c1, c2, c3, c4) = unpack_update(data, p)
                q = p + update_end
                if (mark != MARK or n != UPDATE_PAYLOAD
                        or crc32(mv[p:q]) != unpack_crc(data, q)[0]):
                    p = _bad(data, p, info, rec, st, name)
                    suspects = st.suspects
                    if p < 0:
                        return
                    continue
                old = jobs.get(jid)
                if old is not None:
                    job = old
                    job.pri = pri
                    job.delay = delay
                    job.state = state if state in kept_states else READY
                    job.deadline_at = deadline
                    job.counts = [c0, c1, c2, c3, c4] if (c0 or c1 or c2 or c3 or c4) else None
                    if state == BURIED:
                        del jobs[jid]  # to the end: burial order
                        jobs[jid] = job
                    if suspects is not None:
                        suspects.discard(jid)
                elif suspects is not None:
                    st.orphans += 1
                if jid > max_id:
                    max_id = jid
            else:
                mark, typ, _f, n = unpack_head(data, p)
                q = p + HEAD_SIZE + n
                if (mark != MARK or q + CRC_SIZE > end
                        or crc32(mv[p:q]) != unpack_crc(data, q)[0]):
                    p = _bad(data, p, info, rec, st, name)
                    suspects = st.suspects
                    if p < 0:
                        return
                    continue
                if typ == T_DELETE and n == DELETE_PAYLOAD:
                    jid = unpack_delete(data, p)[4]
                    pop(jid, None)
                    if jid > max_id:
                        max_id = jid
                else:
                    rec.notes.append(("error", f"binlog: {name}: unknown record type {typ} "
                                               f"at offset {p}; skipped"))
                    info.damaged = True
                    rec.damaged = True
            records += 1
            p = q + CRC_SIZE
            valid_end = p
        if p < end and not _zeros(data, p):
            _bad(data, p, info, rec, st, name)
    finally:
        mv.release()
        info.records += records
        if info.valid_end < valid_end:
            info.valid_end = valid_end
        if st.max_id < max_id:
            st.max_id = max_id


def _bad(data: bytes, p: int, info: FileInfo, rec: Recovery, st: _ReplayState,
         name: str) -> int:
    """Handle an unreadable record at ``p``: the offset to go on from, or -1 to stop."""
    end = len(data)
    if _zeros(data, p):
        return -1
    nxt = _next_good_record(data, p + 1)
    if nxt is None:
        rec.notes.append(("warn", f"binlog: {name}: dropped an incomplete record at the end "
                                  f"(offset {p}, {end - p} bytes): the server stopped while "
                                  f"writing it"))
        return -1
    info.damaged = True
    rec.damaged = True
    rec.notes.append(("error", f"binlog: {name}: bytes {p}-{nxt} of {end} are damaged "
                               f"(bad checksum); skipped them and used the good records after"))
    if st.suspects is None:
        st.suspects = set(rec.jobs)
    else:
        st.suspects.update(rec.jobs)
    return nxt


__all__ = ["BinlogError", "FileInfo", "Recovery", "read_directory", "list_files", "file_name",
           "gc_paused", "restore_into"]
