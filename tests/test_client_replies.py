"""Reply decoding shared by the client and the shell (twisted_stalk.protocol.replies)."""
import subprocess
import sys

import pytest

from twisted_stalk.protocol import BY_NAME
from twisted_stalk.protocol.replies import (
    ERRORS,
    BadFormat,
    Buried,
    DeadlineSoon,
    Draining,
    ExpectedCRLF,
    InternalError,
    JobTooBig,
    NotFound,
    NotIgnored,
    OutOfMemory,
    ReplyError,
    TimedOut,
    ReplyOutOfStep,
    UnknownCommand,
    decode_body,
    decode_reply,
    success_reply,
)


def test_no_twisted_import():
    code = ("import sys, twisted_stalk.protocol.replies; "
            "assert 'twisted' not in sys.modules, 'twisted imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("command, line, value", [
    ("put", b"INSERTED 7", 7),
    ("use", b"USING emails", "emails"),
    ("watch", b"WATCHING 3", 3),
    ("ignore", b"WATCHING 1", 1),
    ("kick", b"KICKED 12", 12),
    ("kick-job", b"KICKED", None),
    ("delete", b"DELETED", None),
    ("release", b"RELEASED", None),
    ("bury", b"BURIED", None),
    ("touch", b"TOUCHED", None),
    ("pause-tube", b"PAUSED", None),
    ("list-tube-used", b"USING a-b+c/d;e.f$g_h(i)", "a-b+c/d;e.f$g_h(i)"),
])
def test_success_without_body(command, line, value):
    reply = decode_reply(command, line)
    assert reply.ok and not reply.has_body
    assert decode_body(command, reply) == value


def test_every_command_has_a_success_reply():
    for name, spec in BY_NAME.items():
        if name == "quit":
            assert success_reply(spec) is None
            continue
        pattern = success_reply(spec)
        word = pattern.split()[0]
        fields = {"<id>": "5", "<bytes>": "3", "<count>": "2", "<tube>": "t"}
        line = " ".join([word] + [fields[a] for a in pattern.split()[1:]]).encode()
        assert decode_reply(spec, line).ok, name


@pytest.mark.parametrize("command", ["reserve", "reserve-with-timeout", "reserve-job"])
def test_reserved_has_body(command):
    reply = decode_reply(command, b"RESERVED 3 5")
    assert reply.ok and reply.job_id == 3 and reply.body_length == 5
    assert decode_body(command, reply, b"hello") == (3, b"hello")


@pytest.mark.parametrize("command", ["peek", "peek-ready", "peek-delayed", "peek-buried"])
def test_found(command):
    reply = decode_reply(command, b"FOUND 9 0")
    assert reply.ok and reply.body_length == 0
    assert decode_body(command, reply, b"") == (9, b"")


def test_stats_bodies():
    body = b'---\nid: 9\ntube: "default"\nstate: ready\npri: 10\n'
    reply = decode_reply("stats-job", b"OK %d" % len(body))
    assert reply.body_length == len(body)
    assert decode_body("stats-job", reply, body) == {
        "id": 9, "tube": "default", "state": "ready", "pri": 10}
    server = b'---\ncurrent-jobs-ready: 0\nrusage-utime: 0.012000\ndraining: false\nid: 0123\n'
    stats = decode_body("stats", decode_reply("stats", b"OK %d" % len(server)), server)
    assert stats == {"current-jobs-ready": 0, "rusage-utime": 0.012, "draining": False,
                     "id": "0123"}
    tubes = b"---\n- default\n- emails\n"
    assert decode_body("list-tubes", decode_reply("list-tubes", b"OK 23"), tubes) == [
        "default", "emails"]


def test_ambiguous_words_depend_on_the_command():
    put = decode_reply("put", b"BURIED 12")
    assert not put.ok and put.job_id == 12
    error = put.error()
    assert isinstance(error, Buried) and error.job_id == 12
    release = decode_reply("release", b"BURIED")
    assert not release.ok and isinstance(release.error(), Buried)
    assert release.error().job_id is None
    assert decode_reply("bury", b"BURIED").ok
    assert decode_reply("kick", b"KICKED 2").number == 2
    assert decode_reply("kick-job", b"KICKED").ok
    with pytest.raises(ReplyOutOfStep):
        decode_reply("kick", b"KICKED")
    with pytest.raises(ReplyOutOfStep):
        decode_reply("kick-job", b"KICKED 2")
    with pytest.raises(ReplyOutOfStep):
        decode_reply("bury", b"BURIED 3")
    with pytest.raises(ReplyOutOfStep):
        decode_reply("put", b"BURIED")


@pytest.mark.parametrize("command, word, cls", [
    ("delete", "NOT_FOUND", NotFound),
    ("reserve", "DEADLINE_SOON", DeadlineSoon),
    ("reserve-with-timeout", "TIMED_OUT", TimedOut),
    ("put", "DRAINING", Draining),
    ("put", "JOB_TOO_BIG", JobTooBig),
    ("put", "EXPECTED_CRLF", ExpectedCRLF),
    ("ignore", "NOT_IGNORED", NotIgnored),
    ("stats", "BAD_FORMAT", BadFormat),
    ("use", "UNKNOWN_COMMAND", UnknownCommand),
    ("touch", "OUT_OF_MEMORY", OutOfMemory),
    ("list-tubes", "INTERNAL_ERROR", InternalError),
])
def test_error_classes(command, word, cls):
    reply = decode_reply(command, word.encode())
    assert not reply.ok
    error = reply.error()
    assert type(error) is cls and isinstance(error, ReplyError)
    assert error.command == command and error.reply == word.encode()
    assert ERRORS[word] is cls
    assert word in str(error)


@pytest.mark.parametrize("command, line", [
    ("put", b"INSERTED"),
    ("put", b"INSERTED x"),
    ("put", b"INSERTED -1"),
    ("put", b"INSERTED 1 2"),
    ("put", b"NOT_FOUND"),
    ("put", b"TIMED_OUT"),
    ("reserve", b"RESERVED 1"),
    ("reserve", b"FOUND 1 2"),
    ("peek", b"RESERVED 1 2"),
    ("use", b"USING -bad"),
    ("use", b"USING"),
    ("delete", b"deleted"),
    ("delete", b"DELETED "),
    ("stats", b"OK 99999999999"),
    ("watch", b""),
    ("ignore", b"NOT_IGNORED 1"),
])
def test_unexpected(command, line):
    with pytest.raises(ReplyOutOfStep) as info:
        decode_reply(command, line)
    assert repr(line)[2:-1] in str(info.value) or line == b""
    assert info.value.command == command and info.value.line == line


def test_reply_error_on_success_reply():
    with pytest.raises(ValueError):
        decode_reply("put", b"INSERTED 1").error()


# ------------------------------------------- stats typed by key, not by look

# Bodies as beanstalkd 1.12 prints them: strings bare, so they can look like numbers.
STATS_TUBE_112 = (b"---\nname: 007\ncurrent-jobs-urgent: 0\ncurrent-jobs-ready: 1\n"
                  b"pause: 0\npause-time-left: 0\n")
STATS_JOB_112 = (b"---\nid: 5\ntube: 1.5\nstate: ready\npri: 1024\nage: 3\ndelay: 0\n"
                 b"ttr: 60\ntime-left: 0\nfile: 0\nreserves: 0\n")
STATS_112 = (b"---\ncurrent-jobs-urgent: 0\npid: 42\nversion: 1.12\nrusage-utime: 0.001000\n"
             b"rusage-stime: 1\nuptime: 9\ndraining: false\nid: 0042\nhostname: 1234\n"
             b"os: 5.10\nplatform: true\n")


@pytest.mark.parametrize("command, body, expected", [
    ("stats-tube", STATS_TUBE_112, {"name": "007", "current-jobs-ready": 1, "pause": 0}),
    ("stats-job", STATS_JOB_112, {"id": 5, "tube": "1.5", "state": "ready", "pri": 1024}),
    ("stats-job", STATS_JOB_112.replace(b"tube: 1.5", b"tube: true"), {"tube": "true"}),
    ("stats", STATS_112, {"pid": 42, "version": "1.12", "rusage-utime": 0.001,
                          "rusage-stime": 1.0, "draining": False, "id": "0042",
                          "hostname": "1234", "os": "5.10", "platform": "true"}),
    # 1.13 quotes the same strings: same values
    ("stats-tube", STATS_TUBE_112.replace(b"007", b'"007"'), {"name": "007"}),
])
def test_stats_are_typed_by_key(command, body, expected):
    reply = decode_reply(command, b"OK %d" % len(body))
    value = decode_body(command, reply, body)
    for key, want in expected.items():
        assert value[key] == want and type(value[key]) is type(want), (key, value[key])
