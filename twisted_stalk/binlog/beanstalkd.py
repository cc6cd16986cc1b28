# -*- test-case-name: tests.test_binlog_beanstalkd -*-
"""Reading beanstalkd's own binlog files: bytes in, job records and damage out.

Pure functions, no I/O: :func:`parse_file` turns the bytes of one
``binlog.N`` written by beanstalkd into its records and, if the file ends
badly, the byte range it could not read; :func:`replay` applies the records
of a directory's files, oldest first, exactly as beanstalkd's ``readrec``
does, and returns the live jobs (each as its latest record).
:mod:`.importer` does the file handling.

The layout (beanstalkd's ``file.c`` and ``dat.h``; native byte order and
alignment, read here as the little-endian 64-bit build, e.g. Debian amd64):

* the file starts with the format version, a 4-byte ``int``: 7 (beanstalkd
  1.5 to 1.13) or 5 (1.4.x; 1.5 to 1.13 still read it);
* then records, each ``namelen``, the tube name (``namelen`` bytes), a
  ``Jobrec`` and, if ``namelen`` is not 0, the body (``body_size`` bytes,
  with its trailing CRLF).  A record with a name is a *full* record (a put, or
  a copy made by compaction); one without is a *short* record, the job's new
  state.  The rest of a file is preallocated zeros: a record whose job id is
  0 ends it.

Version 7: ``namelen`` is an ``int``; ``Jobrec`` is 80 bytes::

    uint64 id; uint32 pri; (4 pad) int64 delay; int64 ttr; int32 body_size;
    (4 pad) int64 created_at; int64 deadline_at; uint32 reserve_ct,
    timeout_ct, release_ct, bury_ct, kick_ct; byte state; (3 pad)

with times in nanoseconds (``created_at`` and ``deadline_at`` wall-clock).
Version 5: ``namelen`` is a ``size_t`` (8 bytes); ``Jobrec5`` is read as its
first 77 bytes (up to ``pad``), the same fields in microseconds.

States: 0 Invalid (the job was deleted), 1 Ready, 2 Reserved, 3 Buried,
4 Delayed, 5 Copy (never written).

The format has no checksum and no record marker, so a reader cannot find
the next record after a bad one: like beanstalkd, reading a file stops at
the first record that cannot be read.  Every field a beanstalkd would have
written is checked (tube name, state, body size and its CRLF, non-negative
times; ``deadline_at`` only for a delayed job, since it is undefined
otherwise), so bytes that fail are reported, never turned into a job.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, NamedTuple, Optional, Set, Tuple

from ..protocol.commands import valid_tube_name

#: The versions this module reads, and the one beanstalkd 1.5-1.13 writes.
V5 = 5
V7 = 7
VERSIONS = (V5, V7)

VERSION = struct.Struct("<i")
NAMELEN7 = struct.Struct("<i")
NAMELEN5 = struct.Struct("<Q")
JOBREC7 = struct.Struct("<QI4xqqi4xqqIIIIIB3x")
JOBREC5 = struct.Struct("<QI4xQQi4xQQIIIIIB")
assert JOBREC7.size == 80 and JOBREC5.size == 77

#: beanstalkd's ``Jobrec.state`` values.
INVALID, READY, RESERVED, BURIED, DELAYED, COPY = range(6)
#: beanstalkd's MAX_TUBE_NAME_LEN is 201, name plus NUL.
MAX_NAME = 200
#: The largest body beanstalkd accepts at all (``-z`` is capped to it), plus CRLF.
MAX_BODY = 1073741824 + 2

_NS = {V7: 1, V5: 1000}  # nanoseconds per stored time unit


class UnknownVersion(ValueError):
    """The file starts with a format version this module cannot read."""

    def __init__(self, version: int) -> None:
        super().__init__(f"beanstalkd binlog format version {version} is not supported "
                         f"(versions {V5} and {V7} are)")
        self.version = version


class Record(NamedTuple):
    """One record of a beanstalkd binlog file; times in nanoseconds.

    ``tube`` and ``body`` are None for a short record (a state change).
    ``offset`` is where the record starts in its file.
    """

    offset: int
    id: int
    pri: int
    delay: int
    ttr: int
    created_at: int
    deadline_at: int
    counts: Tuple[int, int, int, int, int]
    state: int
    tube: Optional[bytes] = None
    body: Optional[bytes] = None


@dataclass(frozen=True)
class Damage:
    """Bytes ``start``..``end`` of a file could not be read as records.

    ``torn`` is true when they are an incomplete record at the very end (a
    write cut short), false for damage with data after it.
    """

    start: int
    end: int
    size: int
    torn: bool
    why: str


@dataclass
class ParsedFile:
    """What :func:`parse_file` read from one file."""

    version: int
    records: List[Record] = field(default_factory=list)
    damage: Optional[Damage] = None


def file_version(data: bytes) -> Optional[int]:
    """The format version a file starts with, or None when it is shorter than that."""
    if len(data) < VERSION.size:
        return None
    return VERSION.unpack_from(data, 0)[0]


def _zeros_from(data: bytes, start: int) -> bool:
    return data.count(0, start) == len(data) - start


def parse_file(data: bytes) -> ParsedFile:
    """Read every record of one beanstalkd binlog file.

    Raises :class:`UnknownVersion` for a version other than 5 or 7, and
    ValueError for a file too short to hold a version.  Reading stops at the
    zeros after the last record, or at the first record that cannot be read
    (then :attr:`ParsedFile.damage` says which bytes and why).
    """
    version = file_version(data)
    if version is None:
        raise ValueError("the file is shorter than its version number")
    if version not in VERSIONS:
        raise UnknownVersion(version)
    out = ParsedFile(version)
    namelen_s = NAMELEN7 if version == V7 else NAMELEN5
    rec_s = JOBREC7 if version == V7 else JOBREC5
    unit = _NS[version]
    end = len(data)
    p = VERSION.size
    names: Set[bytes] = set()
    while p < end:
        why, extent = _read_record(data, p, namelen_s, rec_s, unit, out.records, names)
        if why is None:
            p = extent
            continue
        if _zeros_from(data, p):  # the preallocated rest of the file: the end
            break
        # Torn: the record runs past the end, or nothing but zeros follows
        # where it should have ended (a write cut short in preallocated space).
        torn = extent > end or _zeros_from(data, max(extent, p + 1))
        stop = min(end, max(extent, p + 1)) if torn else end
        out.damage = Damage(p, stop, end, torn, why)
        break
    return out


def _read_record(data: bytes, p: int, namelen_s: struct.Struct, rec_s: struct.Struct,
                 unit: int, records: List[Record], names: Set[bytes]) -> Tuple[Optional[str], int]:
    """Read the record at ``p`` into ``records``: ``(None, end)``, or ``(why, extent)``
    when it is bad (``extent``: where it would end, as far as that is known).
    ``names`` holds the tube names already found valid."""
    end = len(data)
    a = p + namelen_s.size
    if a > end:
        return "incomplete record", a
    namelen = namelen_s.unpack_from(data, p)[0]
    if namelen < 0 or namelen > MAX_NAME:
        return f"tube name length {namelen}", a
    b = a + namelen
    c = b + rec_s.size
    if c > end:
        return "incomplete record", c
    tube = data[a:b] if namelen else None
    if tube is not None and tube not in names:
        if not valid_tube_name(tube):
            return "invalid tube name", c
        names.add(tube)
    (jid, pri, delay, ttr, body_size, created, deadline,
     r, t, rl, bu, k, state) = rec_s.unpack_from(data, b)
    if jid == 0:
        return "job id 0", c
    if state > DELAYED:
        return f"job {jid}: unknown state {state}", c
    if delay < 0 or ttr < 0 or created < 0 or (state == DELAYED and deadline < 0):
        return f"job {jid}: negative time", c
    body = None
    if tube is not None:
        if not 2 <= body_size <= MAX_BODY:
            return f"job {jid}: body size {body_size}", c
        d = c + body_size
        if d > end:
            return f"job {jid}: incomplete body", d
        body = data[c:d]
        if not body.endswith(b"\r\n"):
            return f"job {jid}: body does not end with CRLF", d
        c = d
    records.append(Record(p, jid, pri, delay * unit, ttr * unit, created * unit,
                          deadline * unit, (r, t, rl, bu, k), state, tube, body))
    return None, c


def apply(jobs: Dict[int, Record], records: Iterable[Record]) -> int:
    """Apply one file's records to ``jobs`` as beanstalkd's ``readrec`` does;
    returns the highest id of a job created here (0: none).

    A live job is kept as its latest record, with the tube of its first full
    record and the body of its latest; its ``state`` is READY, BURIED or
    DELAYED (a job reserved when beanstalkd stopped comes back ready).
    ``jobs`` (id -> record) is in the order beanstalkd restores them: that of
    each job's first record.

    * a short record for a job not seen is ignored (its full record was in a
      file already removed: the job was deleted or copied on);
    * state Invalid deletes the job;
    * otherwise the record's fields replace the job's (a full record's body
      too; the tube stays the one first seen), Reserved becoming Ready.
    """
    top = 0
    for r in records:
        job = jobs.get(r.id)
        if r.state == INVALID:
            if job is not None:
                del jobs[r.id]
            continue
        if job is None:
            if r.tube is None:
                continue
            top = max(top, r.id)
        else:
            r = r._replace(tube=job.tube, body=job.body if r.body is None else r.body)
        jobs[r.id] = r._replace(state=READY) if r.state == RESERVED else r
    return top


def replay(files: Iterable[ParsedFile]) -> Tuple[Dict[int, Record], int]:
    """The live jobs of a directory's files (oldest first), see :func:`apply`,
    and the next job id."""
    jobs: Dict[int, Record] = {}
    top = 0
    for f in files:
        top = max(top, apply(jobs, f.records))
    return jobs, top + 1


__all__ = ["BURIED", "DELAYED", "Damage", "INVALID", "JOBREC5", "JOBREC7", "ParsedFile",
           "READY", "RESERVED", "Record", "UnknownVersion", "VERSIONS", "apply", "file_version",
           "parse_file", "replay"]
