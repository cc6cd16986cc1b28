"""The binlog end to end: real ``stalkd -b`` processes over loopback, restarted
with SIGTERM or killed with SIGKILL, on the same directory.
"""
from __future__ import annotations

import grp
import os
import pwd
import random
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Set

import pytest

from servers import RunningServer, free_port, ours_command
from servers import start_server as _start_server
from wire import Wire

from twisted_stalk.binlog.format import parse_file_name


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


#: Connections and servers a test made; closed (killed) when it ends.
_connections: List[Wire] = []
_servers: List[RunningServer] = []


@pytest.fixture(autouse=True)
def _close_connections_and_servers():
    yield
    while _connections:
        _connections.pop().close()
    while _servers:
        srv = _servers.pop()
        srv.stop(signal.SIGKILL)
        if srv.proc.stderr is not None:
            srv.proc.stderr.close()


def start_server(*args, **kwargs) -> RunningServer:
    srv = _start_server(*args, **kwargs)
    _servers.append(srv)
    return srv


def connect(server) -> Wire:
    w = Wire(server.connect())
    _connections.append(w)
    return w


def stats_job(w: Wire, job_id: int) -> Dict[str, str]:
    reply = w.ask(b"stats-job %d\r\n" % job_id)
    if reply.startswith(b"NOT_FOUND"):
        return {}
    return dict(re.findall(r"^([a-z-]+): \"?([^\"\n]*)\"?$", reply.decode(), re.M))


def stats(w: Wire) -> Dict[str, str]:
    return dict(re.findall(r"^([a-z-]+): \"?([^\"\n]*)\"?$", w.ask(b"stats\r\n").decode(), re.M))


def put(w: Wire, body: bytes, pri=10, delay=0, ttr=60) -> int:
    reply = w.ask(b"put %d %d %d %d\r\n%s\r\n" % (pri, delay, ttr, len(body), body))
    assert reply.startswith(b"INSERTED "), reply
    return int(reply.split()[1])


def dir_bytes(path) -> int:
    """Bytes of the files in ``path`` (a running server may remove one meanwhile)."""
    total = 0
    for name in os.listdir(path):
        try:
            total += os.path.getsize(os.path.join(path, name))
        except FileNotFoundError:
            pass
    return total


STABLE = ("id", "tube", "state", "pri", "delay", "ttr", "file", "timeouts",
          "releases", "buries", "kicks")


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_restart_keeps_every_state(tmp_path, how):
    d = str(tmp_path)
    srv = start_server("ours", "-b", d)
    w = connect(srv)
    ready = put(w, b"ready", pri=5)
    delayed = put(w, b"delayed", pri=6, delay=120)
    w.ask(b"use other\r\n")
    buried = [put(w, b"buried-%d" % i, pri=7) for i in range(3)]
    kicked = put(w, b"kicked", pri=8)
    released = put(w, b"released", pri=9)
    deleted = put(w, b"deleted")
    reserved = put(w, b"reserved", pri=11)
    w.ask(b"watch other\r\n")
    for j in (buried[2], buried[0], buried[1], kicked):
        assert w.ask(b"reserve-job %d\r\n" % j).startswith(b"RESERVED")
        assert w.ask(b"bury %d 70\r\n" % j) == b"BURIED\r\n"
    assert w.ask(b"kick-job %d\r\n" % kicked) == b"KICKED\r\n"
    assert w.ask(b"reserve-job %d\r\n" % released).startswith(b"RESERVED")
    assert w.ask(b"release %d 3 90\r\n" % released) == b"RELEASED\r\n"
    assert w.ask(b"delete %d\r\n" % deleted) == b"DELETED\r\n"
    assert w.ask(b"reserve-job %d\r\n" % reserved).startswith(b"RESERVED")
    ids = [ready, delayed, *buried, kicked, released, reserved]
    before = {j: stats_job(w, j) for j in ids}
    w.close()  # else a graceful shutdown waits for the worker holding a job
    srv.stop(getattr(signal, how))
    assert srv.proc.returncode == (0 if how == "SIGTERM" else -signal.SIGKILL)

    srv2 = start_server("ours", "-b", d)
    try:
        w2 = connect(srv2)
        for j in ids:
            after = stats_job(w2, j)
            expected = dict(before[j])
            if j == reserved:
                expected["state"] = "ready"
            for key in STABLE:
                assert after[key] == expected[key], (j, key)
            assert int(after["age"]) >= int(before[j]["age"])
        assert stats_job(w2, deleted) == {}
        assert int(stats_job(w2, delayed)["time-left"]) in range(100, 121)
        assert int(stats_job(w2, released)["time-left"]) in range(70, 91)
        assert w2.ask(b"peek %d\r\n" % ready) == b"FOUND %d 5\r\nready\r\n" % ready
        w2.ask(b"use other\r\n")
        # burial order survives: kick them one by one
        assert w2.ask(b"peek-buried\r\n").startswith(b"FOUND %d " % buried[2])
        assert w2.ask(b"kick 1\r\n") == b"KICKED 1\r\n"
        assert w2.ask(b"peek-buried\r\n").startswith(b"FOUND %d " % buried[0])
        assert put(w2, b"next") > deleted
        st = stats(w2)
        assert st["current-jobs-buried"] == "2" and st["current-jobs-delayed"] == "2"
        assert st["binlog-current-index"] == "2" and st["binlog-oldest-index"] == "1"
    finally:
        assert srv2.stop() == 0


@pytest.mark.parametrize("flags", [["-F"], ["-f", "100000"], ["-f", "0"]])
def test_sigterm_flushes_and_exits_zero(tmp_path, flags):
    d = str(tmp_path)
    srv = start_server("ours", "-b", d, *flags)
    w = connect(srv)
    w.send(b"".join(b"put 1 0 10 3\r\nabc\r\n" for _ in range(200)))
    assert w.replies(200)[-1] == b"INSERTED 200\r\n"
    assert srv.stop(signal.SIGTERM) == 0
    srv2 = start_server("ours", "-b", d, *flags)
    try:
        assert stats(connect(srv2))["current-jobs-ready"] == "200"
    finally:
        srv2.stop()


def _run_fails(*flags, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(ours_command(free_port(), *flags), capture_output=True, timeout=30,
                          env=env)


def test_second_server_on_the_same_directory_exits_with_one_line(tmp_path):
    srv = start_server("ours", "-b", str(tmp_path))
    try:
        done = _run_fails("-b", str(tmp_path))
        assert done.returncode != 0
        lines = done.stderr.decode().strip().splitlines()
        assert len(lines) == 1, lines
        assert "in use by another server" in lines[0] and str(srv.proc.pid) in lines[0]
        # the first one is unharmed
        assert put(connect(srv), b"still here") == 1
    finally:
        srv.stop()


def test_reference_and_ours_exclude_each_other(tmp_path):
    from servers import REFERENCE
    if not REFERENCE:
        pytest.skip("beanstalkd is not installed")
    ref = subprocess.Popen([REFERENCE, "-l", "127.0.0.1", "-p", str(free_port()), "-b",
                            str(tmp_path)], stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        done = _run_fails("-b", str(tmp_path))
        assert done.returncode != 0 and b"in use by another server" in done.stderr
    finally:
        ref.kill()
        ref.wait()


@pytest.mark.parametrize("what", ["missing", "file"])
def test_unusable_directory_exits_with_one_line(tmp_path, what):
    path = tmp_path / "x"
    if what == "file":
        path.write_bytes(b"")
    done = _run_fails("-b", str(path))
    assert done.returncode != 0
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], lines


def test_stats_report_real_binlog_figures(tmp_path):
    srv = start_server("ours", "-b", str(tmp_path), "-s", "4096")
    try:
        w = connect(srv)
        for _ in range(60):
            put(w, b"x" * 100)
        st = stats(w)
        assert st["binlog-max-size"] == "4096"
        assert int(st["binlog-current-index"]) >= 3
        assert st["binlog-oldest-index"] == "1"
        assert st["binlog-records-written"] == "60"
        assert stats_job(w, 1)["file"] == "1"
        assert stats_job(w, 60)["file"] == st["binlog-current-index"]
    finally:
        srv.stop()


def test_churn_keeps_the_directory_small(tmp_path):
    """reserve / release-with-delay churn on 10 jobs, beanstalkd's #622."""
    d = str(tmp_path)
    srv = start_server("ours", "-b", d, "-s", "4096")
    try:
        w = connect(srv)
        for i in range(10):
            put(w, b"live-%d" % i, pri=i)
        peak = 0
        for rnd in range(150):
            # pipelined: reserve the 10 jobs, release them with a delay, kick them back
            w.send(b"reserve-with-timeout 0\r\n" * 10)
            got = [r for r in w.replies(10) if r.startswith(b"RESERVED")]
            assert len(got) == 10
            w.send(b"".join(b"release %s %d 100\r\n" % (r.split()[1], i)
                            for i, r in enumerate(got)))
            assert w.replies(10) == [b"RELEASED\r\n"] * 10
            assert w.ask(b"kick 10\r\n") == b"KICKED 10\r\n"
            peak = max(peak, dir_bytes(d))
        st = stats(w)
        assert int(st["binlog-records-written"]) >= 3000
        assert int(st["binlog-records-migrated"]) > 0
        assert peak <= 4 * 4096, peak
    finally:
        srv.stop()
    srv = start_server("ours", "-b", d, "-s", "4096")
    try:
        st = stats(connect(srv))
        assert st["current-jobs-ready"] == "10"
    finally:
        srv.stop()


def test_corrupt_tail_and_middle_over_restarts(tmp_path):
    d = str(tmp_path)
    srv = start_server("ours", "-b", d)
    w = connect(srv)
    ids = [put(w, b"job-%d" % i) for i in range(20)]
    assert srv.stop() == 0
    path = os.path.join(d, "binlog.1")
    with open(path, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 2] ^= 0xFF  # middle
    data = data[:-5]  # torn tail
    with open(path, "wb") as f:  # closed (so written) before the server reads it
        f.write(bytes(data))
    srv2 = start_server("ours", "-b", d)
    try:
        st = stats(connect(srv2))
        n = int(st["current-jobs-ready"])
        assert 16 <= n <= 18
    finally:
        srv2.stop()
    err = srv2.proc.stderr.read().decode()
    assert "dropped an incomplete record" in err
    assert "damaged" in err
    # a zero-length file is dropped with a warning too
    nxt = max(parse_file_name(n) for n in os.listdir(d) if parse_file_name(n)) + 1
    open(os.path.join(d, "binlog.%d" % nxt), "wb").close()
    srv3 = start_server("ours", "-b", d)
    try:
        assert int(stats(connect(srv3))["current-jobs-ready"]) == n
    finally:
        srv3.stop()
    assert "is empty" in srv3.proc.stderr.read().decode()
    _ = ids


def _set_fsize(pid: int, limit: int) -> None:
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))


def test_file_size_limit_refuses_changes_keeps_reads_and_recovers(tmp_path):
    """A write error at run time (RLIMIT_FSIZE set from outside with prlimit)."""
    d = str(tmp_path)
    srv = start_server("ours", "-b", d, "-s", "8192", "-f", "0")
    try:
        w = connect(srv)
        first = put(w, b"first")
        _set_fsize(srv.proc.pid, 100)  # below the write position: writes fail
        acked: List[int] = [first]
        other = connect(srv)
        w.send(b"put 1 0 10 4\r\nheld\r\n")
        time.sleep(0.3)
        assert w.nothing_within(0.2)  # not acknowledged: not written
        assert other.ask(b"peek %d\r\n" % first).startswith(b"FOUND")  # reads work
        assert other.ask(b"put 1 0 10 1\r\nx\r\n") == b"INTERNAL_ERROR\r\n"
        assert other.ask(b"delete %d\r\n" % first) == b"INTERNAL_ERROR\r\n"
        assert other.ask(b"stats\r\n").startswith(b"OK ")
        _set_fsize(srv.proc.pid, resource.RLIM_INFINITY)
        reply = w.reply()  # the held INSERTED arrives once the retry works
        assert reply.startswith(b"INSERTED "), reply
        acked.append(int(reply.split()[1]))
        time.sleep(0.05)
        acked.append(put(other, b"after"))
    finally:
        srv.stop(signal.SIGKILL)
    srv2 = start_server("ours", "-b", d)
    try:
        w2 = connect(srv2)
        for j in acked:
            assert w2.ask(b"peek %d\r\n" % j).startswith(b"FOUND"), j
    finally:
        srv2.stop()


def test_no_room_for_a_new_file_refuses_puts_and_recovers(tmp_path):
    """RLIMIT_FSIZE below -s: the next file cannot be created (like a full disk)."""
    d = str(tmp_path)
    srv = start_server("ours", "-b", d, "-s", "8192")
    try:
        w = connect(srv)
        stats(w)  # the server is up and its first file made
        _set_fsize(srv.proc.pid, 8191)  # the current file is written; a new one cannot be made
        acked = []
        reply = b""
        for i in range(200):
            reply = w.ask(b"put 1 0 10 100\r\n%s\r\n" % (b"%100d" % i))
            if not reply.startswith(b"INSERTED"):
                break
            acked.append(int(reply.split()[1]))
        assert reply == b"INTERNAL_ERROR\r\n"
        assert acked
        # reads, and deletes (in the room kept for them), still work
        assert w.ask(b"peek %d\r\n" % acked[0]).startswith(b"FOUND")
        assert w.ask(b"delete %d\r\n" % acked[0]) == b"DELETED\r\n"
        deleted = acked.pop(0)
        _set_fsize(srv.proc.pid, resource.RLIM_INFINITY)
        time.sleep(0.3)
        acked.append(put(w, b"room again"))
    finally:
        srv.stop(signal.SIGKILL)
    srv2 = start_server("ours", "-b", d)
    try:
        w2 = connect(srv2)
        assert int(stats(w2)["current-jobs-ready"]) == len(acked)
        assert w2.ask(b"peek %d\r\n" % deleted) == b"NOT_FOUND\r\n"
    finally:
        srv2.stop()


# ------------------------------------------------------------------ crash test

class Ledger:
    """What the clients saw: the truth a restarted server must agree with."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inserted: Dict[int, bytes] = {}   # id -> body, INSERTED seen
        self.sent_bodies: Set[bytes] = set()   # every body ever sent in a put
        self.delete_sent: Set[int] = set()     # a delete was sent (maybe applied)
        self.deleted: Set[int] = set()         # DELETED seen


def _client(port: int, ledger: Ledger, rng: random.Random, stop: threading.Event,
            name: str) -> None:
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        return
    w = Wire(sock)
    mine: List[int] = []
    n = 0
    try:
        while not stop.is_set():
            roll = rng.random()
            if roll < 0.55 or not mine:
                n += 1
                body = b"%s-%d-%d" % (name.encode(), n, rng.randrange(10**9))
                with ledger.lock:
                    ledger.sent_bodies.add(body)
                reply = w.ask(b"put %d %d 30 %d\r\n%s\r\n" % (
                    rng.randrange(100), rng.choice((0, 0, 0, 50)), len(body), body))
                if reply.startswith(b"INSERTED "):
                    job_id = int(reply.split()[1])
                    with ledger.lock:
                        ledger.inserted[job_id] = body
                    mine.append(job_id)
            elif roll < 0.8:
                job_id = mine.pop(rng.randrange(len(mine)))
                with ledger.lock:
                    ledger.delete_sent.add(job_id)
                reply = w.ask(b"delete %d\r\n" % job_id)
                if reply == b"DELETED\r\n":
                    with ledger.lock:
                        ledger.deleted.add(job_id)
            elif roll < 0.9:
                job_id = rng.choice(mine)
                if w.ask(b"reserve-job %d\r\n" % job_id).startswith(b"RESERVED"):
                    w.ask(b"release %d %d %d\r\n" % (job_id, rng.randrange(100), rng.choice((0, 30))))
            else:
                job_id = rng.choice(mine)
                if w.ask(b"reserve-job %d\r\n" % job_id).startswith(b"RESERVED"):
                    w.ask(b"bury %d 1\r\n" % job_id)
                    if rng.random() < 0.5:
                        w.ask(b"kick-job %d\r\n" % job_id)
    except (OSError, EOFError):
        pass
    finally:
        sock.close()


def crash_cycles(directory: str, cycles: int, clients: int, seed: int,
                 flags=("-f", "0"), size: str = "65536", log=None) -> Dict[str, float]:
    """Load, SIGKILL at a random moment, restart, check; ``cycles`` times."""
    rng = random.Random(seed)
    ledger = Ledger()
    state = _CheckState(random.Random(seed + 1))
    port = free_port()
    srv = start_server("ours", "-b", directory, "-s", size, *flags, port=port)
    for cycle in range(cycles):
        stop = threading.Event()
        threads = [threading.Thread(target=_client, daemon=True,
                                    args=(port, ledger, random.Random(rng.random()), stop,
                                          "c%d.%d" % (cycle, i)))
                   for i in range(clients)]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.05, 0.4))
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait()
        stop.set()
        for t in threads:
            t.join(10)
        srv = start_server("ours", "-b", directory, "-s", size, *flags, port=port)
        _check(srv, ledger, state, last=cycle == cycles - 1)
        if log:
            log(f"cycle {cycle + 1}: {len(ledger.inserted)} acknowledged, "
                f"{len(ledger.deleted)} deleted, {state.checks} checks, "
                f"{state.live} jobs in the server")
    assert srv.stop() == 0
    return {"acknowledged": len(ledger.inserted), "deleted": len(ledger.deleted),
            "checks": state.checks}


class _CheckState:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.scanned_to = 0
        #: Jobs found that no client saw acknowledged (INSERTED lost in the kill).
        self.unknown: Dict[int, bytes] = {}
        self.checks = 0
        self.live = 0


#: Deleted ids re-checked per cycle (all of them in the last cycle).
DELETED_SAMPLE = 5000
#: Acknowledged jobs kept in the server between cycles; older ones are deleted.
KEEP_LIVE = 3000


def _peek_all(w: Wire, ids: List[int]) -> Dict[int, bytes]:
    out: Dict[int, bytes] = {}
    for i in range(0, len(ids), 2000):
        chunk = ids[i:i + 2000]
        w.send(b"".join(b"peek %d\r\n" % j for j in chunk))
        out.update(zip(chunk, w.replies(len(chunk))))
    return out


def _body(reply: bytes) -> bytes:
    return reply.split(b"\r\n")[1]


def _check(srv, ledger: Ledger, state: _CheckState, last: bool = True) -> None:
    w = connect(srv)
    with ledger.lock:
        inserted = dict(ledger.inserted)
        delete_sent = set(ledger.delete_sent)
        deleted = set(ledger.deleted)
        sent_bodies = set(ledger.sent_bodies)
    live = [j for j in inserted if j not in delete_sent]
    uncertain = [j for j in delete_sent if j not in deleted]
    sample = list(deleted)
    if not last and len(sample) > DELETED_SAMPLE:
        sample = state.rng.sample(sample, DELETED_SAMPLE)
    top = max(inserted, default=0) + 50
    scan = list(range(max(1, state.scanned_to - 50), top + 1))
    replies = _peek_all(w, live + uncertain + sample + list(state.unknown) + scan)
    found = set()
    # every acknowledged job not deleted is there, with its body
    for j in live:
        reply = replies[j]
        assert reply.startswith(b"FOUND %d " % j), f"acknowledged job {j} lost: {reply!r}"
        assert _body(reply) == inserted[j], f"job {j} changed its body"
        found.add(j)
    # no job whose DELETED was seen comes back
    for j in sample:
        assert replies[j] == b"NOT_FOUND\r\n", f"deleted job {j} came back"
    for j in uncertain:
        if replies[j].startswith(b"FOUND"):
            found.add(j)
    # nothing invented: a job nobody saw acknowledged was put by some client
    for j in list(state.unknown) + scan:
        reply = replies[j]
        if reply.startswith(b"FOUND"):
            body = _body(reply)
            assert body in sent_bodies, f"job {j} was never put: {body!r}"
            if j in inserted:
                assert body == inserted[j]
            elif j not in state.unknown:
                state.unknown[j] = body
            else:
                assert state.unknown[j] == body
            found.add(j)
        elif j in state.unknown and j not in delete_sent:
            raise AssertionError(f"job {j} was there after an earlier restart and is gone")
    state.scanned_to = top
    st = stats(w)
    total = sum(int(st["current-jobs-" + k]) for k in ("ready", "delayed", "buried", "reserved"))
    assert len(found) == total, (len(found), total)
    state.checks += len(replies)
    # keep the server's live set bounded: delete the oldest acknowledged jobs
    extra = sorted(j for j in found if j in inserted and j not in delete_sent)[:-KEEP_LIVE]
    if extra:
        with ledger.lock:
            ledger.delete_sent.update(extra)
        w.send(b"".join(b"delete %d\r\n" % j for j in extra))
        gone = [j for j, r in zip(extra, w.replies(len(extra))) if r == b"DELETED\r\n"]
        assert len(gone) == len(extra)
        with ledger.lock:
            ledger.deleted.update(gone)
    state.live = total - len(extra)
    w.close()


def test_crash_under_load_loses_nothing_acknowledged(tmp_path):
    started = time.monotonic()
    result = crash_cycles(str(tmp_path), cycles=30, clients=4, seed=20261122)
    assert result["acknowledged"] > 500
    assert result["deleted"] > 100
    assert time.monotonic() - started < 90


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size)``: a directory on a tmpfs of ``size`` (e.g. "300k"), a
    disk that really fills up; unmounted afterwards.  Skips without root."""
    mounted = []

    def mount(size: str) -> str:
        if os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs needs root")
        mnt = tmp_path / f"mnt{len(mounted)}"
        mnt.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                              capture_output=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounted.append(mnt)
        return str(mnt)

    yield mount
    for mnt in mounted:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def put_until_refused(w: Wire, body: bytes, most: int = 20000) -> List[int]:
    """Put ``body`` until a put is not INSERTED (it must be INTERNAL_ERROR)."""
    acked = []
    for _ in range(most):
        reply = w.ask(b"put 1 0 10 %d\r\n%s\r\n" % (len(body), body))
        if not reply.startswith(b"INSERTED"):
            assert reply == b"INTERNAL_ERROR\r\n", reply
            return acked
        acked.append(int(reply.split()[1]))
    raise AssertionError(f"{most} puts and the disk is not full")


def delete_all(w: Wire, ids: List[int]) -> None:
    w.send(b"".join(b"delete %d\r\n" % j for j in ids))
    assert w.replies(len(ids)) == [b"DELETED\r\n"] * len(ids)


def binlog_count(d: str) -> int:
    return sum(1 for n in os.listdir(d) if parse_file_name(n))


def test_full_disk_refuses_changes_and_recovers_when_space_returns(tmpfs):
    d = tmpfs("300k")
    srv = srv2 = None
    try:
        srv = start_server("ours", "-b", d, "-s", "65536")
        w = connect(srv)
        acked = put_until_refused(w, b"x" * 100)
        assert len(acked) > 1000
        assert w.ask(b"peek %d\r\n" % acked[-1]).startswith(b"FOUND")
        assert w.ask(b"delete %d\r\n" % acked[0]) == b"DELETED\r\n"
        gone = acked.pop(0)
        assert w.ask(b"put 1 0 10 1\r\nx\r\n") == b"INTERNAL_ERROR\r\n"
        subprocess.run(["mount", "-o", "remount,size=2m", d], check=True)
        time.sleep(0.3)
        acked.append(put(w, b"space again"))
        srv.stop(signal.SIGKILL)
        srv2 = start_server("ours", "-b", d, "-s", "65536")
        w2 = connect(srv2)
        assert int(stats(w2)["current-jobs-ready"]) == len(acked)
        assert w2.ask(b"peek %d\r\n" % gone) == b"NOT_FOUND\r\n"
    finally:
        for s in (srv, srv2):
            if s is not None:
                s.stop(signal.SIGKILL)


def test_full_disk_is_usable_again_once_jobs_are_deleted_and_restarts_on_it(tmpfs):
    """A 2 MB disk, 256 KiB files: fill it, delete everything, put again at
    once; fill it again, delete everything, kill, and start on the full disk."""
    d = tmpfs("2m")
    flags = ("-b", d, "-f", "0", "-s", "262144")
    body = b"b" * 4000
    srv = start_server("ours", *flags)
    try:
        w = connect(srv)
        acked = put_until_refused(w, body)
        assert len(acked) > 300
        assert binlog_count(d) >= 7
        delete_all(w, acked)
        started = time.monotonic()
        again = put(w, body)  # no waiting: the dead files go at once
        assert time.monotonic() - started < 1
        assert binlog_count(d) <= 2
        more = put_until_refused(w, body)
        assert len(more) >= len(acked) - 1
        delete_all(w, [again] + more)
        assert binlog_count(d) >= 7  # full of records of deleted jobs
        w.close()
    finally:
        srv.stop(signal.SIGKILL)
    srv = start_server("ours", *flags)
    try:
        w = connect(srv)
        assert stats(w)["current-jobs-ready"] == "0"
        assert binlog_count(d) == 1
        assert put(w, body) > more[-1]
        w.close()
    finally:
        assert srv.stop() == 0


# ------------------------------------------------- twistd beanstalk -b checks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def twistd_command(*args: str) -> List[str]:
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    if not os.path.exists(twistd):
        pytest.skip("no twistd script")
    return [twistd, "-n", "--pidfile=", *args]


def run_twistd(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(twistd_command(*args), cwd=cwd, capture_output=True, timeout=30,
                          env=dict(os.environ, PYTHONPATH=ROOT))


@pytest.mark.parametrize("what", ["missing", "file"])
def test_twistd_unusable_directory_exits_with_one_line(tmp_path, what):
    path = tmp_path / "x"
    if what == "file":
        path.write_bytes(b"")
    done = run_twistd("beanstalk", "--port", f"tcp:{free_port()}:interface=127.0.0.1",
                      "-b", str(path), cwd=tmp_path)
    assert done.returncode == 10, done
    lines = done.stderr.decode().strip().splitlines()
    assert lines == [f"twistd: binlog directory {path} "
                     + ("does not exist" if what == "missing" else "is not a directory")]


@pytest.fixture
def shared_dir():
    """``shared_dir(mode)``: a root-owned directory in /tmp with ``mode``,
    reachable by other users (pytest's tmp_path is not)."""
    made = []

    def make(mode: int) -> str:
        d = tempfile.mkdtemp(prefix="stalk-binlog-")
        os.chmod(d, mode)
        made.append(d)
        return d

    yield make
    for d in made:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0 or not _user_exists("nobody"),
                    reason="needs root and a user nobody to switch to")
@pytest.mark.parametrize("mode", [0o755, 0o777], ids=["0755", "0777"])
def test_twistd_user_that_cannot_write_the_directory_is_refused_at_start(tmp_path, shared_dir,
                                                                         mode):
    """twistd opens the binlog as root and switches to -u/-g later: a directory
    that user cannot write in must stop the start, not the first new file."""
    d = shared_dir(mode)
    group = grp.getgrgid(pwd.getpwnam("nobody").pw_gid).gr_name
    port = free_port()
    proc = subprocess.Popen(
        twistd_command("-u", "nobody", "-g", group, "beanstalk",
                       "--port", f"tcp:{port}:interface=127.0.0.1", "-b", d, "-s", "8192"),
        cwd=tmp_path, env=dict(os.environ, PYTHONPATH=ROOT),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        if mode == 0o755:
            _, err = proc.communicate(timeout=30)
            assert proc.returncode == 10
            assert err.decode().strip().splitlines() == [
                f"twistd: binlog directory {d} is not writable by user nobody "
                f"(uid {pwd.getpwnam('nobody').pw_uid}) and group {group} "
                f"(gid {grp.getgrnam(group).gr_gid}), which the server runs as"]
            return
        # the directory that user can write in: every put, across new files
        w = Wire(_connect_when_up(proc, port))
        w.send(b"".join(b"put 1 0 10 100\r\n%s\r\n" % (b"%100d" % i) for i in range(100)))
        assert all(r.startswith(b"INSERTED") for r in w.replies(100))
        assert binlog_count(d) > 2
        w.close()
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(20)
        proc.stderr.close()


def _connect_when_up(proc: subprocess.Popen, port: int) -> socket.socket:
    deadline = time.monotonic() + 20
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=20)
        except OSError:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline
            time.sleep(0.02)
