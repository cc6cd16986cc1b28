"""The engine seam: outcomes, wake-ups after the command's own reply, rules in the engine.

In-process, on a Clock: the engine directly, and the wire protocol over
Twisted's string transports (to see the order of writes across connections).
A wrapper engine that answers every command with a Deferred shows that the
wire front end keeps replies in order when an engine answers later.
"""
from __future__ import annotations

from typing import Any, List

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from servers import RecordingFrontEnd
from toy_engine import ToyEngine
from twisted_stalk.core import MemoryEngine
from twisted_stalk.core import outcomes as o
from twisted_stalk.protocol.commands import COMMANDS, EXTENSION_COMMANDS
from twisted_stalk.protocol.replies import GENERIC_ERRORS
from twisted_stalk.engines import open_engine
from twisted_stalk.server import BeanstalkServerFactory


def test_every_outcome_is_a_reply_word_of_the_command_table():
    words = {pattern.split(" ")[0] for spec in COMMANDS + EXTENSION_COMMANDS
             for pattern in spec.replies} | set(GENERIC_ERRORS)
    assert set(o.OUTCOMES) - {"WAITING"} <= words


def test_the_engine_has_a_method_for_every_command():
    served_by_front_end = {"quit", "capabilities"}
    for spec in COMMANDS + EXTENSION_COMMANDS:
        if spec.name not in served_by_front_end:
            assert callable(getattr(MemoryEngine, spec.method)), spec.name


def _engine():
    clock = Clock()
    clock.advance(1000)
    return MemoryEngine(clock), clock


def test_wake_ups_are_queued_not_delivered_during_the_command():
    engine, _ = _engine()
    worker_frontend = RecordingFrontEnd()
    worker = engine.open_session(worker_frontend)
    producer = engine.open_session(RecordingFrontEnd())
    assert engine.reserve(worker) is o.WAITING
    job_id = engine.put(producer, 0, 0, 10, b"x\r\n")
    assert worker_frontend.events == []  # nothing called back into the worker
    [(session, job)] = engine.take_wakeups()
    assert session is worker and job.id == job_id
    assert engine.wakeups == []


def test_put_rules_live_in_the_engine():
    engine, _ = _engine()
    engine.max_memory = 10
    s = engine.open_session(RecordingFrontEnd())
    assert engine.put(s, 0, 0, 1, b"1234\r\n") == 1
    assert engine.put(s, 0, 0, 1, b"12345\r\n") is o.OUT_OF_MEMORY  # 6 + 7 > 10
    assert engine.put(s, 0, 0, 1, b"1234XX") is o.EXPECTED_CRLF
    engine.drain()
    assert engine.put(s, 0, 0, 1, b"1\r\n") is o.DRAINING
    assert engine.reject_put(s, o.JOB_TOO_BIG) is o.JOB_TOO_BIG
    # Every put took an id and was counted, refused or not (as beanstalkd).
    assert engine.next_id == 5 and engine.cmd_counts["put"] == 5
    assert engine.job_bytes == 6 and engine.producers == 1


def test_reserve_with_timeout_zero_reports_deadline_soon_over_paused_ready_jobs():
    """beanstalkd answers a zero timeout from its wait, where a reservation in
    its last second wins: DEADLINE_SOON, even with ready jobs in a paused tube."""
    engine, clock = _engine()
    s = engine.open_session(RecordingFrontEnd())
    engine.put(s, 0, 0, 1, b"x\r\n")
    engine.put(s, 0, 0, 60, b"y\r\n")
    assert engine.pause_tube(s, b"default", 3600) is o.PAUSED
    assert engine.reserve_job(s, 1).id == 1
    assert engine.reserve_with_timeout(s, 0) is o.DEADLINE_SOON


def test_closing_drops_unused_tubes_in_the_reference_order():
    engine, _ = _engine()
    a = engine.open_session(RecordingFrontEnd())
    b = engine.open_session(RecordingFrontEnd())
    engine.watch(a, b"a")
    engine.watch(a, b"b")
    for name in (b"c", b"d"):
        engine.use(b, name)
        engine.put(b, 0, 0, 10, b"x\r\n")
    engine.close_session(a)
    assert engine.list_tubes(b) == [b"default", b"c", b"d"]


class _Log:
    """Records every write of several transports, in order."""

    def __init__(self) -> None:
        self.writes: List[Any] = []

    def transport(self, name: str) -> StringTransport:
        t = StringTransport()
        log = self.writes
        original = t.write

        def write(data: bytes) -> None:
            log.append((name, data))
            original(data)

        t.write = write  # type: ignore[method-assign]
        return t


def _connect(factory, transport):
    proto = factory.buildProtocol(None)
    proto.makeConnection(transport)
    return proto


def _worker_and_producer():
    """Two connections of one server whose writes go to one log, in order."""
    clock = Clock()
    factory = BeanstalkServerFactory(clock, open_engine("memory:", clock))
    factory.direct_io = False
    log = _Log()
    worker = _connect(factory, log.transport("worker"))
    producer = _connect(factory, log.transport("producer"))
    return log, worker, producer


def test_the_producers_reply_goes_out_before_the_wake_up_it_caused():
    log, worker, producer = _worker_and_producer()
    worker.dataReceived(b"reserve\r\n")
    assert log.writes == []
    producer.dataReceived(b"put 0 0 10 2\r\nhi\r\n")
    assert log.writes == [("producer", b"INSERTED 1\r\n"),
                          ("worker", b"RESERVED 1 2\r\nhi\r\n")]


def test_a_woken_connection_then_runs_the_input_it_buffered():
    log, worker, producer = _worker_and_producer()
    worker.dataReceived(b"reserve\r\nlist-tube-used\r\n")
    producer.dataReceived(b"put 0 0 10 2\r\nhi\r\n")
    assert log.writes == [("producer", b"INSERTED 1\r\n"),
                          ("worker", b"RESERVED 1 2\r\nhi\r\n"),
                          ("worker", b"USING default\r\n")]


def test_a_long_pipelined_read_runs_a_turn_of_commands_then_lets_the_others_in():
    """64 kB of ``stats`` in one read used to run all 9,000 commands before any
    other client: a read runs TURN_COMMANDS commands a reactor turn, the rest
    (and what arrives meanwhile) on the next turns, replies in order."""
    from twisted_stalk.server.flow import TURN_COMMANDS
    log, greedy, other = _worker_and_producer()
    clock = greedy.factory.reactor
    greedy.dataReceived(b"list-tube-used\r\n" * (2 * TURN_COMMANDS + 5))
    assert [w for w in log.writes if w[0] == "worker"] == [
        ("worker", b"USING default\r\n" * TURN_COMMANDS)]
    greedy.dataReceived(b"use mine\r\n")  # arrives behind the rest, runs after it
    other.dataReceived(b"list-tube-used\r\n")  # not behind the greedy one's read
    assert log.writes[-1] == ("producer", b"USING default\r\n")
    clock.advance(0)
    clock.advance(0)
    clock.advance(0)
    replies = b"".join(data for name, data in log.writes if name == "worker")
    assert replies == b"USING default\r\n" * (2 * TURN_COMMANDS + 5) + b"USING mine\r\n"
    assert not clock.getDelayedCalls()


def test_a_front_end_keeps_replies_in_order_when_the_engine_answers_later():
    clock = Clock()
    engine = ToyEngine(clock)  # answers a turn of the clock later
    factory = BeanstalkServerFactory(clock, engine=engine)
    factory.direct_io = False
    t = StringTransport()
    proto = _connect(factory, t)
    proto.dataReceived(b"use jobs\r\nput 0 0 10 2\r\nhi\r\npeek 1\r\nlist-tube-used\r\n")
    assert t.value() == b""
    for _ in range(10):
        clock.advance(0.001)
    assert t.value() == (b"USING jobs\r\nINSERTED 1\r\nFOUND 1 2\r\nhi\r\n"
                         b"USING jobs\r\n")


def test_a_waiting_reserve_answered_later_still_wakes():
    clock = Clock()
    engine = ToyEngine(clock)  # answers a turn of the clock later
    factory = BeanstalkServerFactory(clock, engine=engine)
    factory.direct_io = False
    worker_t, producer_t = StringTransport(), StringTransport()
    worker = _connect(factory, worker_t)
    producer = _connect(factory, producer_t)
    worker.dataReceived(b"reserve\r\nlist-tube-used\r\n")
    clock.advance(0.001)  # WAITING arrives: still nothing to say
    assert worker_t.value() == b""
    producer.dataReceived(b"put 0 0 10 2\r\nhi\r\n")
    clock.advance(0.001)
    factory.after_input()  # an asynchronous engine's owner delivers its wake-ups
    assert producer_t.value() == b"INSERTED 1\r\n"
    for _ in range(3):
        clock.advance(0.001)
    assert worker_t.value() == b"RESERVED 1 2\r\nhi\r\nUSING default\r\n"


def test_replies_a_client_does_not_read_stop_its_input():
    """While more than MAX_UNSENT bytes of replies wait for a client, its
    further commands wait too (the transport pauses the protocol)."""
    from twisted_stalk.server.protocol import MAX_UNSENT
    clock = Clock()
    factory = BeanstalkServerFactory(clock, open_engine("memory:", clock))
    factory.direct_io = False
    t = StringTransport()
    proto = _connect(factory, t)
    proto.dataReceived(b"put 0 0 10 5000\r\n" + b"x" * 5000 + b"\r\n")
    t.clear()
    proto.pauseProducing()  # what a full transport does (above its bufferSize)
    proto.dataReceived(b"peek 1\r\n" * 100)
    assert t.value() == b""  # nothing run while stalled
    proto.resumeProducing()
    for _ in range(4):  # TURN_COMMANDS a reactor turn
        clock.advance(0)
    assert t.value().count(b"FOUND 1 5000") == 100
    assert MAX_UNSENT >= 64 * 1024
