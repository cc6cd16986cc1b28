"""The binlog in-process: a MemoryEngine and a BinlogJournal on a real directory,
driven by ``twisted.internet.task.Clock`` (nothing sleeps).

A "restart" closes the journal (or just abandons it, like a crash) and opens
a fresh journal and queue on the same directory.
"""
from __future__ import annotations

import errno
import os
import random
from typing import Dict, List, Tuple

import pytest
from twisted.internet.task import Clock

from twisted_stalk.binlog import BinlogError, BinlogJournal
from twisted_stalk.binlog import format as fmt
from twisted_stalk.binlog.writer import ROOM_RETRY_SECONDS, RETRY_SECONDS
from servers import RecordingFrontEnd
from twisted_stalk.core import BURIED, DELAYED, READY, RESERVED, JournalError, MemoryEngine
from twisted_stalk.core.outcomes import INTERNAL_ERROR, NOT_FOUND, Outcome

T0 = 1_700_000_000.0




class Server:
    """A queue with its journal, on ``directory``, and a client session."""

    def __init__(self, directory, clock: Clock, **options) -> None:
        self.clock = clock
        self.journal = BinlogJournal(str(directory), clock, **options).open()
        self.queue = MemoryEngine(clock, journal=self.journal)
        self.journal.attach(self.queue)
        self.s = self.queue.open_session(RecordingFrontEnd())

    def put(self, body: bytes, pri: int = 10, delay: int = 0, ttr: int = 60,
            tube: bytes = b"default") -> int:
        self.queue.use(self.s, tube)
        job_id = self.queue.put(self.s, pri, delay, ttr, body + b"\r\n")
        if job_id is INTERNAL_ERROR:
            raise JournalError("put refused")
        return job_id

    def reserve(self, tube: bytes = b"default"):
        self.queue.watch(self.s, tube)
        job = self.queue.reserve_with_timeout(self.s, 0)
        assert not isinstance(job, Outcome), job
        return job

    def turn(self) -> None:
        """End of a reactor turn: the journal flushes."""
        self.clock.advance(0)

    def close(self) -> None:
        self.journal.close()


def ok(outcome) -> bool:
    """True for a command's success (anything but NOT_FOUND, INTERNAL_ERROR ...)."""
    return outcome.__class__ is not Outcome or outcome.name in (
        "DELETED", "RELEASED", "BURIED", "KICKED", "TOUCHED")


def snapshot(queue: MemoryEngine, skip_reserves=()) -> Dict[int, Tuple]:
    """Everything a restart must keep, per job (reserved counts as ready).

    A reservation is not journaled (the job is ready again after a restart),
    so the ``reserves`` counter of jobs in ``skip_reserves`` is not compared.
    """
    out = {}
    for job in queue.jobs.values():
        state = READY if job.state == RESERVED else job.state
        deadline = round(job.deadline_at, 6) if state == DELAYED else None
        counts = list(job.counts or (0, 0, 0, 0, 0))
        if job.id in skip_reserves:
            counts[0] = None
        out[job.id] = (job.tube.name, state, job.pri, job.delay, job.ttr, job.body,
                       deadline, tuple(counts), job.created_at)
    return out


def buried_order(queue: MemoryEngine) -> Dict[bytes, List[int]]:
    return {t.name: list(t.buried) for t in queue.tube_list if t.buried}


@pytest.fixture
def clock():
    c = Clock()
    c.advance(T0)
    return c


def restart(directory, clock, old: Server = None, crash: bool = False, **options) -> Server:
    if old is not None:
        if crash:
            old.journal.flush()  # what the kernel has; then "kill -9"
            os.close(old.journal.fd)
            old.journal.fd = -1
            old.journal._lock.release()
        else:
            old.close()
    return Server(directory, clock, **options)


def dir_bytes(directory) -> int:
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory))


def binlog_files(directory) -> List[str]:
    return sorted((n for n in os.listdir(directory) if fmt.parse_file_name(n)),
                  key=fmt.parse_file_name)


# ---------------------------------------------------------------- restarts

@pytest.mark.parametrize("crash", [False, True], ids=["close", "crash"])
def test_every_state_survives_a_restart(tmp_path, clock, crash):
    srv = Server(tmp_path, clock)
    a = srv.put(b"ready", pri=5)
    b = srv.put(b"delayed", pri=6, delay=100)
    c = srv.put(b"to-bury", pri=7, tube=b"other")
    d = srv.put(b"to-release-delay", pri=8)
    e = srv.put(b"to-delete", pri=9)
    f = srv.put(b"reserved", pri=11)
    g = srv.put(b"kicked", pri=12, tube=b"other")
    h = srv.put(b"released-new-pri", pri=13)
    srv.turn()
    clock.advance(3)
    q, s = srv.queue, srv.s
    # bury c with a new priority, bury g then kick it
    q.watch(s, b"other")
    assert ok(q.reserve_job(s, c)) and ok(q.bury(s, c, 70))
    assert ok(q.reserve_job(s, g)) and ok(q.bury(s, g, 71))
    q.use(s, b"other")
    assert q.kick(s, 1) == 1  # kicks c (buried first)
    assert ok(q.reserve_job(s, c)) and ok(q.bury(s, c, 72))
    assert ok(q.kick_job(s, g))
    assert ok(q.reserve_job(s, d)) and ok(q.release(s, d, 80, 50))
    assert ok(q.reserve_job(s, h)) and ok(q.release(s, h, 81, 0))
    assert ok(q.delete(s, e))
    assert ok(q.reserve_job(s, f))
    srv.turn()
    before = snapshot(q, skip_reserves={f})
    order = buried_order(q)
    next_id = q.next_id
    clock.advance(10)
    srv2 = restart(tmp_path, clock, srv, crash=crash)
    after = snapshot(srv2.queue, skip_reserves={f})
    assert after == before
    assert e not in srv2.queue.jobs
    assert buried_order(srv2.queue) == order
    assert srv2.queue.jobs[f].state == READY
    assert srv2.queue.jobs[b].state == DELAYED
    assert srv2.queue.jobs[b].deadline_at == pytest.approx(T0 + 100)
    assert srv2.queue.jobs[d].deadline_at == pytest.approx(T0 + 3 + 50)
    assert srv2.queue.jobs[c].state == BURIED and srv2.queue.jobs[c].pri == 72
    assert srv2.queue.next_id >= next_id
    assert srv2.put(b"new") >= next_id
    assert sorted(t.name for t in srv2.queue.tube_list) == [b"default", b"other"]
    _ = a


def test_delayed_job_keeps_its_remaining_delay_and_expired_delay_is_ready(tmp_path, clock):
    srv = Server(tmp_path, clock)
    j1 = srv.put(b"x", delay=30)
    j2 = srv.put(b"y", delay=5)
    srv.turn()
    clock.advance(10)
    srv2 = restart(tmp_path, clock, srv)
    assert srv2.queue.jobs[j1].state == DELAYED
    assert srv2.queue.jobs[j1].deadline_at - clock.seconds() == pytest.approx(20)
    assert srv2.queue.jobs[j2].state == READY


def test_ttr_timeout_and_counters_are_journaled(tmp_path, clock):
    srv = Server(tmp_path, clock)
    j = srv.put(b"x", ttr=5)
    srv.turn()
    srv.reserve()
    clock.advance(6)
    srv.queue.tick()
    assert srv.queue.jobs[j].counts == [1, 1, 0, 0, 0]
    srv2 = restart(tmp_path, clock, srv, crash=True)
    assert srv2.queue.jobs[j].counts == [1, 1, 0, 0, 0]
    assert srv2.queue.jobs[j].state == READY


def test_deleted_jobs_never_return_and_ids_are_not_reused(tmp_path, clock):
    srv = Server(tmp_path, clock, max_size=4096)
    ids = [srv.put(b"j%d" % i) for i in range(300)]
    srv.turn()
    for i in ids:
        assert ok(srv.queue.delete(srv.s, i))
    srv.turn()
    clock.advance(1)
    srv2 = restart(tmp_path, clock, srv)
    assert not srv2.queue.jobs
    assert srv2.put(b"next") > ids[-1]
    srv3 = restart(tmp_path, clock, srv2)
    assert list(srv3.queue.jobs) == [ids[-1] + 1]


def test_reserve_job_of_a_buried_job_comes_back_ready(tmp_path, clock):
    srv = Server(tmp_path, clock)
    j = srv.put(b"x")
    srv.reserve()
    srv.queue.bury(srv.s, j, 1)
    assert ok(srv.queue.reserve_job(srv.s, j))
    srv2 = restart(tmp_path, clock, srv, crash=True)
    assert srv2.queue.jobs[j].state == READY
    assert srv2.queue.jobs[j].counts == [2, 0, 0, 1, 0]


# ------------------------------------------------------- replies and fsync

def test_pending_until_the_turn_ends_then_one_write(tmp_path, clock, monkeypatch):
    srv = Server(tmp_path, clock)
    writes = []
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, off: writes.append(len(data)) or real(fd, data, off))
    settled = []
    for i in range(50):
        srv.put(b"x%d" % i)
    assert srv.journal.pending
    srv.journal.when_settled(lambda: settled.append(1))
    assert not settled and not writes
    srv.turn()
    assert settled == [1] and len(writes) == 1
    assert not srv.journal.pending


@pytest.mark.parametrize("fsync_ms,no_fsync,expected", [(0, False, 5), (50, False, 1), (50, True, 0)])
def test_fsync_policy(tmp_path, clock, monkeypatch, fsync_ms, no_fsync, expected):
    srv = Server(tmp_path, clock, fsync_ms=fsync_ms, no_fsync=no_fsync)
    syncs = []
    monkeypatch.setattr(os, "fdatasync", lambda fd: syncs.append(fd))
    for turn in range(5):
        srv.put(b"x")
        synced_before_settle = []
        srv.journal.when_settled(lambda: synced_before_settle.append(len(syncs)))
        clock.advance(0.001)
        if fsync_ms == 0:
            assert synced_before_settle == [turn + 1]  # fsync, then the reply
    clock.advance(0.05)
    assert len(syncs) == expected


def test_fsync_ms_bounds_the_window(tmp_path, clock, monkeypatch):
    srv = Server(tmp_path, clock, fsync_ms=50)
    syncs = []
    monkeypatch.setattr(os, "fdatasync", lambda fd: syncs.append(clock.seconds()))
    for _ in range(100):
        srv.put(b"x")
        clock.advance(0.01)
    clock.advance(0.1)
    gaps = [b - a for a, b in zip(syncs, syncs[1:])]
    assert len(syncs) >= 15
    assert min(gaps) >= 0.05 - 1e-6
    assert max(gaps) <= 0.06 + 1e-6


# ------------------------------------------------------------ rotation, stats

def test_rotation_and_stats(tmp_path, clock):
    srv = Server(tmp_path, clock, max_size=4096)
    assert srv.journal.stats()["current"] == 1
    for i in range(100):
        srv.put(b"y" * 100)
    srv.turn()
    st = srv.journal.stats()
    assert st["current"] > 2 and st["oldest"] == 1
    assert st["written"] == 100 and st["max_size"] == 4096
    assert len(binlog_files(tmp_path)) == st["current"]
    first = srv.queue.jobs[1]
    assert first.binlog_file == 1
    assert ("file", 1) in srv.queue.stats_job(srv.s, 1)
    # closed files are cut to their used size; each stays within -s
    for name in binlog_files(tmp_path)[:-1]:
        assert os.path.getsize(tmp_path / name) <= 4096


def test_job_bigger_than_a_file(tmp_path, clock):
    srv = Server(tmp_path, clock, max_size=4096)
    j = srv.put(b"z" * 20000)
    srv.turn()
    srv2 = restart(tmp_path, clock, srv)
    assert srv2.queue.jobs[j].body == b"z" * 20000 + b"\r\n"


# ------------------------------------------------------------- compaction

def test_churn_keeps_the_directory_bounded(tmp_path, clock):
    """Endless reserve / release-with-delay on a small live set."""
    size = 8192
    srv = Server(tmp_path, clock, max_size=size)
    live = [srv.put(b"L" * 50, pri=i) for i in range(20)]
    srv.turn()
    peak = 0
    q, s = srv.queue, srv.s
    for rnd in range(3000):
        clock.advance(1)
        q.tick()
        for _ in range(5):
            job = q.reserve_with_timeout(s, 0)
            if isinstance(job, Outcome):
                break
            q.release(s, job.id, job.pri, random.choice((0, 0, 1)))
        clock.advance(0)
        peak = max(peak, dir_bytes(tmp_path))
    live_bytes = srv.journal.live_bytes
    assert srv.journal.written > 10000
    assert srv.journal.stats()["migrated"] > 0
    assert peak <= 2 * live_bytes + 5 * size, (peak, live_bytes)
    assert len(binlog_files(tmp_path)) <= 6
    before = snapshot(q)
    srv2 = restart(tmp_path, clock, srv, crash=True)
    assert snapshot(srv2.queue) == before
    assert set(srv2.queue.jobs) == set(live)


def test_compaction_keeps_burial_order_and_large_live_sets(tmp_path, clock):
    srv = Server(tmp_path, clock, max_size=4096)
    q, s = srv.queue, srv.s
    ids = [srv.put(b"B%d" % i, pri=1) for i in range(40)]
    # bury in a shuffled order
    order = ids[:]
    random.Random(3).shuffle(order)
    for j in order:
        assert ok(q.reserve_job(s, j))
        assert ok(q.bury(s, j, 2))
    long_lived = [srv.put(b"K" * 200) for _ in range(30)]
    srv.turn()
    # churn on one more job to force several compactions
    c = srv.put(b"churn")
    for _ in range(4000):
        assert ok(q.reserve_job(s, c))
        q.release(s, c, 3, 0)
        clock.advance(0)
    assert srv.journal.stats()["migrated"] >= 70
    assert srv.journal.stats()["oldest"] > 1
    assert list(q.default_tube.buried) == order
    srv2 = restart(tmp_path, clock, srv)
    assert list(srv2.queue.default_tube.buried) == order
    assert all(j in srv2.queue.jobs for j in long_lived)
    assert snapshot(srv2.queue) == snapshot(q)


def test_updates_during_compaction_are_full_copies(tmp_path, clock):
    srv = Server(tmp_path, clock, max_size=4096)
    q, s = srv.queue, srv.s
    ids = [srv.put(b"x" * 100) for _ in range(60)]
    srv.turn()
    j = srv.journal
    # start compaction by hand, then change an old job before it is copied
    j.compactor.start()
    boundary = j.compactor.boundary
    victim = ids[0]
    assert q.jobs[victim].binlog_file < boundary
    assert ok(q.reserve_job(s, victim))
    assert ok(q.bury(s, victim, 9))
    assert q.jobs[victim].binlog_file == j.seq
    assert ok(q.kick_job(s, victim))
    j.compactor.schedule()
    clock.advance(0)
    clock.advance(0)
    assert j.compactor.boundary is None
    assert binlog_files(tmp_path)[0] == fmt.file_name(boundary)
    srv2 = restart(tmp_path, clock, srv)
    assert snapshot(srv2.queue) == snapshot(q)


def test_many_restarts_do_not_pile_up_files(tmp_path, clock):
    srv = Server(tmp_path, clock)
    for i in range(30):
        srv.put(b"x")
        j = srv.put(b"y")
        srv.queue.delete(srv.s, j)
        clock.advance(0)
        srv = restart(tmp_path, clock, srv)
        clock.advance(0)
    assert len(binlog_files(tmp_path)) <= 10
    assert len(srv.queue.jobs) == 30


# ------------------------------------------------------------- corruption

def _written(tmp_path, clock, n=10, **options):
    srv = Server(tmp_path, clock, **options)
    ids = [srv.put(b"job-%d" % i) for i in range(n)]
    srv.close()
    return ids


def _last_file(tmp_path):
    return tmp_path / binlog_files(tmp_path)[-1]


def test_torn_tail_is_dropped_with_one_warning(tmp_path, clock):
    ids = _written(tmp_path, clock)
    path = _last_file(tmp_path)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 7)  # the last record is cut short
    srv = Server(tmp_path, clock)
    notes = srv.journal.recovery.notes
    assert len(notes) == 1 and notes[0][0] == "warn" and "incomplete record" in notes[0][1]
    assert sorted(srv.queue.jobs) == ids[:-1]
    # the torn bytes were cut off: the next start says nothing
    srv2 = restart(tmp_path, clock, srv)
    assert srv2.journal.recovery.notes == []
    assert sorted(srv2.queue.jobs) == ids[:-1]


def test_torn_tail_in_preallocated_space(tmp_path, clock):
    srv = Server(tmp_path, clock)
    ids = [srv.put(b"job-%d" % i) for i in range(5)]
    srv.turn()
    path = tmp_path / fmt.file_name(srv.journal.seq)
    pos = srv.journal.pos
    # half of a record written after the last good one, zeros after it
    half = fmt.put_record(99, 1, 0, 1, READY, 0.0, T0, None, b"default", b"partial\r\n")[:30]
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(half)
    os.close(srv.journal.fd)
    srv.journal.fd = -1
    srv.journal._lock.release()
    assert os.path.getsize(path) > pos + 1000  # preallocated
    srv2 = Server(tmp_path, clock)
    assert [n[0] for n in srv2.journal.recovery.notes] == ["warn"]
    assert sorted(srv2.queue.jobs) == ids
    assert srv2.queue.next_id > ids[-1]


def test_flipped_byte_in_the_middle_is_reported_and_skipped(tmp_path, clock):
    srv = Server(tmp_path, clock)
    ids = [srv.put(b"job-%d" % i) for i in range(10)]
    srv.turn()
    srv.queue.delete(srv.s, ids[8])
    srv.close()
    path = _last_file(tmp_path)
    data = bytearray(path.read_bytes())
    rec = len(fmt.put_record(1, 10, 0, 60, READY, 0.0, T0, None, b"default", b"job-0\r\n"))
    offset = fmt.HEADER_SIZE + 3 * rec + 40  # inside the 4th put
    data[offset] ^= 0x55
    path.write_bytes(bytes(data))
    srv2 = Server(tmp_path, clock)
    notes = srv2.journal.recovery.notes
    assert [n[0] for n in notes] == ["error", "error"]
    assert "damaged" in notes[0][1] and f"bytes {fmt.HEADER_SIZE + 3 * rec}-" in notes[0][1]
    # the damaged job is gone, the delete after the damage still applies,
    # and nothing was made up
    assert sorted(srv2.queue.jobs) == [i for i in ids if i not in (ids[3], ids[8])]
    for job in srv2.queue.jobs.values():
        assert job.body == b"job-%d\r\n" % ids.index(job.id)
    assert srv2.queue.next_id > ids[-1]
    # the damaged file is compacted away (kept aside as .damaged)
    clock.advance(0)
    clock.advance(0)
    assert any(n.endswith(".damaged") for n in os.listdir(tmp_path))
    srv3 = restart(tmp_path, clock, srv2)
    assert srv3.journal.recovery.notes == []
    assert sorted(srv3.queue.jobs) == sorted(srv2.queue.jobs)


def test_random_byte_flips_never_invent_jobs_or_crash(tmp_path, clock):
    rng = random.Random(7)
    srv = Server(tmp_path, clock, max_size=4096)
    bodies = {}
    for i in range(60):
        j = srv.put(b"body-%d" % i, pri=i)
        bodies[j] = b"body-%d\r\n" % i
    srv.close()
    files = binlog_files(tmp_path)
    pristine = {n: (tmp_path / n).read_bytes() for n in files}
    for trial in range(40):
        for n, data in pristine.items():
            (tmp_path / n).write_bytes(data)
        for n in list(os.listdir(tmp_path)):
            if not fmt.parse_file_name(n) and n != "lock":
                os.unlink(tmp_path / n)
        name = rng.choice(files)
        data = bytearray(pristine[name])
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        (tmp_path / name).write_bytes(bytes(data))
        s2 = Server(tmp_path, clock, max_size=4096)
        for job in s2.queue.jobs.values():
            assert bodies[job.id] == job.body
            assert job.pri == job.id - 1
        s2.journal.close()
        for n in os.listdir(tmp_path):
            if fmt.parse_file_name(n) and n not in pristine:
                os.unlink(tmp_path / n)


def test_zero_length_file_is_removed_with_a_warning(tmp_path, clock):
    ids = _written(tmp_path, clock, n=3)
    nxt = fmt.parse_file_name(binlog_files(tmp_path)[-1]) + 1
    (tmp_path / fmt.file_name(nxt)).write_bytes(b"")
    srv = Server(tmp_path, clock)
    assert [n[0] for n in srv.journal.recovery.notes] == ["warn"]
    assert "empty" in srv.journal.recovery.notes[0][1]
    assert sorted(srv.queue.jobs) == ids
    assert fmt.file_name(nxt) not in os.listdir(tmp_path) or srv.journal.seq == nxt


def test_empty_directory_and_only_empty_files(tmp_path, clock):
    (tmp_path / "binlog.1").write_bytes(b"")
    (tmp_path / "binlog.2").write_bytes(bytes(4096))
    srv = Server(tmp_path, clock)
    assert not srv.queue.jobs
    assert srv.journal.seq == 3
    assert binlog_files(tmp_path) == ["binlog.3"]


def test_foreign_files_stop_the_start(tmp_path, clock):
    (tmp_path / "binlog.1").write_bytes(b"\x09\x00\x00\x00" + bytes(100))  # version 9
    with pytest.raises(BinlogError, match="beanstalkd binlog file of format version 9"):
        BinlogJournal(str(tmp_path), clock).open()
    (tmp_path / "binlog.1").write_bytes(b"hello, this is not a binlog at all" * 3)
    with pytest.raises(BinlogError, match="not a twisted-stalk binlog"):
        BinlogJournal(str(tmp_path), clock).open()


def test_damaged_header_still_reads_records(tmp_path, clock):
    ids = _written(tmp_path, clock, n=4)
    path = _last_file(tmp_path)
    data = bytearray(path.read_bytes())
    data[20] ^= 0xFF  # next_id field: header crc fails
    path.write_bytes(bytes(data))
    srv = Server(tmp_path, clock)
    assert "header is damaged" in srv.journal.recovery.notes[0][1]
    assert sorted(srv.queue.jobs) == ids


# ------------------------------------------------------- directory and lock

def test_second_journal_on_the_same_directory_is_refused(tmp_path, clock):
    srv = Server(tmp_path, clock)
    with pytest.raises(BinlogError, match=f"in use by another server \\(pid {os.getpid()}\\)"):
        BinlogJournal(str(tmp_path), clock).open()
    srv.close()
    Server(tmp_path, clock).close()  # free again after close


def test_missing_or_not_a_directory(tmp_path, clock):
    with pytest.raises(BinlogError, match="does not exist"):
        BinlogJournal(str(tmp_path / "nope"), clock).open()
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(BinlogError, match="not a directory"):
        BinlogJournal(str(tmp_path / "file"), clock).open()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_directory(tmp_path, clock):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        with pytest.raises(BinlogError):
            BinlogJournal(str(d), clock).open()
    finally:
        d.chmod(0o700)


# ------------------------------------------------------ disk full, errors

def test_no_room_for_a_new_file_refuses_then_recovers(tmp_path, clock, monkeypatch):
    srv = Server(tmp_path, clock, max_size=4096)
    q, s = srv.queue, srv.s
    keep = srv.put(b"keep")
    real = os.posix_fallocate

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    refused = 0
    for i in range(200):
        try:
            srv.put(b"p" * 64)
        except JournalError:
            refused += 1
            break
    assert refused
    n_jobs = len(q.jobs)
    # the refused put left nothing behind; reads, and releases/deletes in
    # the room kept for them, still work
    assert q.peek(s, keep) is not NOT_FOUND
    job = srv.reserve()
    assert ok(q.release(s, job.id, 1, 0))
    assert ok(q.delete(s, keep))
    with pytest.raises(JournalError):
        srv.put(b"again")
    clock.advance(ROOM_RETRY_SECONDS)
    with pytest.raises(JournalError):
        srv.put(b"still full")
    monkeypatch.setattr(os, "posix_fallocate", real)
    clock.advance(ROOM_RETRY_SECONDS)
    j = srv.put(b"room again")
    srv.turn()
    assert len(q.jobs) == n_jobs
    srv2 = restart(tmp_path, clock, srv, crash=True)
    assert j in srv2.queue.jobs and keep not in srv2.queue.jobs
    assert snapshot(srv2.queue) == snapshot(q)


def test_write_error_holds_replies_refuses_changes_and_recovers(tmp_path, clock, monkeypatch):
    srv = Server(tmp_path, clock, fsync_ms=0)
    q = srv.queue
    a = srv.put(b"a")
    srv.turn()
    real = os.pwrite

    def broken(fd, data, offset):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "pwrite", broken)
    b = srv.put(b"b")
    settled = []
    srv.journal.when_settled(lambda: settled.append(b))
    srv.turn()
    assert not settled  # INSERTED b is not sent
    assert srv.journal.broken
    assert not srv.journal.pending  # other replies flow (reads)
    with pytest.raises(JournalError):
        srv.put(b"c")
    assert q.delete(srv.s, a) is INTERNAL_ERROR
    assert q.peek(srv.s, a) is not NOT_FOUND
    clock.advance(RETRY_SECONDS)
    assert not settled
    monkeypatch.setattr(os, "pwrite", real)
    clock.advance(RETRY_SECONDS)
    assert settled == [b] and srv.journal.broken is None
    c = srv.put(b"c")
    srv2 = restart(tmp_path, clock, srv, crash=True)
    assert sorted(srv2.queue.jobs) == [a, b, c]


def test_close_flushes_and_settles(tmp_path, clock):
    srv = Server(tmp_path, clock)
    j = srv.put(b"x")
    settled = []
    srv.journal.when_settled(lambda: settled.append(1))
    srv.close()
    assert settled == [1]
    with pytest.raises(JournalError):
        srv.put(b"after close")
    srv2 = Server(tmp_path, clock)
    assert list(srv2.queue.jobs) == [j]


def test_fsync_ms_in_a_thread(tmp_path, clock, monkeypatch):
    import threading
    import time
    synced = threading.Event()
    real = os.fdatasync

    def fdatasync(fd):
        real(fd)
        synced.set()

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    srv = Server(tmp_path, clock, fsync_ms=50, sync_thread=True)
    syncer = srv.journal._syncer
    assert syncer is not None and syncer.is_alive()
    srv.put(b"x")
    clock.advance(0)
    clock.advance(0.05)
    assert synced.wait(5)
    for _ in range(100):
        if syncer.syncs:
            break
        time.sleep(0.01)
    assert syncer.syncs == 1
    srv.close()
    assert not syncer.is_alive()


# ------------------------------------------------ a full disk, and after it

class SmallDisk:
    """``os.posix_fallocate`` on a disk of ``capacity`` bytes: whatever the
    directory's files hold counts as used, so removing files frees room."""

    def __init__(self, directory, capacity: int, real=os.posix_fallocate) -> None:
        self.directory = directory
        self.capacity = capacity
        self.real = real
        self.refused = 0

    def __call__(self, fd, offset, length):
        used = dir_bytes(self.directory) - os.fstat(fd).st_size
        if used + offset + length > self.capacity:
            self.refused += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.real(fd, offset, length)


def fill(srv: Server, body: bytes) -> List[int]:
    """Put jobs until the binlog refuses one; the ids put."""
    ids = []
    while True:
        try:
            ids.append(srv.put(body))
        except JournalError:
            return ids
        if len(ids) % 50 == 0:
            srv.turn()


BIG = b"f" * 2000
FILE = 65536


def on_small_disk(tmp_path, clock, monkeypatch) -> Tuple[Server, SmallDisk]:
    """A server with 64 KiB files on a modelled disk that holds six of them."""
    disk = SmallDisk(tmp_path, 6 * FILE)
    monkeypatch.setattr(os, "posix_fallocate", disk)
    return Server(tmp_path, clock, max_size=FILE), disk


def filled_disk(tmp_path, clock, monkeypatch) -> Tuple[Server, SmallDisk, List[int]]:
    """:func:`on_small_disk`, filled with 2,000-byte jobs until a put is refused."""
    srv, disk = on_small_disk(tmp_path, clock, monkeypatch)
    ids = fill(srv, BIG)
    srv.turn()
    return srv, disk, ids


def test_full_disk_puts_work_again_once_jobs_are_deleted(tmp_path, clock, monkeypatch):
    srv, disk, ids = filled_disk(tmp_path, clock, monkeypatch)
    assert disk.refused and len(ids) > 100
    files_when_full = binlog_files(tmp_path)
    assert len(files_when_full) == 6
    for j in ids:  # the deletes fit in the room kept for them
        assert ok(srv.queue.delete(srv.s, j))
    # Jobs were deleted since the last try: the next put tries again at once,
    # removes the files no live job needs, and gets its new file.
    again = srv.put(BIG)
    srv.turn()
    assert binlog_files(tmp_path) == files_when_full[-1:] + [fmt.file_name(srv.journal.seq)]
    assert srv.journal.stats()["oldest"] == srv.journal.seq - 1
    srv2 = restart(tmp_path, clock, srv, crash=True, max_size=FILE)
    assert list(srv2.queue.jobs) == [again]
    more = fill(srv2, BIG)
    assert len(more) >= len(ids) - 1  # the whole disk is usable again


def test_full_disk_of_dead_records_does_not_stop_a_restart(tmp_path, clock, monkeypatch):
    srv, _, ids = filled_disk(tmp_path, clock, monkeypatch)
    for j in ids:
        assert ok(srv.queue.delete(srv.s, j))
    assert len(binlog_files(tmp_path)) == 6
    # crash with the disk full of records of deleted jobs: the restart removes
    # them before it makes its file
    srv2 = restart(tmp_path, clock, srv, crash=True, max_size=FILE)
    assert not srv2.queue.jobs
    assert binlog_files(tmp_path) == [fmt.file_name(srv2.journal.seq)]
    # ids go on above the highest ever used, across another restart too
    j = srv2.put(b"after")
    assert j > ids[-1]
    srv3 = restart(tmp_path, clock, srv2, max_size=FILE)
    assert list(srv3.queue.jobs) == [j] and srv3.put(b"next") > j


def test_full_disk_with_live_jobs_in_old_files_compacts_into_the_current_file(
        tmp_path, clock, monkeypatch):
    srv, _, ids = filled_disk(tmp_path, clock, monkeypatch)
    keep = ids[0]  # lives in the oldest file: no file is dead
    for j in ids[1:]:
        assert ok(srv.queue.delete(srv.s, j))
    srv.turn()
    with pytest.raises(JournalError):
        srv.put(BIG)
    # No new file: compaction copies the live job into what is left of the
    # current file and removes the old files.
    clock.advance(0)
    clock.advance(0)
    assert srv.journal.compactor.boundary is None
    assert srv.queue.jobs[keep].binlog_file == srv.journal.seq
    assert binlog_files(tmp_path) == [fmt.file_name(srv.journal.seq)]
    after = srv.put(BIG)
    srv.turn()
    srv2 = restart(tmp_path, clock, srv, crash=True, max_size=FILE)
    assert sorted(srv2.queue.jobs) == [keep, after]
    assert srv2.queue.jobs[keep].body == BIG + b"\r\n"


def test_full_disk_compaction_that_would_not_fit_waits(tmp_path, clock, monkeypatch):
    """With no room for a file, compaction must not eat the room kept for deletes."""
    srv, _, ids = filled_disk(tmp_path, clock, monkeypatch)
    old = [j for j in ids if srv.queue.jobs[j].binlog_file < srv.journal.seq]
    keep = old[::10]  # live jobs in every old file: more than the current file has left
    for j in ids:
        if j not in keep:
            assert ok(srv.queue.delete(srv.s, j))
    srv.turn()
    with pytest.raises(JournalError):
        srv.put(BIG)
    clock.advance(0)
    assert srv.journal.compactor.boundary is None and srv.journal.migrated == 0
    for j in keep:  # deletes still have their room
        assert ok(srv.queue.delete(srv.s, j))
    srv.turn()
    assert srv.put(BIG)


# -------------------------------- posix_fallocate: raising or returning errors

def test_preallocating_more_than_the_disk_holds_raises(tmp_path):
    """Whichever convention this interpreter's posix_fallocate follows (CPython
    raises, PyPy returns the error number), no room is an OSError."""
    from twisted_stalk.binlog.files import preallocate
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError) as info:
            preallocate(fd, 1 << 62)
        assert info.value.errno in (errno.EFBIG, errno.ENOSPC)
        preallocate(fd, 8192)
        assert os.fstat(fd).st_size == 8192
    finally:
        os.close(fd)


@pytest.mark.parametrize("convention", ["returns", "raises"])
def test_no_room_from_posix_fallocate_either_way_refuses_puts(tmp_path, clock, monkeypatch,
                                                             convention):
    srv = Server(tmp_path, clock, max_size=4096)
    keep = srv.put(b"keep")
    srv.turn()

    def full(fd, offset, length):
        if convention == "raises":
            raise OSError(errno.ENOSPC, "No space left on device")
        return errno.ENOSPC  # PyPy

    monkeypatch.setattr(os, "posix_fallocate", full)
    acked = [keep]
    with pytest.raises(JournalError):
        for _ in range(200):
            acked.append(srv.put(b"p" * 64))
    assert "No space left on device" in srv.journal.room_error
    srv.turn()
    assert len(binlog_files(tmp_path)) == 1  # no file was made without its room
    assert os.path.getsize(_last_file(tmp_path)) == 4096  # nothing written past -s
    monkeypatch.undo()
    srv2 = restart(tmp_path, clock, srv, max_size=4096)
    assert sorted(srv2.queue.jobs) == acked


def test_posix_fallocate_interrupted_is_tried_again(tmp_path, clock, monkeypatch):
    real = os.posix_fallocate
    calls = []

    def interrupted_once(fd, offset, length):
        calls.append(length)
        if len(calls) == 1:
            return errno.EINTR  # PyPy's convention; CPython retries by itself
        return real(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", interrupted_once)
    srv = Server(tmp_path, clock, max_size=4096)
    assert calls == [4096, 4096]
    assert os.path.getsize(_last_file(tmp_path)) == 4096
    srv.close()


def test_a_file_that_cannot_be_removed_keeps_the_newer_ones(tmp_path, clock, monkeypatch):
    """Files go oldest-first only: if one cannot be removed (a sticky
    directory, a read-only file system...), the newer ones, which hold the
    deletes of its jobs, must stay, or those jobs come back after a restart."""
    srv = Server(tmp_path, clock, max_size=4096)
    q, s = srv.queue, srv.s
    gone = [srv.put(b"g" * 100) for _ in range(60)]  # files 1, 2, ...
    keep = srv.put(b"keep")
    srv.turn()
    stuck = os.path.join(str(tmp_path), fmt.file_name(1))
    real_unlink = os.unlink

    def unlink(path, *args, **kwargs):
        if os.fspath(path) == stuck:
            raise OSError(errno.EACCES, "Permission denied")
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    for j in gone:
        assert ok(q.delete(s, j))
    c = srv.put(b"churn")
    for _ in range(2000):  # compactions, which try to remove binlog.1
        assert ok(q.reserve_job(s, c))
        q.release(s, c, 3, 0)
        clock.advance(0)
    assert srv.journal.stats()["migrated"] > 0
    files = binlog_files(tmp_path)
    assert files[0] == fmt.file_name(1)
    assert srv.journal.stats()["oldest"] == 1
    # every file after the stuck one is still there (the deletes are in them)
    seqs = [fmt.parse_file_name(n) for n in files]
    assert seqs == list(range(1, srv.journal.seq + 1))
    srv2 = restart(tmp_path, clock, srv)
    assert sorted(srv2.queue.jobs) == [keep, c]


def test_full_disk_during_compaction_leaves_room_for_deletes(tmp_path, clock, monkeypatch):
    """A compaction that runs out of room stops short of the room kept for
    deletes, so the jobs can still be deleted and the disk freed."""
    srv, _ = on_small_disk(tmp_path, clock, monkeypatch)
    j = srv.journal
    ids = []
    while j.seq < 6 or j.free_bytes > FILE * 3 // 4:
        ids.append(srv.put(b"s" * 100))
        if len(ids) % 50 == 0:
            srv.turn()
    live = [i for i in ids if srv.queue.jobs[i].binlog_file == 1]
    for i in ids:
        if srv.queue.jobs[i].binlog_file in (2, 3, 4, 5):
            assert ok(srv.queue.delete(srv.s, i))
    srv.turn()
    j.compactor.schedule()
    clock.advance(0)  # copies binlog.1's jobs until binlog.6 is full: no new file
    assert j.compactor.boundary is not None and j.room_error and j.migrated
    for i in live + [i for i in ids if i in srv.queue.jobs and i not in live]:
        assert ok(srv.queue.delete(srv.s, i))
    srv.turn()
    assert srv.put(b"room again")
