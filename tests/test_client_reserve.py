"""Reserve connections: the reserve's timeout covers the wait for one, a
connection whose job's TTR ran out is free again, and a job reserved twice
says what happened (in memory, with a Clock)."""
import pytest

from twisted_stalk.client import JobLost, NotFound, TimedOut
from twisted_stalk.testing import MemoryBeanstalk
from test_client_memory import failure_of, fired


@pytest.fixture
def server():
    s = MemoryBeanstalk()
    yield s
    s.close()


def test_dropped_jobs_do_not_use_up_the_reserve_connections(server):
    """Reserve, decide the job is not ours, let the TTR give it back: once
    every reserve connection held such a job, reserve(timeout=1) used to wait
    forever, its timeout never started."""
    client = server.client()
    for i in range(70):
        server.result(client.put(b"%d" % i, ttr=1))
    for _ in range(64):
        server.result(client.reserve(timeout=0))  # and dropped
    server.advance(2.5)
    assert server.stats()["current-jobs-ready"] == 70
    d = client.reserve(timeout=1)
    server.advance(10)
    assert fired(d)
    job = server.result(d)
    server.result(job.delete())
    assert server.stats()["current-jobs-ready"] == 69


def test_timeout_covers_the_wait_for_a_connection(server):
    client = server.client(max_reserve_connections=2)
    for i in range(3):
        server.result(client.put(b"%d" % i, ttr=100))
    held = [server.result(client.reserve(timeout=0)) for _ in range(2)]
    d = client.reserve(timeout=3)
    server.advance(2.9)
    assert not fired(d)
    server.advance(0.1)
    e = failure_of(server, d, TimedOut)
    assert "reserve connections" in str(e)
    # a connection freed in time serves a waiting reserve
    d = client.reserve(timeout=3)
    server.result(held[0].delete())
    assert server.result(d).body == b"2"


def expired(e):
    from twisted_stalk.client import JobExpired  # (new: imported here so that
    return isinstance(e, JobExpired)             # the other tests run without it)


def test_expired_job_frees_its_connection_and_says_so(server):
    client = server.client(max_reserve_connections=1)
    server.result(client.put(b"x", ttr=2))
    first = server.result(client.reserve(timeout=0))
    d = client.reserve(timeout=10)  # waits: the only connection holds `first`
    server.flush()
    assert not fired(d)
    server.advance(3.5)  # TTR (2 s) + the client's margin (1 s)
    second = server.result(d)  # the same job, reserved again on the same connection
    assert second.id == first.id and first.expired and first.lost
    e = failure_of(server, first.delete(), JobLost)
    assert expired(e) and isinstance(e, NotFound) and "TTR" in str(e)
    server.result(second.delete())
    assert server.stats()["current-jobs-ready"] == 0 and server.stats()["cmd-delete"] == 1


def test_job_reserved_again_on_another_connection(server):
    """The first Job's delete must not fail with a bare NOT_FOUND (or, worse,
    delete the job the second reserve holds)."""
    client = server.client()
    server.result(client.put(b"x", ttr=1))
    first = server.result(client.reserve(timeout=0))
    server.advance(1.5)  # the server took it back
    second = server.result(client.reserve(timeout=0))
    assert second.id == first.id and second._proto is not first._proto
    e = failure_of(server, first.delete(), JobLost)
    assert expired(e) and "reserved it again" in str(e)
    assert server.stats_job(second.id)["state"] == "reserved"
    server.result(second.delete())


def test_not_found_on_an_expired_job_says_what_happened(server):
    client = server.client()
    other = server.client()
    server.result(client.put(b"x", ttr=1))
    job = server.result(client.reserve(timeout=0))
    server.advance(1.5)
    server.result(other.reserve(timeout=0))  # another client has it now
    e = failure_of(server, job.delete(), JobLost)
    assert expired(e) and isinstance(e, NotFound) and "TTR" in str(e) and job.expired
    assert expired(failure_of(server, job.touch(), JobLost))


def test_ttr_learnt_only_when_every_connection_is_held(server):
    client = server.client(max_reserve_connections=2)
    for i in range(3):
        server.result(client.put(b"%d" % i, ttr=5))
    a = server.result(client.reserve(timeout=0))
    assert a.ttr is None and server.stats()["cmd-stats-job"] == 0
    b = server.result(client.reserve(timeout=0))
    d = client.reserve(timeout=20)
    server.flush()
    assert server.stats()["cmd-stats-job"] == 2 and (a.ttr, b.ttr) == (5, 5)
    server.advance(4)
    server.result(a.touch())  # restarts a's TTR
    server.advance(1.9)
    assert not fired(d)
    server.advance(0.2)  # b expires (5 s + the client's 1 s margin)
    assert server.result(d).body == b"1" and b.expired and not a.expired
    server.result(a.delete())
