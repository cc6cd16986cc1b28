"""Taking over beanstalkd's binlog files: the reader on hand-built bytes, the
import through the journal, and the real thing against Debian's beanstalkd.

The hand-built records are made with ctypes structures declared field for
field as in beanstalkd's ``dat.h``/``file.c``, so their padding is the C
compiler's (amd64), not the reader's own struct strings.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional, Tuple

import pytest
from twisted.internet.task import Clock

from servers import REFERENCE, RunningServer, free_port, ours_command
from test_binlog import Server, buried_order, snapshot
from test_binlog_server import (  # noqa: F401  (the fixture stops what a test started)
    _close_connections_and_servers, connect, start_server, stats_job)
from wire import Wire

from twisted_stalk.binlog import BinlogError, BinlogJournal
from twisted_stalk.binlog import beanstalkd as bs
from twisted_stalk.binlog.format import parse_file_name
from twisted_stalk.binlog.importer import SUBFOLDER
from twisted_stalk.core import BURIED, DELAYED, READY, MemoryEngine

NS = 1_000_000_000


class Jobrec(ctypes.Structure):
    """``struct Jobrec`` of dat.h (format version 7)."""

    _fields_ = [("id", ctypes.c_uint64), ("pri", ctypes.c_uint32), ("delay", ctypes.c_int64),
                ("ttr", ctypes.c_int64), ("body_size", ctypes.c_int32),
                ("created_at", ctypes.c_int64), ("deadline_at", ctypes.c_int64),
                ("reserve_ct", ctypes.c_uint32), ("timeout_ct", ctypes.c_uint32),
                ("release_ct", ctypes.c_uint32), ("bury_ct", ctypes.c_uint32),
                ("kick_ct", ctypes.c_uint32), ("state", ctypes.c_ubyte)]


class Jobrec5(ctypes.Structure):
    """``struct Jobrec5`` of file.c (format version 5; read up to ``pad``)."""

    _fields_ = [("id", ctypes.c_uint64), ("pri", ctypes.c_uint32), ("delay", ctypes.c_uint64),
                ("ttr", ctypes.c_uint64), ("body_size", ctypes.c_int32),
                ("created_at", ctypes.c_uint64), ("deadline_at", ctypes.c_uint64),
                ("reserve_ct", ctypes.c_uint32), ("timeout_ct", ctypes.c_uint32),
                ("release_ct", ctypes.c_uint32), ("bury_ct", ctypes.c_uint32),
                ("kick_ct", ctypes.c_uint32), ("state", ctypes.c_ubyte),
                ("pad", ctypes.c_char * 1)]


needs_amd64 = pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8 or sys.byteorder != "little",
                                 reason="the layout is that of a little-endian 64-bit build")


def rec(jid: int, state: int, tube: bytes = b"", body: Optional[bytes] = None, *,
        version: int = 7, pri: int = 10, delay: int = 0, ttr: int = 60, created: int = 1000,
        deadline: int = 0, counts=(0, 0, 0, 0, 0), body_size: Optional[int] = None) -> bytes:
    """One record as beanstalkd writes it; times in seconds; ``body`` with CRLF.
    A record with a ``tube`` is full (body follows), one without is short."""
    unit = NS if version == 7 else 1_000_000
    size = body_size if body_size is not None else len(body or b"\r\n")
    r = (Jobrec if version == 7 else Jobrec5)(
        jid, pri, delay * unit, ttr * unit, size, created * unit, deadline * unit, *counts, state)
    raw = bytes(r) if version == 7 else bytes(r)[:Jobrec5.pad.offset]
    namelen = (ctypes.c_int if version == 7 else ctypes.c_size_t)(len(tube))
    return bytes(namelen) + tube + raw + (body if tube else b"")


def head(version: int = 7) -> bytes:
    return bytes(ctypes.c_int(version))


# ------------------------------------------------------------------ layout


@needs_amd64
def test_record_layout_is_the_c_compilers():
    assert ctypes.sizeof(Jobrec) == bs.JOBREC7.size == 80
    assert Jobrec5.pad.offset == bs.JOBREC5.size == 77
    fields = (7, 2**32 - 1, 5 * NS, 60 * NS, 12, 123 * NS, 456 * NS, 1, 2, 3, 4, 5, 3)
    assert bytes(Jobrec(*fields)) == bs.JOBREC7.pack(*fields)
    assert bytes(Jobrec5(*fields))[:77] == bs.JOBREC5.pack(*fields)


# ------------------------------------------------------------- the reader


@needs_amd64
def test_replay_follows_readrec():
    f1 = head() + b"".join([
        rec(1, bs.READY, b"a", b"one\r\n", pri=5, ttr=30),
        rec(2, bs.DELAYED, b"b", b"two\r\n", delay=100, deadline=5000),
        rec(3, bs.READY, b"a", b"three\r\n"),
        rec(1, bs.BURIED, pri=7, ttr=30, counts=(1, 0, 0, 1, 0), body_size=5),  # bury
        rec(3, bs.INVALID, body_size=7),                                      # delete
        rec(99, bs.BURIED),            # short record of a job whose put is gone: ignored
        rec(4, bs.RESERVED, b"c", b"\x00\xff\r\n\r\n", counts=(1, 0, 0, 0, 0)),
        rec(5, bs.READY, b"c", b"\r\n"),  # an empty body
    ]) + bytes(500)
    f2 = head() + rec(2, bs.DELAYED, b"b", b"two\r\n", delay=100, deadline=5000,
                      counts=(0, 0, 0, 0, 1))  # a copy made by compaction, later
    jobs, next_id = bs.replay([bs.parse_file(f1), bs.parse_file(f2)])
    assert list(jobs) == [1, 2, 4, 5]  # the order of first records
    assert next_id == 6
    one = jobs[1]
    assert (one.tube, one.body, one.pri, one.ttr, one.state, one.counts) == (
        b"a", b"one\r\n", 7, 30 * NS, bs.BURIED, (1, 0, 0, 1, 0))
    two = jobs[2]
    assert (two.state, two.delay, two.deadline_at, two.counts) == (
        bs.DELAYED, 100 * NS, 5000 * NS, (0, 0, 0, 0, 1))
    assert jobs[4].state == bs.READY and jobs[4].body == b"\x00\xff\r\n\r\n"
    assert jobs[5].body == b"\r\n"
    assert bs.parse_file(f1).damage is None


@needs_amd64
def test_version_5_records_are_in_microseconds():
    f = head(5) + rec(1, bs.DELAYED, b"old", b"v5\r\n", version=5, delay=9, ttr=40,
                      created=77, deadline=88) + rec(1, bs.BURIED, version=5, ttr=40,
                                                     created=77, body_size=4) + bytes(200)
    parsed = bs.parse_file(f)
    assert parsed.version == 5 and parsed.damage is None
    (job,) = bs.replay([parsed])[0].values()
    assert (job.tube, job.body, job.delay, job.ttr, job.created_at, job.state) == (
        b"old", b"v5\r\n", 0, 40 * NS, 77 * NS, bs.BURIED)


def test_unknown_version_is_refused():
    with pytest.raises(bs.UnknownVersion, match="version 8 is not supported"):
        bs.parse_file(head(8) + bytes(100))


@needs_amd64
def test_every_truncation_keeps_exactly_the_whole_records_before_it():
    records = [rec(1, bs.READY, b"t", b"first\r\n"), rec(2, bs.READY, b"t", b"second\r\n"),
               rec(1, bs.BURIED, body_size=7, counts=(1, 0, 0, 1, 0)),
               rec(3, bs.READY, b"u", b"third\r\n")]
    data = head() + b"".join(records)
    bounds = [4]
    for r in records:
        bounds.append(bounds[-1] + len(r))
    for n in range(4, len(data) + 1):
        parsed = bs.parse_file(data[:n])
        whole = max(i for i, b in enumerate(bounds) if b <= n)
        assert len(parsed.records) == whole, n
        if not data[bounds[whole]:n].strip(b"\0"):  # whole records, then zeros (or nothing)
            assert parsed.damage is None
        else:
            d = parsed.damage
            assert d is not None and d.torn and (d.start, d.end) == (bounds[whole], n), n
        expected = bs.replay([bs.parse_file(head() + b"".join(records[:whole]))])[0]
        assert bs.replay([parsed])[0] == expected
        # cut short in preallocated space: zeros follow the partial record
        padded = bs.replay([bs.parse_file(data[:n] + bytes(300))])[0]
        for job in padded.values():  # never a job that was not put, nor a body not written
            assert job.body == {1: b"first\r\n", 2: b"second\r\n", 3: b"third\r\n"}[job.id]


@needs_amd64
@pytest.mark.parametrize("damage", ["namelen", "tube", "state", "body"])
def test_damage_in_the_middle_is_reported_by_range_and_invents_nothing(damage):
    first = rec(1, bs.READY, b"t", b"first\r\n")
    second = bytearray(rec(2, bs.READY, b"t", b"second\r\n"))
    third = rec(3, bs.READY, b"t", b"third\r\n")
    if damage == "namelen":
        second[0:4] = bytes(ctypes.c_int(5000))
    elif damage == "tube":
        second[4] = ord("*")
    elif damage == "state":
        second[5 + 76] = 9
    else:
        second[-1] = ord("X")  # the body's CRLF
    data = head() + first + bytes(second) + third + bytes(100)
    parsed = bs.parse_file(data)
    assert [r.id for r in parsed.records] == [1]
    d = parsed.damage
    assert d is not None and not d.torn
    assert (d.start, d.end, d.size) == (4 + len(first), len(data), len(data))
    assert list(bs.replay([parsed])[0]) == [1]


# ------------------------------------------------- the import, through the journal

T_NOW = 2000.0  # the Clock's wall-clock time in these tests


@pytest.fixture
def clock() -> Clock:
    c = Clock()
    c.advance(T_NOW)
    return c


def write_files(directory, files: Dict[int, bytes]) -> None:
    for seq, data in files.items():
        (directory / f"binlog.{seq}").write_bytes(data)


def binlogs(directory) -> List[str]:
    return sorted(n for n in os.listdir(directory) if parse_file_name(n))


def subfolders(directory) -> List[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith(SUBFOLDER))


THEIRS = {
    2: head() + b"".join([
        rec(4, bs.READY, b"alpha", b"ready\r\n", pri=5, ttr=30, created=1500),
        rec(5, bs.DELAYED, b"beta", b"later\r\n", delay=600, deadline=2500, created=1900),
        rec(6, bs.READY, b"alpha", b"\x00bin\xff\r\n"),
        rec(7, bs.READY, b"alpha", b"gone\r\n"),
        rec(8, bs.READY, b"gamma", b"\r\n"),
    ]) + bytes(1000),
    3: head() + b"".join([
        rec(6, bs.BURIED, pri=3, counts=(1, 0, 0, 1, 0), body_size=7),
        rec(7, bs.INVALID, body_size=6),
        rec(4, bs.BURIED, pri=5, ttr=30, created=1500, counts=(2, 1, 0, 1, 0), body_size=7),
        rec(8, bs.RESERVED, b"gamma", b"\r\n", counts=(1, 0, 0, 0, 0)),  # held at the crash
    ]) + bytes(1000),
}


@needs_amd64
def test_import_restores_every_job_and_moves_the_files_aside(tmp_path, clock):
    write_files(tmp_path, THEIRS)
    srv = Server(tmp_path, clock)
    q = srv.queue
    assert snapshot(q) == {
        4: (b"alpha", BURIED, 5, 0, 30, b"ready\r\n", None, (2, 1, 0, 1, 0), 1500.0),
        5: (b"beta", DELAYED, 10, 600, 60, b"later\r\n", 2500.0, (0, 0, 0, 0, 0), 1900.0),
        6: (b"alpha", BURIED, 3, 0, 60, b"\x00bin\xff\r\n", None, (1, 0, 0, 1, 0), 1000.0),
        8: (b"gamma", READY, 10, 0, 60, b"\r\n", None, (1, 0, 0, 0, 0), 1000.0),
    }
    assert buried_order(q) == {b"alpha": [4, 6]}  # beanstalkd's: order of first records
    assert q.next_id == 9
    # their files are in a dated subfolder, byte for byte; ours is numbered after them
    (sub,) = subfolders(tmp_path)
    assert sub == SUBFOLDER + "19700101T003320Z"
    for seq, data in THEIRS.items():
        assert (tmp_path / sub / f"binlog.{seq}").read_bytes() == data
    assert binlogs(tmp_path) == ["binlog.4"]
    before = snapshot(q)
    srv.close()
    again = Server(tmp_path, clock)  # from our own file now
    assert snapshot(again.queue) == before
    assert buried_order(again.queue) == {b"alpha": [4, 6]}
    assert subfolders(tmp_path) == [sub] and again.journal.recovery.records == 4
    again.close()


@needs_amd64
def test_a_start_cut_short_before_the_move_imports_again_without_duplicates(tmp_path, clock):
    write_files(tmp_path, THEIRS)
    srv = Server(tmp_path, clock)
    before = snapshot(srv.queue)
    srv.journal.flush()
    os.close(srv.journal.fd)  # "kill -9" after the copies were written ...
    (sub,) = subfolders(tmp_path)
    for seq in THEIRS:  # ... and before beanstalkd's files were moved
        os.rename(tmp_path / sub / f"binlog.{seq}", tmp_path / f"binlog.{seq}")
    srv.journal._lock.release()
    again = Server(tmp_path, clock)
    assert snapshot(again.queue) == before
    assert len(again.queue.jobs) == 4
    assert subfolders(tmp_path) == [sub, sub + "-2"]
    assert binlogs(tmp_path) == ["binlog.4", "binlog.5"]
    again.close()


@needs_amd64
def test_version_5_files_are_imported(tmp_path, clock):
    write_files(tmp_path, {1: head(5) + rec(1, bs.READY, b"old", b"five\r\n", version=5,
                                            pri=2, ttr=9, created=1234) + bytes(100)})
    srv = Server(tmp_path, clock)
    assert snapshot(srv.queue) == {
        1: (b"old", READY, 2, 0, 9, b"five\r\n", None, (0, 0, 0, 0, 0), 1234.0)}
    srv.close()


@needs_amd64
def test_damage_is_reported_by_byte_range_and_later_files_still_count(tmp_path, clock):
    damaged = bytearray(THEIRS[2])
    start = 4 + len(rec(4, bs.READY, b"alpha", b"ready\r\n"))
    damaged[start + 4] = ord("*")  # job 5's tube name
    write_files(tmp_path, {2: bytes(damaged), 3: THEIRS[3]})
    srv = Server(tmp_path, clock)
    # job 4's record came before the damage; 5 to 8 were unreadable, but 8 has a
    # full record (a copy) in binlog.3
    assert sorted(srv.queue.jobs) == [4, 8]
    notes = srv.journal.recovery.notes
    assert notes[0] == ("error", f"binlog: binlog.2 (beanstalkd's): bytes {start}-{len(damaged)} "
                                 f"of {len(damaged)} are damaged (invalid tube name); the format "
                                 "has no way to find the next record, so the rest of the file "
                                 "was skipped")
    assert notes[1][0] == "error" and "imported 2 jobs" in notes[1][1]
    assert "0 of them were last recorded before a damaged stretch" in notes[1][1]
    assert srv.queue.jobs[4].state == BURIED  # binlog.3's record of it still counts
    srv.close()


def test_unknown_version_and_mixed_histories_are_refused(tmp_path, clock):
    write_files(tmp_path, {1: head(6) + bytes(100)})
    with pytest.raises(BinlogError) as e:
        BinlogJournal(str(tmp_path), clock).open()
    assert str(e.value) == (f"{tmp_path}/binlog.1 is a beanstalkd binlog file of format "
                            "version 6, which cannot be read (versions 5 and 7 can): move it "
                            "out of the directory")
    os.unlink(tmp_path / "binlog.1")
    srv = Server(tmp_path, clock)  # ours: binlog.1
    srv.put(b"x")
    srv.close()
    write_files(tmp_path, {2: head() + bytes(100)})
    with pytest.raises(BinlogError, match="holds beanstalkd binlog files newer than"):
        BinlogJournal(str(tmp_path), clock).open()
    assert binlogs(tmp_path) == ["binlog.1", "binlog.2"]  # nothing moved


# ------------------------------------------- against Debian's beanstalkd, over sockets

needs_reference = pytest.mark.skipif(not REFERENCE, reason="beanstalkd is not installed")


def start(kind: str, *flags: str) -> Tuple[RunningServer, Wire]:
    srv = start_server(kind, *flags)
    return srv, connect(srv)


def stop_and_read_log(srv: RunningServer, sig: int = signal.SIGTERM) -> str:
    srv.stop(sig)
    return srv.proc.stderr.read().decode()


def ok(w: Wire, command: bytes, expect: bytes) -> bytes:
    reply = w.ask(command)
    assert reply.startswith(expect), (command, reply)
    return reply


def body_of(w: Wire, jid: int) -> bytes:
    reply = ok(w, b"peek %d\r\n" % jid, b"FOUND")
    return reply.split(b"\r\n", 1)[1][:-2]


#: stats-job fields that must come back exactly as beanstalkd itself restores them.
EXACT = ("id", "tube", "state", "pri", "delay", "ttr", "reserves", "timeouts", "releases",
         "buries", "kicks")
TUBES = (b"default", b"emails", b"t-2", b"a.b+c$(d)_/;")


def view(w: Wire, ids) -> Dict[int, Optional[Tuple]]:
    """Every job as a client sees it: stats-job fields, body, and ``age`` and
    ``time-left`` (compared by :func:`assert_same`, with some leeway)."""
    out: Dict[int, Optional[Tuple]] = {}
    for jid in ids:
        s = stats_job(w, jid)
        if not s:
            out[jid] = None
            continue
        out[jid] = (tuple(s[k] for k in EXACT), body_of(w, jid),
                    (int(s["age"]), int(s["time-left"]) if s["state"] == "delayed" else 0))
    return out


def assert_same(got: Dict[int, Optional[Tuple]], want: Dict[int, Optional[Tuple]]) -> None:
    """Equal views, but for ``age`` and ``time-left``, which may differ by the
    seconds between the two reads."""
    assert got.keys() == want.keys()
    for jid, g in got.items():
        w = want[jid]
        assert (g is None) == (w is None), jid
        if g is not None:
            assert g[:2] == w[:2], jid
            assert all(abs(a - b) <= 3 for a, b in zip(g[2], w[2])), (jid, g[2], w[2])


def first_buried(w: Wire) -> Dict[bytes, bytes]:
    out = {}
    for tube in TUBES:
        ok(w, b"use %s\r\n" % tube, b"USING")
        out[tube] = w.ask(b"peek-buried\r\n").split(b"\r\n")[0]
    return out


def drive_reference(w: Wire) -> Tuple[Dict[int, Tuple], List[int]]:
    """Put, delay, bury, kick, release, reserve and delete through a real
    beanstalkd; returns what it acknowledged (id -> (tube, body, pri, state))
    and the ids of the jobs still reserved."""
    import random
    rng = random.Random(23)
    acked: Dict[int, Tuple] = {}
    bodies = [b"", b"\r\n", bytes(range(256)), b"x" * 3000, b"\x00\r\n\x00", b"plain"]
    for i in range(150):
        tube = TUBES[i % len(TUBES)]
        ok(w, b"use %s\r\n" % tube, b"USING")
        body = bodies[i % len(bodies)] + rng.randbytes(rng.randrange(0, 40))
        pri = rng.choice([0, 1023, 1024, 2**32 - 1, rng.randrange(2**32)])
        delay = 3600 if i % 7 == 0 else 0
        ttr = rng.choice([1, 60, 120, 3600])
        jid = int(ok(w, b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, len(body), body),
                     b"INSERTED").split()[1])
        acked[jid] = (tube, body, pri, "delayed" if delay else "ready")
    for tube in TUBES:
        ok(w, b"watch %s\r\n" % tube, b"WATCHING")
    ready = [j for j, a in acked.items() if a[3] == "ready"]
    rng.shuffle(ready)
    for jid in ready[:30]:
        ok(w, b"delete %d\r\n" % jid, b"DELETED")
        del acked[jid]
    held = []
    for n, jid in enumerate(ready[30:75]):
        ok(w, b"reserve-job %d\r\n" % jid, b"RESERVED")
        tube, body, pri, _ = acked[jid]
        if n % 3 == 0:
            ok(w, b"bury %d %d\r\n" % (jid, n), b"BURIED")
            acked[jid] = (tube, body, n, "buried")
        elif n % 3 == 1:
            ok(w, b"release %d %d 7200\r\n" % (jid, pri + 1 if pri < 2**32 - 1 else 0),
               b"RELEASED")
            acked[jid] = (tube, body, pri + 1 if pri < 2**32 - 1 else 0, "delayed")
        else:
            held.append(jid)  # still reserved at the kill
    buried = [j for j, a in acked.items() if a[3] == "buried"]
    for jid in buried[::4]:
        ok(w, b"kick-job %d\r\n" % jid, b"KICKED")
        acked[jid] = acked[jid][:3] + ("ready",)
    delayed = [j for j, a in acked.items() if a[3] == "delayed"]
    for jid in delayed[:3]:
        ok(w, b"kick-job %d\r\n" % jid, b"KICKED")
        acked[jid] = acked[jid][:3] + ("ready",)
    for jid in ready[75:80]:
        # Released at once with a new priority: beanstalkd writes nothing for
        # that, so its files keep the old one unless compaction copied the job since.
        ok(w, b"reserve-job %d\r\n" % jid, b"RESERVED")
        ok(w, b"release %d 1 0\r\n" % jid, b"RELEASED")
        tube, body, pri, state = acked[jid]
        acked[jid] = (tube, body, (pri, 1), state)
    for jid in ready[80:85]:
        ok(w, b"delete %d\r\n" % jid, b"DELETED")
        del acked[jid]
    ok(w, b"use churn\r\n", b"USING")
    for _ in range(300):  # garbage enough that beanstalkd compacts: copies in newer files
        jid = int(ok(w, b"put 1 0 10 2000\r\n%s\r\n" % (b"c" * 2000), b"INSERTED").split()[1])
        ok(w, b"delete %d\r\n" % jid, b"DELETED")
    for jid in held:
        acked[jid] = acked[jid][:3] + ("ready",)  # what a restart makes of it
    return acked, held


def beanstalkd_recounted(truth: Dict[int, Optional[Tuple]]) -> Dict[int, Optional[Tuple]]:
    """beanstalkd's restart counts each buried job's burial once more
    (``prot_replay`` calls ``bury_job``, which counts): ours keeps the count
    the file recorded, which is what stats-job said before the crash."""
    out = dict(truth)
    for jid, v in truth.items():
        if v is not None and v[0][2] == "buried":
            fields = list(v[0])
            fields[EXACT.index("buries")] = str(int(fields[EXACT.index("buries")]) - 1)
            out[jid] = (tuple(fields),) + v[1:]
    return out


@needs_reference
def test_every_job_beanstalkd_acknowledged_comes_back(tmp_path):
    d = tmp_path / "binlog"
    d.mkdir()
    ref, w = start("reference", "-b", str(d), "-s", "16384")
    acked, held = drive_reference(w)
    assert held
    ref.stop(signal.SIGKILL)
    theirs = {n: (d / n).read_bytes() for n in binlogs(d)}
    assert len(theirs) >= 3
    seen, copies = set(), 0  # compaction's copies: a full record of a job seen before
    for n in sorted(theirs, key=parse_file_name):
        for r in bs.parse_file(theirs[n]).records:
            copies += r.tube is not None and r.id in seen
            seen.add(r.id)
    assert copies
    ids = list(range(1, max(acked) + 1))

    # what beanstalkd itself restores from these files is the truth
    copy = tmp_path / "copy"
    shutil.copytree(d, copy)
    ref2, w2 = start("reference", "-b", str(copy), "-s", "16384")
    truth = view(w2, ids)
    truth_buried = first_buried(w2)
    truth_next = ok(w2, b"put 1 0 10 1\r\nn\r\n", b"INSERTED")
    ref2.stop(signal.SIGKILL)

    ours, w3 = start("ours", "-b", str(d))
    got = view(w3, ids)
    assert_same(got, beanstalkd_recounted(truth))
    assert first_buried(w3) == truth_buried
    assert ok(w3, b"put 1 0 10 1\r\nn\r\n", b"INSERTED") == truth_next
    ids = [*ids, int(truth_next.split()[1])]
    got = view(w3, ids)
    # ... and it is what was acknowledged
    live = {jid: v for jid, v in got.items() if v is not None and jid != ids[-1]}
    assert sorted(live) == sorted(acked)
    for jid, (fields, body, _) in live.items():
        tube, sent, pri, state = acked[jid]
        assert (fields[1], body, fields[2]) == (tube.decode(), sent, state)
        assert int(fields[3]) in (pri if isinstance(pri, tuple) else (pri,))
    log = stop_and_read_log(ours, signal.SIGKILL)
    files = "1 beanstalkd binlog file" if len(theirs) == 1 else f"{len(theirs)} beanstalkd binlog files"
    assert f"binlog: {len(acked)} jobs came from {files} (format version 7" in log
    # nothing deleted: their files moved aside, byte for byte
    (sub,) = subfolders(d)
    assert {n: (d / sub / n).read_bytes() for n in os.listdir(d / sub)} == theirs
    assert all(parse_file_name(n) > max(map(parse_file_name, theirs)) for n in binlogs(d))
    # and it goes on in our own format: a crash now loses nothing either
    again, w4 = start("ours", "-b", str(d))
    assert_same(view(w4, ids), got)
    assert subfolders(d) == [sub]


def reference_files(d, *bodies: bytes) -> bytes:
    """binlog.1 of a beanstalkd that put ``bodies`` in tube t and was killed."""
    ref, w = start("reference", "-b", str(d), "-s", "65536")
    ok(w, b"use t\r\n", b"USING")
    for body in bodies:
        ok(w, b"put 1 0 10 %d\r\n%s\r\n" % (len(body), body), b"INSERTED")
    ref.stop(signal.SIGKILL)
    return (d / "binlog.1").read_bytes()


@needs_reference
@pytest.mark.parametrize("how", ["truncated", "damaged"])
def test_a_truncated_or_damaged_beanstalkd_file(tmp_path, how):
    data = reference_files(tmp_path, b"one", b"two", b"three")
    recs = bs.parse_file(data).records
    assert [r.id for r in recs] == [1, 2, 3]
    if how == "truncated":
        cut = recs[2].offset + 50
        (tmp_path / "binlog.1").write_bytes(data[:cut])
        expect = (f"binlog.1 (beanstalkd's): dropped an incomplete record at the end "
                  f"(bytes {recs[2].offset}-{cut}: incomplete record)")
        live = [1, 2]
    else:
        damaged = bytearray(data)
        damaged[recs[1].offset + 4] = ord("*")  # job 2's tube name
        (tmp_path / "binlog.1").write_bytes(bytes(damaged))
        expect = (f"binlog.1 (beanstalkd's): bytes {recs[1].offset}-{len(data)} of "
                  f"{len(data)} are damaged (invalid tube name)")
        live = [1]
    ours, w = start("ours", "-b", str(tmp_path))
    assert [jid for jid in (1, 2, 3) if stats_job(w, jid)] == live
    assert [body_of(w, jid) for jid in live] == [b"one", b"two"][:len(live)]
    log = stop_and_read_log(ours)
    assert expect in log
    assert f"{len(live)} job{'' if len(live) == 1 else 's'} came from 1 beanstalkd binlog file " in log


@needs_reference
def test_unknown_version_is_refused_with_one_line(tmp_path):
    data = bytearray(reference_files(tmp_path, b"job"))
    data[0:4] = bytes(ctypes.c_int(8))
    (tmp_path / "binlog.1").write_bytes(bytes(data))
    line = (f"{tmp_path}/binlog.1 is a beanstalkd binlog file of format version 8, which "
            "cannot be read (versions 5 and 7 can): move it out of the directory")
    done = subprocess.run(ours_command(free_port(), "-b", str(tmp_path)), capture_output=True,
                          timeout=30)
    assert done.returncode != 0
    assert done.stderr.decode().splitlines() == [f"stalkd: {line}"]
    done = run_twistd("-b", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 10
    assert done.stderr.decode().splitlines() == [f"twistd: {line}"]
    assert (tmp_path / "binlog.1").read_bytes() == data  # left as it was


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_twistd(*args: str, cwd, port: int = 0) -> subprocess.CompletedProcess:
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    if not os.path.exists(twistd):
        pytest.skip("no twistd script")
    return subprocess.run([twistd, "-n", "--pidfile=", "beanstalk", "--port",
                           f"tcp:{port or free_port()}:interface=127.0.0.1", *args],
                          cwd=cwd, capture_output=True, timeout=30,
                          env=dict(os.environ, PYTHONPATH=ROOT))


@needs_reference
def test_twistd_imports_too(tmp_path):
    reference_files(tmp_path, b"a", b"bb")
    port = free_port()
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    proc = subprocess.Popen([twistd, "-n", "--pidfile=", "beanstalk", "--port",
                             f"tcp:{port}:interface=127.0.0.1", "-b", str(tmp_path)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        srv = RunningServer("ours", port, proc)
        deadline = time.monotonic() + 20
        while True:
            try:
                w = Wire(srv.connect())
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
        assert [body_of(w, 1), body_of(w, 2)] == [b"a", b"bb"]
        w.sock.close()
    finally:
        srv.stop()
    log = proc.stdout.read().decode()
    proc.stdout.close()
    assert "binlog: 2 jobs came from 1 beanstalkd binlog file (format version 7, 2 records)" \
           in log, log
    assert binlogs(tmp_path) == ["binlog.2"] and len(subfolders(tmp_path)) == 1


@needs_amd64
def test_an_import_larger_than_a_file_spans_several(tmp_path, clock):
    body = b"b" * 200 + b"\r\n"
    write_files(tmp_path, {7: head() + b"".join(rec(i, bs.READY, b"t", body)
                                                for i in range(1, 51))})
    srv = Server(tmp_path, clock, max_size=4096)
    assert sorted(srv.queue.jobs) == list(range(1, 51))
    assert len(binlogs(tmp_path)) >= 3 and min(map(parse_file_name, binlogs(tmp_path))) == 8
    before = snapshot(srv.queue)
    srv.close()
    again = Server(tmp_path, clock, max_size=4096)
    assert snapshot(again.queue) == before
    again.close()


@needs_amd64
def test_no_room_for_the_copies_stops_the_start_and_keeps_their_files(tmp_path, clock,
                                                                       monkeypatch):
    body = b"b" * 200 + b"\r\n"
    files = {1: head() + b"".join(rec(i, bs.READY, b"t", body) for i in range(1, 51))}
    write_files(tmp_path, files)
    made = []

    def fallocate(fd, offset, length, real=os.posix_fallocate):
        made.append(fd)
        if len(made) > 2:
            raise OSError(28, "No space left on device")
        return real(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", fallocate)
    journal = BinlogJournal(str(tmp_path), clock, max_size=4096).open()
    with pytest.raises(BinlogError) as e:
        journal.attach(MemoryEngine(clock, journal=journal))
    assert str(e.value).startswith(f"cannot import beanstalkd's binlog files in {tmp_path}: ")
    assert "No space left on device" in str(e.value)
    assert (tmp_path / "binlog.1").read_bytes() == files[1] and not subfolders(tmp_path)
    monkeypatch.undo()
    srv = Server(tmp_path, clock)  # room again: the next start imports them
    assert sorted(srv.queue.jobs) == list(range(1, 51))
    assert subfolders(tmp_path)
    srv.close()
