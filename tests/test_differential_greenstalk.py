"""Every command of the third-party client greenstalk, against ours and the reference.

greenstalk strips the YAML double quotes itself, so the same assertions hold for the
1.12 binary (bare strings) and for ours (1.13-style quoted strings).
"""
from __future__ import annotations

from typing import Iterator

import greenstalk
import pytest

from servers import RunningServer


@pytest.fixture
def client(any_server: RunningServer) -> Iterator[greenstalk.Client]:
    with greenstalk.Client(any_server.address) as c:
        yield c


def test_tubes_and_lists(client: greenstalk.Client) -> None:
    """use/using/watch/ignore/watching/tubes and NOT_IGNORED."""
    assert client.using() == "default"
    assert client.watching() == ["default"]
    assert client.tubes() == ["default"]
    client.use("jobs")
    assert client.using() == "jobs"
    assert client.watch("jobs") == 2
    assert client.watch("jobs") == 2
    assert client.watching() == ["default", "jobs"]
    assert client.ignore("default") == 1
    assert client.watching() == ["jobs"]
    with pytest.raises(greenstalk.NotIgnoredError):
        client.ignore("jobs")
    assert client.tubes() == ["default", "jobs"]
    with pytest.raises(greenstalk.BadFormatError):
        client.use("-bad")
    with pytest.raises(greenstalk.BadFormatError):
        client.watch("x" * 201)
    assert client.using() == "jobs"


def test_job_lifecycle(client: greenstalk.Client) -> None:
    """put, peek*, reserve, touch, release, bury, kick, kick_job, reserve_job, delete."""
    client.use("jobs")
    client.watch("jobs")
    client.ignore("default")
    first = client.put("hello", priority=10, ttr=30)
    second = client.put("world", priority=5)
    assert (first, second) == (1, 2)
    assert client.peek_ready().id == second
    assert client.peek(first).body == "hello"

    job = client.reserve(timeout=0)
    assert (job.id, job.body) == (second, "world")
    client.touch(job)
    client.release(job, priority=7, delay=100)
    delayed = client.peek_delayed()
    assert (delayed.id, delayed.body) == (second, "world")
    assert client.stats_job(second)["state"] == "delayed"
    assert client.kick(10) == 1

    job = client.reserve()
    assert job.id == second
    client.bury(job, priority=3)
    assert client.peek_buried().id == second
    client.kick_job(second)
    stats = client.stats_job(second)
    assert (stats["state"], stats["pri"], stats["kicks"], stats["buries"]) == \
        ("ready", 3, 2, 1)

    job = client.reserve_job(first)
    assert (job.id, job.body) == (first, "hello")
    client.delete(job)
    client.delete(second)
    with pytest.raises(greenstalk.TimedOutError):
        client.reserve(timeout=0)


def test_not_found_replies(client: greenstalk.Client) -> None:
    """Every command that can answer NOT_FOUND does so for a missing job or tube."""
    for call in (lambda: client.peek(99), client.peek_ready, client.peek_delayed,
                 client.peek_buried, lambda: client.kick_job(99),
                 lambda: client.stats_job(99), lambda: client.stats_tube("nosuch"),
                 lambda: client.delete(99), lambda: client.reserve_job(99),
                 lambda: client.pause_tube("nosuch", 1),
                 lambda: client.touch(greenstalk.Job(99, "")),
                 lambda: client.release(greenstalk.Job(99, "")),
                 lambda: client.bury(greenstalk.Job(99, ""))):
        with pytest.raises(greenstalk.NotFoundError):
            call()
    assert client.kick(5) == 0


def test_stats(client: greenstalk.Client) -> None:
    """stats, stats_tube, stats_job, pause_tube; string values come back unquoted."""
    client.use("jobs")
    jid = client.put("x", priority=1024, delay=0, ttr=0)
    client.pause_tube("jobs", 100)
    tube = client.stats_tube("jobs")
    assert tube["name"] == "jobs"
    assert (tube["current-jobs-ready"], tube["current-jobs-urgent"], tube["pause"],
            tube["cmd-pause-tube"], tube["current-using"]) == (1, 0, 100, 1, 1)
    job = client.stats_job(jid)
    assert (job["tube"], job["state"], job["pri"], job["ttr"]) == ("jobs", "ready", 1024, 1)
    stats = client.stats()
    assert (stats["cmd-put"], stats["total-jobs"], stats["current-tubes"],
            stats["cmd-pause-tube"], stats["max-job-size"]) == (1, 1, 2, 1, 65535)
    for key in ("version", "hostname", "os", "platform", "id"):
        assert isinstance(stats[key], str) and not stats[key].startswith('"'), key
    assert stats["draining"] == "false"


def test_errors_leave_connection_usable(client: greenstalk.Client) -> None:
    """JOB_TOO_BIG swallows the body; DEADLINE_SOON for a job in its last TTR second."""
    with pytest.raises(greenstalk.JobTooBigError):
        client.put("x" * 65536)
    assert client.put("y" * 65535) == 1
    assert client.reserve(timeout=0).body == "y" * 65535
    jid = client.put("z", ttr=1)
    job = client.reserve(timeout=0)
    assert job.id == jid
    with pytest.raises(greenstalk.DeadlineSoonError):
        client.reserve(timeout=0)
    client.delete(job)
    client.delete(1)


def test_bytes_bodies_between_two_clients(any_server: RunningServer) -> None:
    """encoding=None keeps binary bodies; a consumer on another connection gets them."""
    body = bytes(range(256)) + b"\r\n\r\nput 0 0 1 1\r\n"
    with greenstalk.Client(any_server.address, encoding=None, use="bin") as producer, \
            greenstalk.Client(any_server.address, encoding=None, watch="bin") as consumer:
        assert consumer.watching() == ["bin"]
        jid = producer.put(body)
        job = consumer.reserve(timeout=1)
        assert (job.id, job.body) == (jid, body)
        assert consumer.stats_job(job)["state"] == "reserved"
        with pytest.raises(greenstalk.NotFoundError):
            producer.delete(job)  # reserved by the consumer
        consumer.delete(job)
