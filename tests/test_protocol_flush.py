"""The peek-and-delete flush (twisted_stalk.protocol.flush), driven here by a
model of a tube that producers and workers share with it."""
from __future__ import annotations

from typing import Dict, List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twisted_stalk.protocol.commands import encode_command
from twisted_stalk.protocol.flush import PeekDeleteFlush, flush_budgets
from twisted_stalk.protocol.reader import ReplyReader
from twisted_stalk.protocol.replies import InternalError, ReplyOutOfStep


class Tube:
    """A tube's ready/delayed/buried queues.  ``before_delete`` runs before
    each delete is served: other clients acting between a peek and a delete."""

    def __init__(self, **counts: int) -> None:
        self.next_id = 1
        self.jobs: Dict[str, List[int]] = {}
        for state in ("ready", "delayed", "buried"):
            self.jobs[state] = []
            for _ in range(counts.get(state, 0)):
                self.add(state)
        self.before_delete = lambda job_id: None
        self.sent: List[bytes] = []

    def add(self, state: str, first: bool = False) -> int:
        job_id = self.next_id
        self.next_id += 1
        self.jobs[state].insert(0 if first else len(self.jobs[state]), job_id)
        return job_id

    def take(self, job_id: int) -> None:
        for queue in self.jobs.values():
            if job_id in queue:
                queue.remove(job_id)

    def serve(self, data: bytes) -> bytes:
        self.sent.append(data)
        line = data.rstrip(b"\r\n").decode()
        if line.startswith("peek-"):
            queue = self.jobs[line[5:]]
            return b"FOUND %d 1\r\nx\r\n" % queue[0] if queue else b"NOT_FOUND\r\n"
        job_id = int(line.split()[1])
        self.before_delete(job_id)
        for queue in self.jobs.values():
            if job_id in queue:
                queue.remove(job_id)
                return b"DELETED\r\n"
        return b"NOT_FOUND\r\n"

    def flush(self, states=("ready", "delayed", "buried"), budgets=None):
        """Drive the flush as the client and the shell do: send each batch
        together, read its replies with a ReplyReader."""
        counts = {s: len(q) for s, q in self.jobs.items()}
        stats = {f"current-jobs-{s}": n for s, n in counts.items()}
        flush = PeekDeleteFlush(states, budgets or flush_budgets(stats, states))
        reader = ReplyReader()
        steps = flush.steps()
        batches = []
        try:
            batch = next(steps)
            while True:
                batches.append(batch)
                data = b""
                for cmd in batch:
                    reader.expect(cmd[0])
                    data += self.serve(encode_command(*cmd))
                batch = steps.send(reader.feed(data))
        except StopIteration as stop:
            assert stop.value == flush.total
        return flush, batches


def test_flushes_each_state_pipelining_delete_and_peek():
    tube = Tube(ready=3, buried=1)
    flush, batches = tube.flush()
    assert flush.deleted == {"ready": 3, "delayed": 0, "buried": 1} and not flush.gave_up
    assert tube.jobs == {"ready": [], "delayed": [], "buried": []}
    assert batches == [[("peek-ready",)], [("delete", 1), ("peek-ready",)],
                       [("delete", 2), ("peek-ready",)], [("delete", 3)],
                       [("peek-buried",)], [("delete", 4)]]


def test_at_most_the_count_at_the_start():
    tube = Tube(ready=2)
    # a producer puts an urgent job before every delete
    tube.before_delete = lambda job_id: tube.add("ready", first=True)
    flush, _ = tube.flush(("ready",))
    assert flush.deleted == {"ready": 2} and len(tube.jobs["ready"]) == 2


def test_the_same_job_failing_twice_gives_up():
    tube = Tube(ready=3)
    serve = tube.serve

    def job_1_is_always_held(data):
        # a worker holds job 1 at each delete and releases it before each peek
        return b"NOT_FOUND\r\n" if data == b"delete 1\r\n" else serve(data)
    tube.serve = job_1_is_always_held
    flush, _ = tube.flush(("ready",))
    assert flush.deleted == {"ready": 0}
    assert flush.gave_up == {"ready": "job 1 could not be deleted (NOT_FOUND)"}


def test_more_failures_than_the_budget_gives_up():
    tube = Tube(ready=2)

    def worker_takes(job_id):
        tube.take(job_id)        # a worker reserves the job we peeked at
        tube.add("ready")        # and a producer keeps the tube busy
    tube.before_delete = worker_takes
    flush, batches = tube.flush(("ready",))
    assert flush.deleted == {"ready": 0}
    assert "after 3 failed deletes" in flush.gave_up["ready"]
    assert sum(1 for b in batches for c in b if c[0] == "peek-ready") <= 2 * 2 + 1


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 6), st.lists(st.sampled_from(["none", "take", "put", "both"]),
                                   max_size=60))
def test_always_bounded(ready, behaviour):
    """Whatever others do, a state costs at most 2 * budget + 1 peeks, and
    at most budget jobs are deleted."""
    tube = Tube(ready=ready)
    acts = iter(behaviour)

    def others(job_id):
        act = next(acts, "none")
        if act in ("take", "both"):
            tube.take(job_id)
        if act in ("put", "both"):
            tube.add("ready", first=True)
    tube.before_delete = others
    flush, batches = tube.flush(("ready",))
    peeks = sum(1 for b in batches for c in b if c[0] == "peek-ready")
    assert flush.deleted["ready"] <= ready
    assert peeks <= 2 * ready + 1


def test_other_errors_raise_and_nothing_is_sent_for_empty_states():
    tube = Tube(ready=1)
    tube.serve = lambda data: b"INTERNAL_ERROR\r\n"
    with pytest.raises(InternalError):
        tube.flush(("ready",))
    flush, batches = Tube().flush()
    assert batches == [] and flush.total == 0
    with pytest.raises(ValueError):
        PeekDeleteFlush(("reserved",), {"reserved": 1})


def test_a_line_that_is_no_reply_raises():
    flush = PeekDeleteFlush(("ready",), {"ready": 1})
    steps = flush.steps()
    next(steps)
    reader = ReplyReader(lenient=True)
    reader.expect("peek-ready")
    with pytest.raises(ReplyOutOfStep):
        steps.send(reader.feed(b"DELETED\r\n"))


def test_budgets_from_stats():
    stats = {"current-jobs-ready": 4, "current-jobs-delayed": "x", "name": "t"}
    assert flush_budgets(stats, ("ready", "delayed", "buried")) == {
        "ready": 4, "delayed": 0, "buried": 0}
