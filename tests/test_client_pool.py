"""BeanstalkPool over three in-memory servers on one Clock (twisted_stalk.testing.MemoryCluster)."""
import pytest
from twisted.internet.defer import CancelledError, Deferred, gatherResults
from twisted.internet.task import deferLater

from twisted_stalk.client import (
    BeanstalkError,
    ConnectionLost,
    InvalidArgument,
    Job,
    JobId,
    KeyHash,
    NoServerAvailable,
    NotFound,
    ResponseTimeout,
    RoundRobin,
    TimedOut,
    Weighted,
    Worker,
)
from twisted_stalk.testing import MemoryCluster
from test_client_memory import failure_of, fired  # (they take any object with .result)


@pytest.fixture
def cluster():
    c = MemoryCluster(3)
    yield c
    c.close()


@pytest.fixture
def pool(cluster):
    return cluster.pool()


def totals(cluster, key="total-jobs"):
    return [s.stats()[key] for s in cluster.servers]


def direct(cluster, i):
    """A plain client of server ``i`` only."""
    return cluster.servers[i].client()


def take_down(cluster, i):
    cluster.servers[i].refusing = True
    cluster.servers[i].drop_connections()
    cluster.flush()


def bring_back(cluster, i):
    cluster.servers[i].refusing = False
    cluster.advance(1)  # the reconnect (1 s in tests)


# ------------------------------------------------------------------ producing

def test_round_robin_spreads_10000_puts_evenly(cluster, pool):
    for start in range(0, 10000, 1000):
        cluster.result(gatherResults([pool.put(b"%d" % i) for i in range(start, start + 1000)]))
    counts = totals(cluster)
    assert sum(counts) == 10000
    assert all(abs(c - 10000 / 3) <= 0.05 * 10000 / 3 for c in counts), counts
    assert max(counts) - min(counts) <= 1
    assert [s.puts for s in pool.servers()] == counts


def test_put_returns_an_id_that_knows_its_server(cluster, pool):
    job_id = cluster.result(pool.tube("mail").put(b"hello"))
    assert isinstance(job_id, JobId) and job_id == 1
    assert job_id.server == pool.servers()[0].name
    assert cluster.result(pool.peek(job_id)).body == b"hello"
    assert cluster.result(pool.stats_job(job_id))["tube"] == "mail"
    failure_of(cluster, pool.peek(1), InvalidArgument)  # a bare id: which server?
    cluster.result(pool.delete(job_id))
    assert totals(cluster, "cmd-delete") == [1, 0, 0]


def test_weighted_policy(cluster):
    pool = cluster.pool(policy=Weighted([3, 1, 1]))
    cluster.result(gatherResults([pool.put(b"x") for _ in range(500)]))
    assert totals(cluster) == [300, 100, 100]


def test_smooth_weighted_interleaves():
    by_name = Weighted({"a": 3})  # unnamed servers weigh 1
    picks = [by_name.order(["a", "b", "c"], [0, 1, 2])[0] for _ in range(5)]
    assert picks == [0, 1, 0, 2, 0]
    assert Weighted([3, 1, 1]).order(["a", "b", "c"], [1, 2]) == [1, 2]  # a is not usable


def test_key_sends_related_jobs_to_one_server(cluster, pool):
    ids = cluster.result(gatherResults([pool.put(b"x", key="customer-42") for _ in range(20)]))
    assert len({i.server for i in ids}) == 1
    spread = cluster.result(gatherResults([pool.put(b"x", key=k) for k in range(300)]))
    per_server = [sum(1 for i in spread if i.server == s.name) for s in pool.servers()]
    assert all(per_server) and max(per_server) < 150
    # a down server's keys move; the others' stay where they were
    names = [s.name for s in pool.servers()]
    home = {k: KeyHash().order(names, [0, 1, 2], k)[0] for k in range(300)}
    take_down(cluster, 1)
    moved = cluster.result(gatherResults([pool.put(b"y", key=k) for k in range(300)]))
    for k, job_id in zip(range(300), moved):
        if home[k] != 1:
            assert job_id.server == names[home[k]]
        else:
            assert job_id.server != names[1]


def test_draining_server_is_passed_over(cluster, pool):
    cluster.servers[0].factory.engine.draining = True
    ids = cluster.result(gatherResults([pool.put(b"x") for _ in range(6)]))
    assert totals(cluster) == [0, 3, 3]
    assert all(i.server != pool.servers()[0].name for i in ids)
    for s in cluster.servers:
        s.factory.engine.draining = True
    e = failure_of(cluster, pool.put(b"x"), NoServerAvailable)
    assert len(e.errors) == 3 and "DRAINING" in str(e)


def test_put_skips_a_down_server_and_waits_when_all_are(cluster, pool):
    take_down(cluster, 0)
    cluster.result(gatherResults([pool.put(b"x") for _ in range(4)]))
    assert totals(cluster) == [0, 2, 2]
    for i in (1, 2):
        take_down(cluster, i)
    d = pool.put(b"late")
    cluster.advance(3)
    assert not fired(d)
    bring_back(cluster, 2)
    assert cluster.result(d).server == pool.servers()[2].name


def hang(cluster, i):
    """Server ``i`` stops answering: it reads nothing more, on its open
    connections and on new ones (which its kernel would still accept)."""
    factory = cluster.servers[i].factory
    for proto in factory.connections:
        proto.dataReceived = lambda data: None
    build = factory.buildProtocol

    def deaf(addr):
        proto = build(addr)
        proto.dataReceived = lambda data: None
        return proto
    factory.buildProtocol = deaf


def test_put_on_a_stalled_server(cluster):
    pool = cluster.pool(stall_timeout=1.0)
    hang(cluster, 0)
    first = pool.put(b"a")  # to server 0: no answer
    cluster.result(pool.put(b"b"))
    cluster.result(pool.put(b"c"))
    cluster.advance(1.5)
    assert pool.servers()[0].stalled and not fired(first)
    cluster.result(gatherResults([pool.put(b"x") for _ in range(4)]))  # 0 is passed over
    assert totals(cluster)[1:] == [3, 3]
    cluster.advance(4)  # the 5 s response timeout: dropped, and tried elsewhere
    assert cluster.result(first).server != pool.servers()[0].name
    assert pool.servers()[0].state == "down"


def test_retry_written_false_raises_instead_of_duplicating(cluster):
    pool = cluster.pool(retry_written=False)
    hang(cluster, 0)
    d = pool.put(b"a")
    cluster.advance(6)
    e = failure_of(cluster, d, ResponseTimeout)
    assert isinstance(e, BeanstalkError)


# ------------------------------------------------------------------ consuming

def test_reserve_takes_jobs_from_every_server(cluster, pool):
    for i in range(3):
        cluster.result(direct(cluster, i).put(b"job on %d" % i))
    jobs = [cluster.result(pool.reserve(timeout=0)) for _ in range(3)]
    assert sorted(j.body for j in jobs) == [b"job on 0", b"job on 1", b"job on 2"]
    names = [s.name for s in pool.servers()]
    for job in jobs:
        assert job.server == names[int(job.body[-1:])]
        cluster.result(pool.delete(job))  # deleted on its own server
    assert totals(cluster, "cmd-delete") == [1, 1, 1]
    failure_of(cluster, pool.reserve(timeout=0), TimedOut)


def test_job_methods_go_to_the_jobs_server(cluster, pool):
    cluster.result(direct(cluster, 2).put(b"x", ttr=60))
    job = cluster.result(pool.reserve(timeout=0))
    cluster.result(job.touch())
    assert cluster.result(job.stats())["tube"] == "default"
    cluster.result(job.release(delay=5))
    assert totals(cluster, "cmd-release") == [0, 0, 1]
    assert totals(cluster, "cmd-touch") == [0, 0, 1]


def test_a_job_on_an_idle_server_is_picked_up_at_once(cluster, pool):
    """With nothing ready anywhere, the reserve waits on every server: a job
    put on any of them is handed to it without any time passing."""
    d = pool.reserve()
    cluster.flush()
    assert totals(cluster, "current-waiting") == [1, 1, 1]
    cluster.result(direct(cluster, 1).put(b"x"))
    assert fired(d)  # no clock advance: the server pushed it
    job = cluster.result(d)
    assert job.body == b"x" and job.server == pool.servers()[1].name
    cluster.flush()
    assert totals(cluster, "current-waiting") == [0, 0, 0]  # the other waits were cancelled
    assert cluster.clock.seconds() == 0


def test_two_servers_answering_at_once_give_the_extra_job_back(cluster, pool):
    d = pool.reserve()
    cluster.flush()
    a, b = direct(cluster, 0), direct(cluster, 2)
    pa, pb = a.put(b"a", priority=7), b.put(b"b", priority=9)  # same flush: both answer
    cluster.flush()
    job = cluster.result(d)
    assert sum(totals(cluster, "current-jobs-reserved")) == 1
    assert sum(totals(cluster, "current-jobs-ready")) == 1
    other = 2 if job.body == b"a" else 0
    other_id = cluster.result(pb if other == 2 else pa)
    st = cluster.servers[other].stats_job(other_id)
    assert st["state"] == "ready" and st["pri"] == (9 if other == 2 else 7)
    assert st["delay"] == 0 and st["releases"] == 0  # given back by closing, not released
    assert st["reserves"] == 1  # (it was reserved for an instant)


def test_no_server_starves_another(cluster, pool):
    """A long queue on server 0 does not hold back server 2's jobs: each
    server is asked first once every 3 reserves."""
    c0, c2 = direct(cluster, 0), direct(cluster, 2)
    cluster.result(gatherResults([c0.put(b"0-%d" % i) for i in range(60)]))
    cluster.result(gatherResults([c2.put(b"2-%d" % i) for i in range(10)]))
    order = []
    for _ in range(40):
        job = cluster.result(pool.reserve(timeout=0))
        order.append(job.body)
        cluster.result(job.delete())
    positions = [i for i, body in enumerate(order) if body.startswith(b"2-")]
    assert len(positions) == 10 and positions[-1] < 30
    assert [b for b in order if b.startswith(b"2-")] == [b"2-%d" % i for i in range(10)]


def test_reserve_timeout_over_the_pool(cluster, pool):
    d = pool.reserve(timeout=3)
    cluster.advance(2.5)
    assert not fired(d)
    cluster.advance(0.6)
    failure_of(cluster, d, TimedOut)
    cluster.flush()
    assert totals(cluster, "current-waiting") == [0, 0, 0]


def test_cancelling_a_pool_reserve(cluster, pool):
    d = pool.reserve()
    cluster.flush()
    d.cancel()
    failure_of(cluster, d, CancelledError)  # (consumed: not an unhandled error)
    cluster.flush()
    assert totals(cluster, "current-waiting") == [0, 0, 0]
    cluster.result(direct(cluster, 0).put(b"x"))
    assert sum(totals(cluster, "current-jobs-ready")) == 1


def test_watching_several_tubes(cluster, pool):
    cluster.result(direct(cluster, 1).tube("b").put(b"in b"))
    cluster.result(direct(cluster, 2).tube("c").put(b"in c"))
    got = {cluster.result(pool.watching("a", "b", "c").reserve(timeout=0)).body
           for _ in range(2)}
    assert got == {b"in b", b"in c"}
    failure_of(cluster, pool.watching("b").reserve(timeout=0), TimedOut)


def test_worker_with_concurrency_4_never_holds_more_than_4(cluster, pool):
    peak = []

    def handler(job):
        peak.append(sum(totals(cluster, "current-jobs-reserved")))
        return deferLater(cluster.clock, 1, lambda: None)
    worker = Worker(pool, handler, concurrency=4)
    worker.start()
    for i in range(3):
        cluster.result(gatherResults([direct(cluster, i).put(b"x") for _ in range(10)]))
    for _ in range(20):
        cluster.advance(0.5)
        peak.append(sum(totals(cluster, "current-jobs-reserved")))
    assert worker.stats.deleted == 30 and max(peak) <= 4 and 4 in peak
    assert [s.reserved for s in pool.servers()] == [10, 10, 10]
    assert totals(cluster, "current-waiting") == [4, 4, 4]  # every loop waits on every server
    cluster.result(worker.stop())
    assert totals(cluster, "current-waiting") == [0, 0, 0]


# ------------------------------------------------------------------ failures

def test_server_down_and_back(cluster):
    changes = []
    pool = cluster.pool(on_server_change=lambda info: changes.append((info.name, info.state)))
    names = [s.name for s in pool.servers()]
    assert [s.state for s in pool.servers()] == ["up"] * 3
    changes.clear()
    take_down(cluster, 1)
    info = pool.servers()[1]
    assert info.state == "down" and info.downs == 1 and info.last_error
    assert changes == [(names[1], "down")]
    cluster.result(gatherResults([pool.put(b"x") for _ in range(4)]))
    assert totals(cluster)[1] == 0
    stats = cluster.result(pool.stats())
    assert stats["total-jobs"] == 4 and set(stats.servers) == {names[0], names[2]}
    assert names[1] in stats.errors
    bring_back(cluster, 1)
    assert pool.servers()[1].state == "up" and changes[-1] == (names[1], "up")
    cluster.result(gatherResults([pool.put(b"y") for _ in range(3)]))
    assert totals(cluster)[1] == 1


def test_waiting_reserve_includes_a_server_that_comes_back(cluster, pool):
    take_down(cluster, 2)
    d = pool.reserve()
    cluster.flush()
    assert not fired(d)
    bring_back(cluster, 2)
    assert cluster.servers[2].stats()["current-waiting"] == 1
    cluster.result(direct(cluster, 2).put(b"x"))
    assert cluster.result(d).server == pool.servers()[2].name


def test_reserve_carries_on_when_a_server_dies_during_the_wait(cluster, pool):
    d = pool.reserve()
    cluster.flush()
    take_down(cluster, 0)
    assert not fired(d)
    cluster.result(direct(cluster, 1).put(b"x"))
    assert cluster.result(d).body == b"x"


def test_use_and_watch_replayed_on_reconnect(cluster, pool):
    cluster.result(pool.use("out"))
    cluster.result(pool.watch("in"))
    cluster.result(pool.ignore("default"))
    take_down(cluster, 0)
    bring_back(cluster, 0)
    cluster.result(gatherResults([pool.put(b"x") for _ in range(3)]))
    assert [s.stats_tube("out").get("total-jobs") for s in cluster.servers] == [1, 1, 1]
    cluster.result(direct(cluster, 0).tube("in").put(b"job"))
    assert cluster.result(pool.reserve(timeout=0)).body == b"job"
    assert pool.used == "out" and pool.watched == ("in",)


# ------------------------------------------------------------------ aggregates

def test_stats_summed_and_per_server(cluster, pool):
    cluster.result(gatherResults([pool.tube("t").put(b"x") for _ in range(6)]))
    cluster.result(direct(cluster, 2).tube("only2").put(b"x", delay=10))
    stats = cluster.result(pool.stats())
    assert stats["current-jobs-ready"] == 6 and stats["current-jobs-delayed"] == 1
    assert "pid" not in stats and isinstance(stats["uptime"], int)
    assert [s["current-jobs-ready"] for s in stats.servers.values()] == [2, 2, 2]
    tube = cluster.result(pool.tube("t").stats())
    assert tube["name"] == "t" and tube["total-jobs"] == 6 and len(tube.servers) == 3
    only = cluster.result(pool.stats_tube("only2"))
    assert only["current-jobs-delayed"] == 1 and list(only.servers) == [pool.servers()[2].name]
    assert isinstance(only.errors[pool.servers()[0].name], NotFound)
    failure_of(cluster, pool.stats_tube("nosuch"), NotFound)
    assert cluster.result(pool.list_tubes()) == ["default", "only2", "t"]
    assert cluster.result(pool.tube("only2").kick(5)) == 1
    ids = cluster.result(pool.tube("t").list_jobs("ready", 10))  # (stock: one per server)
    assert [(i.server, int(i)) for i in ids] == [(s.name, 1) for s in pool.servers()]
    assert cluster.result(pool.tube("t").flush()) == 6
    failure_of(cluster, pool.flush_tube("nosuch"), NotFound)


def test_pool_validation(cluster, pool):
    with pytest.raises(InvalidArgument):
        cluster.pool(connect=False).__class__([])
    with pytest.raises(InvalidArgument):
        cluster.pool(on_connect=lambda c, again: None)
    for d in (pool.reserve(-1), pool.reserve(tubes=["bad name"]), pool.put(b"x", tube="bad name"),
              pool.use("")):
        failure_of(cluster, d, InvalidArgument)


def test_close_fails_waiting_reserves(cluster, pool):
    d = pool.reserve()
    cluster.flush()
    pool.close()
    failure_of(cluster, d, ConnectionLost.__mro__[1])  # ClientClosed's base
    assert totals(cluster, "current-connections") == [0, 0, 0]


def test_round_robin_policy_object():
    rr = RoundRobin()
    assert [rr.order(["a", "b", "c"], [0, 1, 2]) for _ in range(4)] == [
        [0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
    assert rr.order(["a", "b", "c"], []) == []
    assert isinstance(Job, type) and Deferred


def test_a_hung_server_delays_one_reserve_then_is_skipped(cluster, pool):
    hang(cluster, 0)
    cluster.result(direct(cluster, 1).put(b"x"))
    cluster.result(direct(cluster, 2).put(b"y"))
    d = pool.reserve(timeout=0)  # starts at server 0: no answer within reserve_grace (2 s)
    cluster.advance(1.9)
    assert not fired(d)
    cluster.advance(0.2)
    assert cluster.result(d).body == b"x"
    assert pool.servers()[0].state == "down"
    assert cluster.result(pool.reserve(timeout=0)).body == b"y"  # no wait: 0 is skipped
    cluster.advance(10)
    assert pool.servers()[0].state == "down"  # reconnects, but never answers


def test_health_check_finds_an_idle_hung_server(cluster):
    pool = cluster.pool(health_interval=5)
    hang(cluster, 2)
    cluster.advance(9.9)
    assert pool.servers()[2].state == "up"
    cluster.advance(0.2)  # the check at 5 s got no answer within the 5 s timeout
    assert pool.servers()[2].state == "down" and "list-tube-used" in pool.servers()[2].last_error
    assert [s.state for s in pool.servers()[:2]] == ["up", "up"]


def test_first_puts_spread_over_every_server_that_answers(cluster):
    take_down(cluster, 2)  # refuses connections
    pool = cluster.pool(connect=False)
    ids = [pool.put(b"x") for _ in range(10)]  # before any server is up
    cluster.flush()
    assert [s.state for s in pool.servers()] == ["up", "up", "connecting"]
    assert [i.server for i in map(cluster.result, ids)].count(pool.servers()[0].name) == 5
    assert cluster.result(pool.connect()) is pool


def test_connect_times_out_when_no_server_answers(cluster):
    for i in range(3):
        take_down(cluster, i)
    pool = cluster.pool(connect=False, connect_timeout=3)
    d = pool.connect()
    cluster.advance(2.9)
    assert not fired(d)
    cluster.advance(3.2)
    from twisted_stalk.client import ConnectTimeout
    failure_of(cluster, d, ConnectTimeout)
    assert not [c for c in cluster.clock.getDelayedCalls() if c.active()
                and c.getTime() - cluster.clock.seconds() > 2]


def test_a_server_whose_reserve_failed_is_asked_again(cluster, pool):
    """Its main connection is up, but a new reserve connection is refused:
    the waiting reserve tries that server again every second."""
    cluster.servers[2].refusing = True  # refuses new connections only
    d = pool.reserve()
    cluster.advance(2.5)
    assert pool.servers()[2].state == "up" and not fired(d)
    cluster.servers[2].refusing = False
    cluster.advance(1)
    assert cluster.servers[2].stats()["current-waiting"] == 1
    cluster.result(direct(cluster, 2).put(b"x"))
    assert cluster.result(d).server == pool.servers()[2].name


def test_reserve_timeout_when_every_server_is_down(cluster, pool):
    for i in range(3):
        take_down(cluster, i)
    d = pool.reserve(timeout=2)
    cluster.advance(1.9)
    assert not fired(d)
    cluster.advance(0.2)  # at the deadline, not 2 s (reserve_grace) later
    failure_of(cluster, d, TimedOut)


def test_connect_past_a_hung_server_leaves_no_unhandled_error():
    """connect() stops waiting for a server that does not settle after
    ``stall_timeout`` by cancelling its wait: that cancellation was left
    unconsumed, and logged as "Unhandled error in Deferred: CancelledError"
    whenever the garbage collector freed the pool (on PyPy, during some later
    test: a flaky failure of test_client_pool_wire)."""
    import gc
    from twisted.logger import globalLogPublisher
    unhandled = []

    def observe(event):
        failure = event.get("log_failure")
        if failure is not None or "Unhandled error" in str(event.get("log_format", "")):
            unhandled.append(event)
    globalLogPublisher.addObserver(observe)
    try:
        cluster = MemoryCluster(3)
        hang(cluster, 2)  # accepts the connection, never answers: never settles
        pool = cluster.pool()
        d = pool.connect()
        cluster.advance(1.9)
        assert not fired(d)
        cluster.advance(0.2)  # stall_timeout (2 s): connected to the two others
        assert cluster.result(d) is pool
        assert [s.state for s in pool.servers()] == ["up", "up", "connecting"]
        cluster.close()
        del cluster, pool, d
        for _ in range(3):
            gc.collect()
    finally:
        globalLogPublisher.removeObserver(observe)
    assert unhandled == []
