# -*- test-case-name: tests.test_binlog_beanstalkd -*-
"""Taking over a directory beanstalkd wrote: its jobs in, its files moved aside.

``-b DIR`` on a directory holding beanstalkd's ``binlog.N`` files (format
version 7 or 5) loads their jobs; see docs/persistence.md, "Moving from
beanstalkd".  The steps, in an order a crash at any point survives:

1. :func:`read_beanstalkd_files` (from :meth:`BinlogJournal.open`) reads
   them into a :class:`~twisted_stalk.binlog.replay.Recovery` (the bytes are
   parsed by :mod:`.beanstalkd`); our own files, if an earlier import was
   cut short, are then replayed on top of it;
2. :meth:`BinlogJournal.attach` writes a full copy of every imported job
   into our first file and syncs it;
3. only then :func:`move_aside` moves beanstalkd's files into a dated
   subfolder of the directory.  Nothing is deleted.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Dict, List, Set, Tuple

from ..core.job import BURIED, DELAYED, READY, JobRecord
from . import beanstalkd
from .files import sync_directory
from .format import BEANSTALKD_VERSIONS, HEADER_SIZE, read_file_header
from .replay import BinlogError, Recovery, list_files

_NS = 1_000_000_000
_STATES = {beanstalkd.READY: READY, beanstalkd.BURIED: BURIED, beanstalkd.DELAYED: DELAYED}
#: The subfolder beanstalkd's files go to (a UTC time stamp follows).
SUBFOLDER = "beanstalkd-binlog-"


@dataclass
class BeanstalkdFiles:
    """beanstalkd's files found in a binlog directory, and their jobs."""

    directory: str
    #: (sequence number, path, format version), oldest first.
    files: List[Tuple[int, str, int]]
    #: The jobs (``job.tube`` is still the name), next id and log lines.
    recovery: Recovery
    #: Records read from the files.
    records: int = 0
    #: The jobs that came from these files (ids, in restore order).
    job_ids: List[int] = field(default_factory=list)

    @property
    def seqs(self) -> Set[int]:
        return {seq for seq, _, _ in self.files}

    @property
    def last_seq(self) -> int:
        return max(self.seqs)

    @property
    def versions(self) -> str:
        return " and ".join(str(v) for v in sorted({v for _, _, v in self.files}))


def beanstalkd_version(head: bytes) -> int:
    """The beanstalkd format version a file starting with ``head`` has, or 0
    when it is not a beanstalkd file (ours, empty, or something else)."""
    if len(head) < 4 or head[:4] not in BEANSTALKD_VERSIONS:
        return 0
    if len(head) >= HEADER_SIZE and read_file_header(head)[1]:
        return 0  # our magic, perhaps damaged
    return int.from_bytes(head[:4], "little")


def read_beanstalkd_files(directory: str) -> "BeanstalkdFiles | None":
    """Read beanstalkd's binlog files in ``directory``; None when there are none.

    Raises :class:`BinlogError` (one line) for a format version other than
    5 and 7, or when files of ours are older than beanstalkd's (two
    histories that cannot be put in one order).
    """
    found: List[Tuple[int, str, int]] = []
    ours: List[int] = []
    for seq, path in list_files(directory):
        try:
            with open(path, "rb") as f:
                version = beanstalkd_version(f.read(HEADER_SIZE))
        except OSError as e:
            raise BinlogError(f"cannot read binlog file {path}: {e.strerror}")
        if version:
            if version not in beanstalkd.VERSIONS:
                raise BinlogError(
                    f"{path} is a beanstalkd binlog file of format version {version}, which "
                    f"cannot be read (versions 5 and 7 can): move it out of the directory")
            found.append((seq, path, version))
        else:
            ours.append(seq)
    if not found:
        return None
    newest = max(seq for seq, _, _ in found)
    if any(seq < newest for seq in ours):
        raise BinlogError(f"{directory} holds beanstalkd binlog files newer than twisted-stalk "
                          "ones: move one set out of the directory")
    out = BeanstalkdFiles(directory, found, Recovery())
    _replay(out)
    return out


def _replay(out: BeanstalkdFiles) -> None:
    rec = out.recovery
    jobs: Dict[int, beanstalkd.Record] = {}
    suspects: Set[int] = set()
    damaged = False
    top = 0
    for seq, path, _version in out.files:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise BinlogError(f"cannot read binlog file {path}: {e.strerror}")
        parsed = beanstalkd.parse_file(data)
        out.records += len(parsed.records)
        if damaged:
            suspects.difference_update(r.id for r in parsed.records)
        top = max(top, beanstalkd.apply(jobs, parsed.records))
        bad = parsed.damage
        if bad is None:
            continue
        name = os.path.basename(path)
        if bad.torn:
            rec.notes.append(("warn", f"binlog: {name} (beanstalkd's): dropped an incomplete "
                                      f"record at the end (bytes {bad.start}-{bad.end}: "
                                      f"{bad.why}): beanstalkd stopped while writing it"))
        else:
            damaged = rec.damaged = True
            suspects.update(jobs)
            rec.notes.append(("error", f"binlog: {name} (beanstalkd's): bytes {bad.start}-"
                                       f"{bad.end} of {bad.size} are damaged ({bad.why}); "
                                       f"the format has no way to find the next record, so "
                                       f"the rest of the file was skipped"))
    names: Dict[bytes, bytes] = {}
    for b in jobs.values():
        rec.jobs[b.id] = _job(b, names)
    out.job_ids = list(rec.jobs)
    rec.next_id = top + 1
    if damaged:
        rec.uncertain = len(suspects.intersection(jobs))
        rec.notes.append(("error", f"binlog: imported {len(jobs)} jobs from beanstalkd's files "
                                   f"despite damage: {rec.uncertain} of them were last recorded "
                                   f"before a damaged stretch and are restored as recorded then "
                                   f"(a later change or delete may have been lost)"))


def _job(b: beanstalkd.Record, names: Dict[bytes, bytes]) -> JobRecord:
    """Our job for a job of beanstalkd's (``tube`` is the name until restored)."""
    tube = names.setdefault(b.tube, b.tube)
    job = JobRecord(b.id, b.pri, b.delay // _NS, b.ttr // _NS, b.body, tube,  # type: ignore[arg-type]
              b.created_at / _NS)
    job.state = _STATES[b.state]
    if job.state == DELAYED:
        job.deadline_at = b.deadline_at / _NS
    if any(b.counts):
        job.counts = list(b.counts)
    return job


def move_aside(found: BeanstalkdFiles, now: float, sync: bool = True) -> str:
    """Move beanstalkd's files into a new dated subfolder of their directory
    (``beanstalkd-binlog-YYYYMMDDTHHMMSSZ``); returns its path.  Raises OSError."""
    base = os.path.join(found.directory, SUBFOLDER + time.strftime("%Y%m%dT%H%M%SZ",
                                                                 time.gmtime(now)))
    target, n = base, 1
    while True:
        try:
            os.mkdir(target, 0o700)
            break
        except FileExistsError:
            n += 1
            target = f"{base}-{n}"
    for _seq, path, _version in found.files:
        os.rename(path, os.path.join(target, os.path.basename(path)))
    if sync:
        sync_directory(target)
        sync_directory(found.directory)
    return target


__all__ = ["BeanstalkdFiles", "SUBFOLDER", "beanstalkd_version", "move_aside",
           "read_beanstalkd_files"]
