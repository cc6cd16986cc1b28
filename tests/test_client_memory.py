"""BeanstalkClient against the real server protocol in memory (twisted_stalk.testing)."""
import pytest
from twisted.internet.defer import CancelledError, Deferred

from twisted_stalk.client import (
    BeanstalkClient,
    ClientClosed,
    ConnectionLost,
    ConnectTimeout,
    DeadlineSoon,
    Draining,
    InvalidArgument,
    Job,
    JobLost,
    JobTooBig,
    JSONCodec,
    NotFound,
    NotIgnored,
    TimedOut,
)
from twisted_stalk.testing import MemoryBeanstalk


@pytest.fixture
def server():
    s = MemoryBeanstalk()
    yield s
    s.close()


@pytest.fixture
def client(server):
    return server.client()


def failure_of(server, d, cls):
    with pytest.raises(cls) as info:
        server.result(d)
    return info.value


def fired(d):
    """True once ``d`` has a result (``d.called`` is also true while it waits on
    another Deferred)."""
    box = []
    d.addBoth(lambda r: (box.append(1), r)[1])
    return bool(box)


def sessions(server):
    return [p.session for p in server.factory.connections]


# -------------------------------------------------------------- round trips

def test_every_command(server, client):
    r = server.result
    assert r(client.put(b"one")) == 1
    assert r(client.use("work")) == "work"
    assert r(client.put(b"two", priority=5, delay=0, ttr=30)) == 2
    assert r(client.put(b"later", delay=100)) == 3
    assert r(client.list_tube_used()) == "work"
    assert r(client.watch("work")) == 2
    assert r(client.ignore("default")) == 1
    assert r(client.list_tubes_watched()) == ["work"]
    assert sorted(r(client.list_tubes())) == ["default", "work"]
    assert r(client.peek(1)).body == b"one"
    assert r(client.peek_ready()).id == 2
    assert r(client.peek_delayed()).id == 3
    failure_of(server, client.peek_buried(), NotFound)
    job = r(client.reserve(timeout=0))
    assert isinstance(job, Job) and job.id == 2 and job.body == b"two" and job.reserved
    assert r(job.stats())["state"] == "reserved"
    assert r(job.touch()) is None
    assert r(job.bury(9)) is None
    assert r(client.peek_buried()).id == 2
    assert r(client.kick(10)) == 1
    job = r(client.reserve_job(2))
    assert r(job.release(delay=50)) is None
    assert r(client.kick_job(2)) is None
    stats = r(client.stats_job(2))
    assert stats["state"] == "ready" and stats["releases"] == 1 and stats["tube"] == "work"
    tube = r(client.stats_tube("work"))
    assert tube["name"] == "work" and tube["current-jobs-ready"] == 1
    assert tube["current-jobs-delayed"] == 1
    assert r(client.pause_tube("work", 5)) is None
    s = r(client.stats())
    assert s["current-jobs-ready"] == 2 and isinstance(s["id"], str)
    assert r(client.delete(2)) is None
    failure_of(server, client.delete(2), NotFound)
    failure_of(server, client.ignore("work"), NotIgnored)
    failure_of(server, client.stats_tube("nosuch"), NotFound)
    failure_of(server, client.reserve_job(999), NotFound)


def test_async_await(server, client):
    async def produce_and_consume():
        ids = [await client.tube("emails").put(f"mail {i}") for i in range(3)]
        got = []
        for _ in ids:
            job = await client.watching("emails").reserve(timeout=0)
            got.append(job.text)
            await job.delete()
        return ids, got

    d = Deferred.fromCoroutine(produce_and_consume())
    assert server.result(d) == ([1, 2, 3], ["mail 0", "mail 1", "mail 2"])


def test_codec(server):
    client = server.client(codec=JSONCodec())
    server.result(client.put({"to": "a@b"}))
    job = server.result(client.reserve(0))
    assert job.value == {"to": "a@b"} and job.body == b'{"to":"a@b"}'


def test_per_call_tubes_do_not_change_defaults(server, client):
    r = server.result
    r(client.tube("a").put(b"1"))
    r(client.put(b"2"))
    r(client.tube("b").put(b"3"))
    assert server.stats_tube("a")["current-jobs-ready"] == 1
    assert server.stats_tube("b")["current-jobs-ready"] == 1
    assert server.stats_tube("default")["current-jobs-ready"] == 1
    assert client.used == "default"
    assert r(client.tube("b").peek_ready()).body == b"3"
    assert r(client.tube("a").kick(1)) == 0
    assert r(client.tube("a").stats())["total-jobs"] == 1
    job = r(client.watching("b", "a").reserve(timeout=0))
    assert job.body == b"1"  # lowest id among the ready jobs of a and b
    job2 = r(client.watching("b").reserve(timeout=0))
    assert job2.body == b"3"
    assert client.watched == ("default",)


def test_interleaved_tubes_pipelined(server, client):
    ds = [client.tube("t%d" % (i % 3)).put(b"%d" % i) for i in range(30)]
    server.flush()
    assert [server.result(d) for d in ds] == list(range(1, 31))
    for t in range(3):
        assert server.stats_tube("t%d" % t)["current-jobs-ready"] == 10


def test_blocking_reserve_does_not_hold_up_other_calls(server, client):
    pending = client.watching("jobs").reserve()
    server.flush()
    assert not fired(pending)
    job_id = server.result(client.put(b"other"))  # not stuck behind the reserve
    assert job_id == 1
    assert server.result(client.stats())["current-waiting"] == 1
    server.result(client.tube("jobs").put(b"work"))
    job = server.result(pending)
    assert job.body == b"work"
    assert server.connections == 2


def test_jobs_are_bound_to_the_reserving_connection(server, client):
    for i in range(2):
        server.result(client.put(b"%d" % i))
    a = client.reserve()
    b = client.reserve()
    job_a, job_b = server.result(a), server.result(b)
    assert job_a._proto is not job_b._proto
    assert server.connections == 3
    # delete/release/bury/touch go where the job was reserved
    server.result(job_a.delete())
    server.result(client.release(job_b.id))  # by id: the client finds the connection
    assert server.stats()["current-jobs-reserved"] == 0
    # freed connections are reused
    server.result(client.reserve(0))
    assert server.connections == 3


def test_reserve_pool_limit_waits(server):
    client = server.client(max_reserve_connections=1)
    first = client.reserve()
    second = client.reserve()
    server.flush()
    server.result(client.put(b"a"))
    job = server.result(first)
    assert not fired(second)
    server.result(client.put(b"b"))
    assert not fired(second)  # the only reserve connection holds job a
    server.result(job.delete())
    assert server.result(second).body == b"b"
    assert server.connections == 2


def test_cancel_waiting_for_pool(server):
    client = server.client(max_reserve_connections=1)
    first = client.reserve()
    second = client.reserve()
    second.cancel()
    failure_of(server, second, CancelledError)
    server.result(client.put(b"a"))
    assert server.result(first).body == b"a"


def test_cancel_reserve_in_flight_closes_only_its_connection(server, client):
    d = client.reserve()
    server.flush()
    assert server.connections == 2
    d.cancel()
    failure_of(server, d, CancelledError)
    server.flush()
    assert server.connections == 1
    assert server.result(client.put(b"x")) == 1
    server.advance(1)  # the pool connection reconnects
    assert server.result(client.reserve(0)).body == b"x"


def test_reserve_timeout_and_deadline_soon(server, client):
    failure_of(server, client.reserve(0), TimedOut)
    d = client.reserve(5)
    server.advance(4)
    assert not fired(d)
    server.advance(1)
    failure_of(server, d, TimedOut)
    # DEADLINE_SOON: a reserve on the connection holding a job in its last second
    proto = server.protocol()
    server.result(proto.put(b"x", ttr=2))
    job = server.result(proto.reserve())
    d = proto.reserve()
    server.advance(1)
    failure_of(server, d, DeadlineSoon)
    server.result(job.delete())


def test_draining_and_job_too_big():
    server = MemoryBeanstalk(max_job_size=10)
    client = server.client(max_job_size=None)
    failure_of(server, client.put(b"x" * 11), JobTooBig)
    server.factory.engine.draining = True
    failure_of(server, client.put(b"x"), Draining)


def test_validation_at_client_level(server, client):
    with pytest.raises(InvalidArgument):
        client.tube("-x")
    with pytest.raises(InvalidArgument):
        client.watching()
    with pytest.raises(InvalidArgument):
        client.watching("ok", "bad name")
    for d in (client.put(b"x", tube="bad name"), client.reserve(-1),
              client.reserve(tubes=["a", ""]), client.use(""), client.watch("x" * 201),
              client.ignore("!"), client.put(b"x" * 70000), client.delete(-3)):
        failure_of(server, d, InvalidArgument)
    assert server.stats()["total-jobs"] == 0 and server.connections == 1
    with pytest.raises(InvalidArgument):
        BeanstalkClient(server.endpoint(), reactor=server.clock, watch=())


# ------------------------------------------------------ connection handling

def test_connection_loss_reconnect_restores_use_and_watch(server):
    client = server.client(use="out", watch=("in1", "in2"))
    r = server.result
    r(client.put(b"a"))
    r(client.tube("in1").put(b"job"))
    job = r(client.reserve(0))
    assert job.body == b"job"
    assert server.connections == 2
    pending = client.put(b"b")
    server.drop_connections()
    failure_of(server, pending, ConnectionLost)
    assert job.lost
    failure_of(server, job.delete(), JobLost)
    assert server.connections == 0
    # calls made while disconnected wait for the reconnect, in order
    later = [client.put(b"c"), client.list_tube_used(), client.list_tubes_watched()]
    server.advance(1)
    assert server.connections >= 1
    assert r(later[0]) == 4
    assert r(later[1]) == "out"
    assert sorted(r(later[2])) == ["in1", "in2"]
    for session in sessions(server):  # every connection was restored eagerly
        assert session.use.name == b"out"
        assert sorted(t.name for t in session.watch) == [b"in1", b"in2"]
    again = r(client.reserve(0))
    assert again.id == job.id  # the server released the lost job


def test_use_and_watch_changes_are_replayed(server):
    client = server.client()
    server.result(client.use("x"))
    server.result(client.watch("y"))
    server.result(client.ignore("default"))
    server.drop_connections()
    server.advance(1)
    assert [s.use.name for s in sessions(server)] == [b"x"]
    assert [[t.name for t in s.watch] for s in sessions(server)] == [[b"y"]]


def test_server_down_then_up(server):
    client = server.client()
    server.refusing = True
    server.drop_connections()
    d = client.put(b"queued")
    server.advance(5)
    assert not fired(d)
    server.refusing = False
    server.advance(1)
    assert server.result(d) == 1


def test_connect_timeout(server):
    server.refusing = True
    client = server.client(connect=False, connect_timeout=3)
    d = client.put(b"x")
    server.advance(2.9)
    assert not fired(d)
    server.advance(0.1)
    e = failure_of(server, d, ConnectTimeout)
    assert "3" in str(e)


def test_cancel_call_waiting_for_connection(server):
    server.refusing = True
    client = server.client(connect=False)
    d1 = client.put(b"1")
    d2 = client.put(b"2")
    d1.cancel()
    failure_of(server, d1, CancelledError)
    server.refusing = False
    server.advance(1)
    assert server.result(d2) == 1
    assert server.stats()["total-jobs"] == 1


def test_close(server, client):
    blocked = client.reserve()
    server.flush()
    d = client.close()
    server.flush()
    assert server.result(d) is None
    failure_of(server, blocked, ClientClosed)
    failure_of(server, client.put(b"x"), ClientClosed)
    failure_of(server, client.reserve(0), ClientClosed)
    assert server.connections == 0
    assert not [c for c in server.clock.getDelayedCalls() if c.active()]


def test_close_fails_pending_and_waiting(server):
    client = server.client(max_reserve_connections=1)
    first, second = client.reserve(), client.reserve()
    p = client.put(b"x")  # written, not yet answered
    client.close()
    failure_of(server, p, ClientClosed)
    failure_of(server, first, ClientClosed)
    failure_of(server, second, ClientClosed)


def test_client_stats_are_typed(server, client):
    stats = server.result(client.stats())
    assert isinstance(stats["pid"], int) and isinstance(stats["version"], str)
    assert stats["draining"] is False
    assert isinstance(stats["rusage-utime"], float)
