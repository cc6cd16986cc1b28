"""BeanstalkProtocol against scripted bytes: StringTransport + Clock, no server."""
import pytest
from twisted.internet.defer import CancelledError
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from twisted_stalk.client import (
    BadFormat,
    BeanstalkProtocol,
    Buried,
    ClientClosed,
    ConnectionLost,
    DeadlineSoon,
    Draining,
    ExpectedCRLF,
    InternalError,
    InvalidArgument,
    Job,
    JobLost,
    JobTooBig,
    JSONCodec,
    NotFound,
    NotIgnored,
    OutOfMemory,
    ResponseTimeout,
    TimedOut,
    UnexpectedReply,
    UnknownCommand,
)


class Wire:
    def __init__(self, **settings):
        self.clock = Clock()
        self.proto = BeanstalkProtocol(self.clock, **settings)
        self.transport = StringTransport()
        self.proto.makeConnection(self.transport)

    def sent(self) -> bytes:
        data = self.transport.value()
        self.transport.clear()
        return data

    def reply(self, data: bytes) -> None:
        self.proto.dataReceived(data)

    def lose(self) -> None:
        self.proto.connectionLost(Failure(ConnectionDone("bye")))


def result(d):
    box = []

    def keep(r):
        box.append(r)
        return None if isinstance(r, Failure) else r
    d.addBoth(keep)
    assert box, f"{d!r} has not fired"
    if isinstance(box[0], Failure):
        box[0].raiseException()
    return box[0]


def error(d, cls):
    box = []
    d.addBoth(box.append)
    assert box, f"{d!r} has not fired"
    assert isinstance(box[0], Failure), f"fired with {box[0]!r}"
    assert box[0].check(cls), box[0]
    return box[0].value


@pytest.fixture
def w():
    return Wire()


# ----------------------------------------------------------------- encoding

@pytest.mark.parametrize("call, line", [
    (lambda p: p.put(b"hi", 5, 6, 7), b"put 5 6 7 2\r\nhi\r\n"),
    (lambda p: p.put("h\xe9"), b"put 2147483648 0 120 3\r\nh\xc3\xa9\r\n"),
    (lambda p: p.use("a"), b"use a\r\n"),
    (lambda p: p.reserve(), b"reserve\r\n"),
    (lambda p: p.reserve(0), b"reserve-with-timeout 0\r\n"),
    (lambda p: p.reserve_with_timeout(5), b"reserve-with-timeout 5\r\n"),
    (lambda p: p.reserve_job(3), b"reserve-job 3\r\n"),
    (lambda p: p.delete(3), b"delete 3\r\n"),
    (lambda p: p.release(3, 10, 20), b"release 3 10 20\r\n"),
    (lambda p: p.bury(3, 10), b"bury 3 10\r\n"),
    (lambda p: p.touch(3), b"touch 3\r\n"),
    (lambda p: p.watch("b"), b"watch b\r\n"),
    (lambda p: p.ignore("b"), b"ignore b\r\n"),
    (lambda p: p.peek(3), b"peek 3\r\n"),
    (lambda p: p.peek_ready(), b"peek-ready\r\n"),
    (lambda p: p.peek_delayed(), b"peek-delayed\r\n"),
    (lambda p: p.peek_buried(), b"peek-buried\r\n"),
    (lambda p: p.kick(10), b"kick 10\r\n"),
    (lambda p: p.kick_job(3), b"kick-job 3\r\n"),
    (lambda p: p.stats_job(3), b"stats-job 3\r\n"),
    (lambda p: p.stats_tube("a"), b"stats-tube a\r\n"),
    (lambda p: p.stats(), b"stats\r\n"),
    (lambda p: p.list_tubes(), b"list-tubes\r\n"),
    (lambda p: p.list_tube_used(), b"list-tube-used\r\n"),
    (lambda p: p.list_tubes_watched(), b"list-tubes-watched\r\n"),
    (lambda p: p.pause_tube("a", 9), b"pause-tube a 9\r\n"),
    (lambda p: p.quit(), b"quit\r\n"),
])
def test_command_lines(w, call, line):
    call(w.proto)
    assert w.sent() == line


def test_typed_results(w):
    p = w.proto
    ds = [p.put(b"x"), p.use("t"), p.watch("t"), p.ignore("default"), p.kick(5),
          p.kick_job(1), p.delete(1), p.release(2), p.bury(3), p.touch(4), p.pause_tube("t", 1),
          p.list_tube_used(), p.peek(8), p.stats_job(8), p.list_tubes()]
    stats = b"---\nid: 8\ntube: \"t\"\nstate: ready\npri: 5\nage: 0\n"
    w.reply(b"INSERTED 8\r\nUSING t\r\nWATCHING 2\r\nWATCHING 1\r\nKICKED 0\r\nKICKED\r\n"
            b"DELETED\r\nRELEASED\r\nBURIED\r\nTOUCHED\r\nPAUSED\r\nUSING t\r\n"
            b"FOUND 8 1\r\nx\r\nOK %d\r\n%s\r\nOK 14\r\n---\n- default\n\r\n"
            % (len(stats), stats))
    values = [result(d) for d in ds]
    assert values[:12] == [8, "t", 2, 1, 0, None, None, None, None, None, None, "t"]
    job = values[12]
    assert isinstance(job, Job) and job.id == 8 and job.body == b"x" and not job.reserved
    assert values[13] == {"id": 8, "tube": "t", "state": "ready", "pri": 5, "age": 0}
    assert values[14] == ["default"]
    assert p.pending == 0


@pytest.mark.parametrize("call, reply, cls", [
    (lambda p: p.put(b"x"), b"BURIED 4", Buried),
    (lambda p: p.put(b"x"), b"JOB_TOO_BIG", JobTooBig),
    (lambda p: p.put(b"x"), b"DRAINING", Draining),
    (lambda p: p.put(b"x"), b"EXPECTED_CRLF", ExpectedCRLF),
    (lambda p: p.reserve(), b"DEADLINE_SOON", DeadlineSoon),
    (lambda p: p.reserve(1), b"TIMED_OUT", TimedOut),
    (lambda p: p.delete(1), b"NOT_FOUND", NotFound),
    (lambda p: p.release(1), b"BURIED", Buried),
    (lambda p: p.ignore("default"), b"NOT_IGNORED", NotIgnored),
    (lambda p: p.peek_ready(), b"NOT_FOUND", NotFound),
    (lambda p: p.stats_tube("nope"), b"NOT_FOUND", NotFound),
    (lambda p: p.stats(), b"BAD_FORMAT", BadFormat),
    (lambda p: p.kick(1), b"UNKNOWN_COMMAND", UnknownCommand),
    (lambda p: p.put(b"x"), b"OUT_OF_MEMORY", OutOfMemory),
    (lambda p: p.delete(1), b"INTERNAL_ERROR", InternalError),
])
def test_error_replies(w, call, reply, cls):
    d = call(w.proto)
    d2 = w.proto.list_tube_used()
    w.reply(reply + b"\r\nUSING default\r\n")
    e = error(d, cls)
    if reply == b"BURIED 4":
        assert e.job_id == 4
    assert result(d2) == "default"  # the connection is fine after an error reply
    assert w.proto.connected


def test_replies_split_anywhere(w):
    p = w.proto
    ds = [p.put(b"a"), p.reserve(0), p.stats(), p.put(b"b")]
    data = (b"INSERTED 1\r\nRESERVED 1 5\r\nhe\r\no\r\nOK 25\r\n---\ncurrent-jobs-ready: 0"
            b"\r\nINSERTED 2\r\n")
    for i in range(len(data)):
        w.reply(data[i:i + 1])
    assert result(ds[0]) == 1
    job = result(ds[1])
    assert job.body == b"he\r\no" and job.reserved
    assert result(ds[2]) == {"current-jobs-ready": 0}
    assert result(ds[3]) == 2


def test_pipelining_in_order(w):
    ds = [w.proto.put(b"%d" % i) for i in range(100)]
    assert w.sent().count(b"put ") == 100
    w.reply(b"".join(b"INSERTED %d\r\n" % (i + 1) for i in range(100)))
    assert [result(d) for d in ds] == list(range(1, 101))


def test_large_body_in_chunks(w):
    d = w.proto.reserve()
    body = bytes(range(256)) * 4096
    data = b"RESERVED 1 %d\r\n%s\r\n" % (len(body), body)
    for i in range(0, len(data), 1000):
        w.reply(data[i:i + 1000])
    assert result(d).body == body


def test_codec():
    w = Wire(codec=JSONCodec())
    w.proto.put({"a": 1})
    assert w.sent() == b'put 2147483648 0 120 7\r\n{"a":1}\r\n'
    w.reply(b"INSERTED 1\r\n")
    d = w.proto.reserve()
    w.reply(b'RESERVED 1 7\r\n{"a":1}\r\n')
    assert result(d).value == {"a": 1}
    assert result(d).text == '{"a":1}'


# ---------------------------------------------------------------- targeting

def test_put_targets_tube_sending_use_only_when_needed(w):
    p = w.proto
    p.put(b"1", tube="a")
    p.put(b"2", tube="a")
    p.put(b"3", tube=b"b")
    p.put(b"4")
    p.peek_ready("b")
    assert w.sent() == (b"use a\r\nput 2147483648 0 120 1\r\n1\r\nput 2147483648 0 120 1\r\n2\r\n"
                        b"use b\r\nput 2147483648 0 120 1\r\n3\r\nput 2147483648 0 120 1\r\n4\r\n"
                        b"peek-ready\r\n")
    assert p.using == "b"


def test_reserve_targets_watch_list(w):
    p = w.proto
    first = p.reserve(0, watching=("a", "b"))
    assert w.sent() == b"watch a\r\nwatch b\r\nignore default\r\nreserve-with-timeout 0\r\n"
    w.reply(b"WATCHING 2\r\nWATCHING 3\r\nWATCHING 2\r\nTIMED_OUT\r\n")
    error(first, TimedOut)
    second = p.reserve(0, watching=("b", "a"))
    assert w.sent() == b"reserve-with-timeout 0\r\n"
    w.reply(b"TIMED_OUT\r\n")
    error(second, TimedOut)
    p.reserve(0, watching="c")
    assert w.sent() == (b"watch c\r\nignore a\r\nignore b\r\nreserve-with-timeout 0\r\n")
    assert p.watching == ("c",)


def test_internal_use_failure_drops(w):
    d = w.proto.put(b"x", tube="a")
    w.reply(b"BAD_FORMAT\r\n")
    error(d, ConnectionLost)
    assert w.transport.disconnecting


# ------------------------------------------------------- held / cancelling

def test_commands_behind_reserve_are_held(w):
    p = w.proto
    r = p.reserve()
    d1 = p.put(b"a")
    d2 = p.stats()
    assert w.sent() == b"reserve\r\n"
    assert p.blocked and p.pending == 3
    d2.cancel()
    error(d2, CancelledError)
    assert p.pending == 2 and w.proto.connected
    w.reply(b"RESERVED 5 1\r\nz\r\n")
    assert w.sent() == b"put 2147483648 0 120 1\r\na\r\n"
    assert result(r).id == 5
    w.reply(b"INSERTED 6\r\n")
    assert result(d1) == 6


def test_cancel_in_flight_drops_connection_after_the_calls_before_it(w):
    p = w.proto
    d1 = p.put(b"a")
    d2 = p.put(b"b")
    d3 = p.reserve()
    d4 = p.put(b"held")
    d2.cancel()
    error(d2, CancelledError)
    # put a was written first: it still gets its reply, then the connection closes.
    assert not d1.called and not w.transport.disconnecting and not p.usable
    w.reply(b"INSERTED 1\r\n")
    assert result(d1) == 1
    assert w.transport.disconnecting
    for d in (d3, d4):
        e = error(d, ConnectionLost)
        assert "cancelled while in flight" in str(e)
    assert not p.connected
    error(p.put(b"after"), ConnectionLost)


def test_cancel_at_the_head_drops_at_once(w):
    p = w.proto
    d1 = p.put(b"a")
    d2 = p.put(b"b")
    d1.cancel()
    error(d1, CancelledError)
    assert w.transport.disconnecting
    assert "cancelled while in flight" in str(error(d2, ConnectionLost))


def test_a_reserve_cancelled_behind_a_delete_lets_the_delete_finish(w):
    """A reserve connection reused while its last job's delete is in flight:
    cancelling the reserve (a worker stopping) must not lose the delete."""
    p = w.proto
    r = p.reserve()
    assert w.sent() == b"reserve\r\n"
    w.reply(b"RESERVED 7 1\r\nx\r\n")
    job = result(r)
    deleted = job.delete()
    r2 = p.reserve()
    assert w.sent() == b"delete 7\r\nreserve\r\n"
    r2.cancel()
    error(r2, CancelledError)
    assert not w.transport.disconnecting
    w.reply(b"DELETED\r\n")
    assert result(deleted) is None and job.finished == "deleted"
    assert w.transport.disconnecting and not job.lost


def test_cancel_reserve_in_flight(w):
    d = w.proto.reserve()
    d.cancel()
    error(d, CancelledError)
    assert w.transport.disconnecting


# ------------------------------------------------------------------ timeouts

def test_response_timeout():
    w = Wire(timeout=10)
    d1 = w.proto.put(b"a")
    d2 = w.proto.put(b"b")
    w.clock.advance(9.9)
    assert not d1.called
    w.clock.advance(0.1)
    e = error(d1, ResponseTimeout)
    assert "put" in str(e) and "10" in str(e)
    error(d2, ConnectionLost)
    assert w.transport.disconnected


def test_timeout_counts_from_when_a_call_reaches_the_head():
    w = Wire(timeout=10)
    w.proto.put(b"a")
    w.clock.advance(8)
    d2 = w.proto.put(b"b")
    w.clock.advance(1)
    w.reply(b"INSERTED 1\r\n")
    w.clock.advance(9.5)  # 18.5 s after the start, 9.5 s after d2 became the head
    assert not d2.called and w.proto.connected
    w.clock.advance(0.5)
    error(d2, ResponseTimeout)


def test_reserve_has_no_timeout_and_reserve_with_timeout_has_grace():
    w = Wire(timeout=10, reserve_grace=2)
    d = w.proto.reserve()
    w.clock.advance(10000)
    assert not d.called
    w.reply(b"RESERVED 1 0\r\n\r\n")
    assert result(d).body == b""
    d = w.proto.reserve(30)
    w.clock.advance(31.9)
    assert not d.called
    w.clock.advance(0.1)
    error(d, ResponseTimeout)


def test_timer_rearmed_after_reserve():
    w = Wire(timeout=10)
    r = w.proto.reserve(100)
    p = w.proto.put(b"x")  # held
    w.clock.advance(50)
    w.reply(b"TIMED_OUT\r\n")
    error(r, TimedOut)
    w.clock.advance(9)
    assert not p.called
    w.clock.advance(1)
    error(p, ResponseTimeout)
    assert not w.clock.getDelayedCalls()


def test_no_timer_left_after_replies(w):
    w.proto.put(b"a")
    w.reply(b"INSERTED 1\r\n")
    w.lose()
    assert not [c for c in w.clock.getDelayedCalls() if c.active()]


# ------------------------------------------------------- bad replies / loss

@pytest.mark.parametrize("data", [
    b"INSERTED x\r\n",
    b"DELETED\r\n",
    b"RESERVED 1 2\r\n",  # to a put
    b"INSERTED 1 extra\r\n",
    b"X" * 400,
])
def test_unexpected_reply_drops_connection(w, data):
    d1 = w.proto.put(b"a")
    d2 = w.proto.put(b"b")
    w.reply(data)
    e = error(d1, UnexpectedReply)
    assert repr(data[:20].rstrip(b"\r\n"))[2:-1] in str(e)
    assert "put" in str(e)
    error(d2, ConnectionLost)
    assert w.transport.disconnecting and not w.proto.connected


def test_reply_with_nothing_pending_drops(w):
    w.reply(b"INSERTED 1\r\n")
    assert w.transport.disconnecting


def test_body_without_crlf_drops(w):
    d = w.proto.reserve()
    w.reply(b"RESERVED 1 2\r\nabXY")
    error(d, UnexpectedReply)


def test_connection_lost_fails_everything_and_loses_jobs(w):
    p = w.proto
    r = p.reserve()
    w.reply(b"RESERVED 1 1\r\na\r\n")
    job = result(r)
    assert p.reserved_jobs == (job,)
    d1 = p.put(b"x")
    d2 = p.reserve()
    d3 = p.stats()  # held
    lost = p.when_lost()
    w.lose()
    for d in (d1, d2, d3):
        assert "bye" in str(error(d, ConnectionLost))
    assert job.lost
    error(job.delete(), JobLost)
    error(job.touch(), JobLost)
    assert result(lost) is None
    error(p.put(b"y"), ConnectionLost)


def test_job_methods_go_to_reserving_connection(w):
    r = w.proto.reserve()
    w.reply(b"RESERVED 4 1\r\na\r\n")
    job = result(r)
    w.sent()
    job.touch()
    job.stats()
    job.bury(7)
    assert w.sent() == b"touch 4\r\nstats-job 4\r\nbury 4 7\r\n"
    # not finished until the server says so; the connection no longer counts it
    assert job.finished is None and job.pending == "buried" and not w.proto.reserved_jobs
    stats = b"---\nid: 4\ntube: x\nstate: reserved\npri: 9\nttr: 60\n"
    w.reply(b"TOUCHED\r\nOK %d\r\n%s\r\nBURIED\r\n" % (len(stats), stats))
    assert job.finished == "buried" and job.pending is None
    assert (job.tube, job.priority, job.ttr) == ("x", 9, 60)


def test_disposal_lost_with_the_connection_is_not_finished(w):
    """A delete whose reply never came (the server crashed) is not counted
    as done: the job is lost, not deleted."""
    r = w.proto.reserve()
    w.reply(b"RESERVED 4 1\r\na\r\n")
    job = result(r)
    d = job.delete()
    w.lose()
    error(d, ConnectionLost)
    assert job.finished is None and job.lost and job.pending is None


def test_quit(w):
    d0 = w.proto.put(b"x")
    d = w.proto.quit()
    assert w.sent().endswith(b"quit\r\n")
    error(w.proto.put(b"y"), ClientClosed)
    w.reply(b"INSERTED 1\r\n")
    assert result(d0) == 1
    assert not d.called
    w.lose()
    assert result(d) is None


def test_quit_is_held_behind_reserve(w):
    d = w.proto.reserve()
    w.proto.quit()
    assert w.sent() == b"reserve\r\n"
    w.reply(b"TIMED_OUT\r\n")
    error(d, TimedOut)
    assert w.sent() == b"quit\r\n"


# ---------------------------------------------------------------- validation

@pytest.mark.parametrize("call", [
    lambda p: p.put(b"x", priority=2**32),
    lambda p: p.put(b"x", priority=-1),
    lambda p: p.put(b"x", priority=True),
    lambda p: p.put(b"x", priority=1.5),
    lambda p: p.put(b"x", delay=-1),
    lambda p: p.put(b"x", ttr=2**32),
    lambda p: p.put(b"x", ttr="10"),
    lambda p: p.put(b"x" * 65536),
    lambda p: p.put(12),
    lambda p: p.put(b"x", tube="-bad"),
    lambda p: p.put(b"x", tube="a" * 201),
    lambda p: p.put(b"x", tube=""),
    lambda p: p.put(b"x", tube="sp ace"),
    lambda p: p.put(b"x", tube="caf\xe9"),
    lambda p: p.put(b"x", tube=b"new\nline"),
    lambda p: p.use("a b"),
    lambda p: p.watch(""),
    lambda p: p.ignore("#"),
    lambda p: p.stats_tube("-x"),
    lambda p: p.pause_tube("x", -1),
    lambda p: p.reserve(-1),
    lambda p: p.reserve(2**31),
    lambda p: p.reserve(watching=()),
    lambda p: p.reserve(watching=("ok", "no!")),
    lambda p: p.delete(-1),
    lambda p: p.delete(2**64),
    lambda p: p.delete("1"),
    lambda p: p.release(1, priority=2**32),
    lambda p: p.release(1, delay=-5),
    lambda p: p.bury(1, priority=-1),
    lambda p: p.kick(-1),
    lambda p: p.peek(None),
])
def test_validation_sends_nothing(w, call):
    e = error(call(w.proto), InvalidArgument)
    assert isinstance(e, ValueError) and str(e)
    assert w.sent() == b""
    assert w.proto.pending == 0 and w.proto.connected


def test_max_job_size_setting():
    w = Wire(max_job_size=None)
    w.proto.put(b"x" * 70000)
    assert len(w.sent()) > 70000
    w = Wire(max_job_size=10)
    e = error(w.proto.put(b"x" * 11), InvalidArgument)
    assert "11 bytes" in str(e) and "10" in str(e)


# ------------------------------------------------------ any chunking (fuzz)

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_STATS = b"---\nid: 3\nstate: ready\n"
CASES = [
    (lambda p: p.put(b"a"), b"INSERTED 3\r\n", 3),
    (lambda p: p.reserve(), b"RESERVED 3 4\r\nab\r\n\r\n", (3, b"ab\r\n")),
    (lambda p: p.peek(3), b"FOUND 3 0\r\n\r\n", (3, b"")),
    (lambda p: p.stats_job(3), b"OK %d\r\n%s\r\n" % (len(_STATS), _STATS),
     {"id": 3, "state": "ready"}),
    (lambda p: p.delete(3), b"NOT_FOUND\r\n", NotFound),
    (lambda p: p.kick(3), b"KICKED 2\r\n", 2),
    (lambda p: p.bury(3), b"BURIED\r\n", None),
    (lambda p: p.release(3), b"BURIED\r\n", Buried),
    (lambda p: p.list_tubes(), b"OK 14\r\n---\n- default\n\r\n", ["default"]),
    (lambda p: p.reserve(0), b"TIMED_OUT\r\n", TimedOut),
]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, len(CASES) - 1), min_size=1, max_size=15), st.data())
def test_any_chunking(indices, data):
    w = Wire()
    ds = [CASES[i][0](w.proto) for i in indices]
    stream = b"".join(CASES[i][1] for i in indices)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    for start, stop in zip([0] + cuts, cuts + [len(stream)]):
        w.reply(stream[start:stop])
    for d, i in zip(ds, indices):
        expected = CASES[i][2]
        if isinstance(expected, type):
            error(d, expected)
            continue
        value = result(d)
        if isinstance(value, Job):
            value = (value.id, value.body)
        assert value == expected
    assert w.proto.pending == 0 and w.proto.connected
