"""Worker outcomes, in memory with a Clock."""
import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater

from twisted_stalk.client import Retry, Worker, exponential_backoff
from twisted_stalk.testing import MemoryBeanstalk


@pytest.fixture
def server():
    s = MemoryBeanstalk()
    yield s
    s.close()


@pytest.fixture
def client(server):
    return server.client()


def put_all(server, client, bodies, tube="jobs", **kw):
    return [server.result(client.tube(tube).put(b, **kw)) for b in bodies]


def fired(d):
    box = []
    d.addBoth(lambda r: (box.append(r), r)[1])
    return bool(box)


def test_success_deletes(server, client):
    seen = []
    worker = Worker(client, lambda job: seen.append(job.body), tubes=["jobs"])
    worker.start()
    put_all(server, client, [b"a", b"b", b"c"])
    server.flush()
    assert seen == [b"a", b"b", b"c"]
    assert worker.stats.deleted == 3 and worker.stats.reserved == 3
    assert server.stats()["total-jobs"] == 3 and server.stats()["current-jobs-ready"] == 0
    assert server.stats()["cmd-delete"] == 3
    server.result(worker.stop())
    assert not worker.running


def test_error_buries(server, client):
    def handler(job):
        raise ValueError("bad job")
    worker = Worker(client, handler, tubes=["jobs"], touch=False)
    worker.start()
    [job_id] = put_all(server, client, [b"x"])
    server.flush()
    assert worker.stats.buried == 1
    assert server.stats_job(job_id)["state"] == "buried"
    server.result(worker.stop())


def test_retry_releases_with_backoff_then_buries(server, client):
    attempts = []

    def handler(job):
        attempts.append(server.clock.seconds())
        raise Retry("try later")
    worker = Worker(client, handler, tubes=["jobs"], max_retries=2,
                    retry_delay=exponential_backoff(base=10, factor=2))
    worker.start()
    [job_id] = put_all(server, client, [b"x"])
    server.flush()
    assert worker.stats.released == 1
    assert server.stats_job(job_id)["state"] == "delayed"
    assert server.stats_job(job_id)["delay"] == 10
    server.advance(10)
    assert worker.stats.released == 2
    assert server.stats_job(job_id)["delay"] == 20
    server.advance(20)
    assert worker.stats.buried == 1  # third attempt: more than max_retries
    assert server.stats_job(job_id)["state"] == "buried"
    assert attempts == [0, 10, 30]
    server.result(worker.stop())


def test_retry_with_explicit_delay_and_custom_retryable(server, client):
    def handler(job):
        if job.body == b"a":
            raise Retry(delay=7)
        raise ConnectionError("flaky")
    worker = Worker(client, handler, tubes=["jobs"],
                    retryable=lambda e: isinstance(e, (Retry, ConnectionError)),
                    retry_delay=lambda attempt: 3)
    worker.start()
    a, b = put_all(server, client, [b"a", b"b"])
    server.flush()
    assert server.stats_job(a)["delay"] == 7
    assert server.stats_job(b)["delay"] == 3
    assert worker.stats.released == 2
    server.result(worker.stop())


def test_handler_may_dispose_of_the_job(server, client):
    async def handler(job):
        await job.bury(5)
    worker = Worker(client, handler, tubes=["jobs"])
    worker.start()
    [job_id] = put_all(server, client, [b"x"])
    server.flush()
    assert worker.stats.self_disposed == 1 and worker.stats.deleted == 0
    assert server.stats_job(job_id)["state"] == "buried"
    server.result(worker.stop())


def test_coroutine_and_deferred_handlers_with_concurrency_limit(server, client):
    running = []
    peak = []

    async def handler(job):
        running.append(job.id)
        peak.append(len(running))
        await deferLater(server.clock, 10, lambda: None)
        running.remove(job.id)
    worker = Worker(client, handler, tubes=["jobs"], concurrency=3)
    worker.start()
    put_all(server, client, [b"%d" % i for i in range(7)])
    server.flush()
    assert len(running) == 3
    server.advance(10)
    assert len(running) == 3
    server.advance(20)
    assert running == [] and max(peak) == 3
    assert worker.stats.deleted == 7
    assert server.stats()["current-jobs-ready"] == 0
    server.result(worker.stop())


def test_touches_long_jobs_before_the_deadline(server, client):
    done = []

    def handler(job):
        return deferLater(server.clock, 30, lambda: done.append(job.id))
    worker = Worker(client, handler, tubes=["jobs"], touch_margin=2)
    worker.start()
    [job_id] = put_all(server, client, [b"slow"], ttr=5)
    server.advance(31, step=0.5)
    assert done == [job_id]
    assert worker.stats.touched >= 8
    assert worker.stats.deleted == 1
    stats = server.stats()
    assert stats["job-timeouts"] == 0 and stats["current-jobs-ready"] == 0
    server.result(worker.stop())


def test_without_touch_a_long_job_times_out(server, client):
    def handler(job):
        return deferLater(server.clock, 30, lambda: None)
    worker = Worker(client, handler, tubes=["jobs"], touch=False, concurrency=1)
    worker.start()
    put_all(server, client, [b"slow"], ttr=5)
    server.advance(6)
    assert server.stats()["job-timeouts"] == 1
    stopped = worker.stop(timeout=1)
    server.advance(1)
    assert server.result(stopped) is None


def test_lost_job(server, client):
    gate = Deferred()
    worker = Worker(client, lambda job: gate, tubes=["jobs"], error_backoff=1)
    worker.start()
    put_all(server, client, [b"x"])
    server.flush()
    assert len(worker.jobs_in_hand) == 1
    server.drop_connections()
    gate.callback(None)
    server.flush()
    assert worker.stats.lost == 1 and worker.stats.deleted == 0
    server.advance(2)  # reconnects and gets the job again
    assert worker.stats.reserved == 2 and worker.stats.deleted == 1
    server.result(worker.stop())


def test_graceful_stop_finishes_jobs_in_hand(server, client):
    gate = Deferred()
    worker = Worker(client, lambda job: gate, tubes=["jobs"], concurrency=2)
    worker.start()
    [job_id] = put_all(server, client, [b"x"])
    server.flush()
    stopped = worker.stop()
    server.flush()
    assert not fired(stopped)
    assert server.stats()["current-waiting"] == 0  # the idle reserve was cancelled
    gate.callback(None)
    assert server.result(stopped) is None
    assert worker.stats.deleted == 1
    assert server.stats_job(job_id) == {}
    put_all(server, client, [b"y"])
    server.flush()
    assert worker.stats.reserved == 1  # nothing reserved after stop


def test_stop_timeout_releases_jobs_in_hand(server, client):
    never = Deferred()
    worker = Worker(client, lambda job: never, tubes=["jobs"])
    worker.start()
    [job_id] = put_all(server, client, [b"x"])
    server.flush()
    stopped = worker.stop(timeout=5)
    server.advance(4)
    assert not fired(stopped)
    server.advance(1)
    assert server.result(stopped) is None
    assert server.stats_job(job_id)["state"] == "ready"
    assert worker.stats.released == 1
    never.callback(None)  # a late handler result is ignored
    server.flush()
    assert worker.stats.deleted == 0
    assert server.stats_job(job_id)["state"] == "ready"


def test_reserve_with_timeout_loop(server, client):
    worker = Worker(client, lambda job: None, tubes=["jobs"], reserve_timeout=1)
    worker.start()
    server.advance(5)
    put_all(server, client, [b"x"])
    server.advance(1)
    assert worker.stats.deleted == 1
    server.result(worker.stop())
    assert server.stats()["cmd-reserve-with-timeout"] >= 5


def test_quick_handlers_cost_no_extra_round_trip(server, client):
    worker = Worker(client, lambda job: None, tubes=["jobs"])
    worker.start()
    put_all(server, client, [b"%d" % i for i in range(5)])
    server.advance(1)
    assert worker.stats.deleted == 5
    assert server.stats()["cmd-stats-job"] == 0 and server.stats()["cmd-touch"] == 0
    server.result(worker.stop())


def test_ttr_one_second_job_is_kept(server, client):
    worker = Worker(client, lambda job: deferLater(server.clock, 3, lambda: None),
                    tubes=["jobs"])
    worker.start()
    put_all(server, client, [b"x"], ttr=1)
    server.advance(4, step=0.05)
    assert worker.stats.deleted == 1 and worker.stats.touched >= 3
    assert server.stats()["job-timeouts"] == 0
    server.result(worker.stop())


# ------------------------------------------------------- counts and outcomes

def test_attempts_count_releases_not_ttr_expiries(server, client):
    """A run that ended because the TTR ran out is not a retry: the attempt
    number is the job's releases + 1 (it used to be its reserves)."""
    runs = []

    def handler(job):
        runs.append(server.clock.seconds())
        if len(runs) == 1:  # hangs past its TTR (no touching): the server takes it back
            return Deferred()
        raise Retry(delay=1)
    worker = Worker(client, handler, tubes=["jobs"], touch=False, max_retries=1, concurrency=2)
    worker.start()
    [job_id] = put_all(server, client, [b"x"], ttr=1)
    server.advance(5)
    assert runs == [0, 1, 2]  # the expired run, then max_retries + 1 = 2 counted attempts
    assert server.stats_job(job_id)["reserves"] == 3
    assert worker.stats.released == 1 and worker.stats.buried == 1
    assert server.stats_job(job_id)["state"] == "buried"
    server.result(worker.stop(timeout=0))


def test_deleted_is_counted_when_the_server_confirms(server, client):
    gates = [Deferred(), Deferred()]
    worker = Worker(client, lambda job: gates[int(job.body)], tubes=["jobs"], concurrency=2)
    worker.start()
    put_all(server, client, [b"0", b"1"])
    server.flush()
    job0, job1 = sorted(worker.jobs_in_hand, key=lambda j: j.body)
    gates[0].callback(None)  # the delete is written, not answered yet
    assert worker.stats.deleted == 0 and job0.pending == "deleted" and job0.finished is None
    server.flush()
    assert worker.stats.deleted == 1 and job0.finished == "deleted"
    gates[1].callback(None)
    job1._proto.drop("the server crashed")  # before the reply came
    server.flush()
    assert worker.stats.deleted == 1 and worker.stats.lost == 1 and job1.lost
    server.result(worker.stop())


def test_one_handler_per_tube(server, client):
    seen = []
    worker = Worker(client, {"mail": lambda job: seen.append(("mail", job.body, job.tube))})
    worker.register("thumbs", lambda job: seen.append(("thumbs", job.body, job.tube)))
    assert worker.tubes == ("mail", "thumbs")
    worker.start()
    put_all(server, client, [b"m1"], tube="mail")
    put_all(server, client, [b"t1"], tube="thumbs")
    put_all(server, client, [b"m2"], tube="mail")
    server.flush()
    assert sorted(seen) == [("mail", b"m1", "mail"), ("mail", b"m2", "mail"),
                            ("thumbs", b"t1", "thumbs")]
    assert worker.stats.deleted == 3
    server.result(worker.stop())


def test_single_tube_reserve_knows_the_tube(server, client):
    put_all(server, client, [b"x"], tube="mail")
    job = server.result(client.watching("mail").reserve(timeout=0))
    assert job.tube == "mail" and job.priority is None and job.ttr is None
    server.result(job.stats())
    assert (job.tube, job.priority, job.ttr) == ("mail", 2**31, 120)


def test_handler_timeout_cancels_and_retries(server, client):
    from twisted_stalk.client import HandlerTimeout
    cancelled = []
    retried = []

    def handler(job):
        return Deferred(lambda d: cancelled.append(job.id))  # hangs
    worker = Worker(client, handler, tubes=["jobs"], handler_timeout=5,
                    retry_delay=lambda attempt: 60,
                    on_retry=lambda job, error, delay: retried.append((job.id, error, delay)))
    worker.start()
    [job_id] = put_all(server, client, [b"x"], ttr=2)
    server.advance(4.9, step=0.5)
    assert not cancelled and worker.stats.touched >= 1  # touched meanwhile
    server.advance(0.2)
    assert cancelled == [job_id] and worker.stats.timeouts == 1
    assert worker.stats.released == 1
    [(rid, error, delay)] = retried
    assert rid == job_id and isinstance(error, HandlerTimeout) and delay == 60
    assert server.stats_job(job_id)["state"] == "delayed"
    server.result(worker.stop())


def test_bury_and_lost_hooks(server, client):
    buried, lost = [], []
    gate = Deferred()

    def handler(job):
        if job.body == b"bad":
            raise ValueError("no")
        return gate
    worker = Worker(client, handler, tubes=["jobs"], concurrency=2,
                    on_bury=lambda job, error: buried.append((job.body, type(error))),
                    on_lost=lambda job, why: lost.append((job.body, why)))
    worker.start()
    put_all(server, client, [b"bad", b"slow"])
    server.flush()
    assert buried == [(b"bad", ValueError)]
    server.drop_connections()
    gate.callback(None)
    server.flush()
    assert [body for body, _ in lost] == [b"slow"] and lost[0][1]
    server.result(worker.stop())
