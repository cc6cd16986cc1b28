"""The server's tuned input loop frames bytes as the reference framer says.

``twisted_stalk.protocol.framing.ServerFraming`` states beanstalkd's framing
rules plainly; ``BeanstalkServerProtocol.dataReceived`` implements them for
speed (partition or find by offset, bodies collected across reads, the fast
paths of server/_fastpath.py, discards).  For random streams (command lines
of every length around the 224-byte limit, puts with right and wrong CRLFs,
bodies over the size limit, trailing bytes, random bytes) cut into random
reads, the server, reading from a real TCP socket through its own I/O path
(``_fastio.DirectIO``, or Twisted's when it is off), must answer exactly
what the framer's commands get when each is run through the exact parser on
an engine of its own: same commands, same bodies, same errors, in order.
"""
from __future__ import annotations

import select
import socket
from typing import List, Sequence

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from twisted.internet import tcp
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactor
from twisted.python.failure import Failure

from twisted_stalk.core.memory import MemoryEngine
from twisted_stalk.core.outcomes import BAD_FORMAT as BAD_FORMAT_OUTCOME
from twisted_stalk.core.outcomes import JOB_TOO_BIG
from twisted_stalk.protocol.commands import COMMANDS, CommandError, parse_command
from twisted_stalk.protocol.constants import BAD_FORMAT, MAX_LINE
from twisted_stalk.protocol.framing import Sent, ServerFraming
from twisted_stalk.server.factory import BeanstalkServerFactory
from twisted_stalk.server.protocol import RENDER


class NoWaitEngine(MemoryEngine):
    """Reserves answer at once (TIMED_OUT when nothing is ready), so that a
    reserve in the stream does not hold the rest of it."""

    def reserve(self, s):
        return MemoryEngine.reserve_with_timeout(self, s, 0)

    def reserve_with_timeout(self, s, timeout):
        return MemoryEngine.reserve_with_timeout(self, s, 0)


def _engine(clock: Clock, max_job_size: int) -> NoWaitEngine:
    return NoWaitEngine(clock, max_job_size=max_job_size)  # fixed process facts: stats agree


# ------------------------------------------------------------------ the two sides

def reference_replies(chunks: Sequence[bytes], max_job_size: int) -> bytes:
    """The replies to the commands the reference framer finds, each run
    through the exact parser and an engine (the server's rules, plainly)."""
    framing = ServerFraming(max_job_size=max_job_size, keep_bodies=True)
    sent: List[Sent] = []
    for chunk in chunks:
        sent += framing.feed(chunk)
    assume(not framing.closing)  # quit: the server reads no further (the framer does)
    engine = _engine(Clock(), max_job_size)
    session = engine.open_session(None)
    return b"".join(_reply(engine, session, s) for s in sent)


def _reply(engine: MemoryEngine, session, sent: Sent) -> bytes:
    if sent.line is None:
        return BAD_FORMAT  # over-long: discarded through its CRLF
    try:
        spec, args = parse_command(sent.line)
    except CommandError as e:
        return e.reply
    if spec.has_body:
        pri, delay, ttr, size, trailing_ok = args
        if size > engine.max_job_size:
            outcome = engine.reject_put(session, JOB_TOO_BIG)
        elif not trailing_ok:
            outcome = engine.reject_put(session, BAD_FORMAT_OUTCOME)
        else:
            outcome = engine.put(session, pri, delay, ttr, sent.body)
    else:
        outcome = getattr(engine, spec.method)(session, *args)
    return RENDER[spec.name](outcome)


def server_replies(chunks: Sequence[bytes], max_job_size: int, direct_io: bool) -> bytes:
    """What the server protocol answers when ``chunks`` arrive on a real TCP
    connection, one read each (reads and writes through DirectIO when on)."""
    clock = Clock()
    factory = BeanstalkServerFactory(clock, _engine(clock, max_job_size))
    factory.direct_io = direct_io
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # each chunk now
        conn, addr = listener.accept()
    conn.setblocking(False)
    client.setblocking(False)
    proto = factory.buildProtocol(addr)
    transport = tcp.Server(conn, proto, addr, None, 1, MemoryReactor())
    proto.makeConnection(transport)
    got = []
    try:
        for chunk in chunks:
            client.sendall(chunk)
            wait = 5.0  # the chunk is on its way: wait for it, then take what is there
            while select.select([conn], [], [], wait)[0]:
                wait = 0
                assert transport.doRead() is None  # the connection stays
                if transport.dataBuffer or transport._tempDataLen:
                    transport.doWrite()  # Twisted's path (DirectIO off or full)
            while select.select([client], [], [], 0)[0]:
                got.append(client.recv(1 << 20))
        transport.connectionLost(Failure(ConnectionDone()))  # closes: the client reads to EOF
        client.setblocking(True)
        while True:
            data = client.recv(1 << 20)
            if not data:
                return b"".join(got)
            got.append(data)
    finally:
        transport.connectionLost(Failure(ConnectionDone()))
        client.close()


# ------------------------------------------------------------------ the streams

_WORDS = [spec.name.encode() for spec in COMMANDS if spec.name != "quit"]
_NUMBER = st.one_of(st.integers(0, 5), st.integers(0, 2**64 + 1),
                    st.sampled_from([2**31 - 1, 2**32 - 1, 2**32, 2**64 - 1])).map(
                        lambda n: str(n).encode())
_ARG = st.one_of(_NUMBER, st.sampled_from([b"default", b"a", b"b-1", b"bad!", b"-x", b"",
                                          b"ready", b"-1", b"+1", b"1x"]))


@st.composite
def _command_line(draw) -> bytes:
    word = draw(st.sampled_from(_WORDS))
    args = draw(st.lists(_ARG, max_size=4))
    sep = draw(st.sampled_from([b" ", b" ", b"  "]))
    return sep.join([word] + args) + b"\r\n"


#: What may end a put body in place of its CRLF.
_ENDINGS = [b"\r\n", b"\r\n", b"\r\n", b"\n\r", b"xx", b"\r", b"", b"\r\nextra"]


@st.composite
def _put(draw) -> bytes:
    size = draw(st.one_of(st.integers(0, 40), st.integers(1000, 1600),
                          st.sampled_from([0, 1, 9, 10, 11, 1499, 1500, 1501])))
    args = [draw(_NUMBER) for _ in range(3)] if draw(st.booleans()) else [b"0", b"0", b"60"]
    trailing = draw(st.sampled_from([b"", b"", b"", b" x", b" "]))
    body = draw(st.binary(min_size=size, max_size=size)) if size < 50 else bytes(size)
    line = b"put " + b" ".join(args + [str(size).encode()]) + trailing + b"\r\n"
    return line + body + draw(st.sampled_from(_ENDINGS))


@st.composite
def _long_line(draw) -> bytes:
    """Lines around the 224-byte limit, ended by CRLF, a lone CR or nothing."""
    length = draw(st.one_of(st.integers(MAX_LINE - 4, MAX_LINE + 2), st.integers(0, 600)))
    head = draw(st.sampled_from([b"", b"put 0 0 1 ", b"use ", b"delete "]))
    text = (head + b"a" * length)[:max(length, 0)]
    return text + draw(st.sampled_from([b"\r\n", b"\r\n", b"\r", b"\n", b""]))


_PIECE = st.one_of(_command_line(), _put(), _long_line(), st.binary(max_size=30),
                   st.sampled_from([b"\r\n", b"\r", b"\n", b"reserve\r\n", b"delete 1\r\n",
                                    b"peek-ready\r\n", b"put 0 0 60 2\r\nhi\r\n"]))


@st.composite
def _streams(draw):
    stream = b"".join(draw(st.lists(_PIECE, min_size=1, max_size=25)))
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    chunks = [stream[a:b] for a, b in zip([0] + cuts, cuts + [len(stream)])]
    return [c for c in chunks if c] or [stream]


def _agree(chunks: List[bytes], max_job_size: int, direct_io: bool) -> None:
    expected = reference_replies(chunks, max_job_size)
    assert server_replies(chunks, max_job_size, direct_io) == expected


@settings(max_examples=200, deadline=None)
@given(_streams(), st.sampled_from([0, 10, 1500]), st.booleans())
@example([b"put 0 0 60 20 x\r\n", b"0123456789" * 2 + b"\r\n"], 10, True)  # JOB_TOO_BIG first
@example([b"a" * (MAX_LINE - 1) + b"\r", b"\nstats-tube default\r\n"], 1500, True)
@example([b"use " + b"b" * 300, b"\r", b"\n", b"list-tube-used\r\n"], 1500, False)
@example([b"put 0 0 60 1200\r\n" + bytes(600), bytes(602) + b"peek-ready\r\n"], 1500, True)
def test_server_frames_as_the_reference_framer(chunks, max_job_size, direct_io):
    _agree(chunks, max_job_size, direct_io)


def test_the_harness_sees_a_framing_difference():
    """The comparison can fail: a framer that ignored the size limit (the
    shell's, which does not know it) frames a too-big put with trailing
    bytes differently from the server, and the replies differ."""
    chunks = [b"put 0 0 60 20 x\r\n" + b"reserve\r\n" * 2 + b"ab\r\n"]
    assert server_replies(chunks, 10, True) == b"JOB_TOO_BIG\r\n"
    sent = ServerFraming().feed(chunks[0])
    assert [s.name for s in sent] == ["put", "reserve", "reserve", None]


def test_framing_names_lines_and_keeps_bodies():
    f = ServerFraming(keep_bodies=True)
    sent = f.feed(b"put 1 2 3 4\r\nab") + f.feed(b"cd\r\nx" * 1 + b"\r\n" + b"y" * 300 + b"\r\n")
    assert [(s.name, s.line, s.body) for s in sent] == [
        ("put", b"put 1 2 3 4", b"abcd\r\n"), (None, b"x", None), (None, None, None)]
    assert ServerFraming().feed(b"put 0 0 1 1\r\nz\r\n")[0].body is None  # not kept by default


#: Streams at the framing's edges, each ended by list-tube-used, with the
#: replies beanstalkd 1.12 gives them when started with ``-z 10``.
_EDGES = [
    # a too-big put's body is discarded even after trailing bytes on its line
    (b"put 0 0 60 20 x\r\n" + b"reserve\r\n" * 2 + b"ab\r\n", [b"JOB_TOO_BIG\r\n"]),
    # trailing bytes on a put line that fits: BAD_FORMAT, the body is read as commands
    (b"put 0 0 60 2 x\r\nhi\r\n", [b"BAD_FORMAT\r\n", b"UNKNOWN_COMMAND\r\n"]),
    # a line over 224 bytes is answered once its CRLF comes
    (b"use " + b"b" * 300 + b"\r\n", [b"BAD_FORMAT\r\n"]),
    # a body longer than its count: EXPECTED_CRLF, the rest read as a command
    (b"put 0 0 60 2\r\nhello\r\n", [b"EXPECTED_CRLF\r\n", b"UNKNOWN_COMMAND\r\n"]),
    (b"put 0 0 60 2\r\nhi\n\r", [b"EXPECTED_CRLF\r\n"]),
]


def test_framing_edges_as_beanstalkd():
    """The reference framer, the server and beanstalkd agree at the edges:
    the replies the C reference gives, one per command the framer finds."""
    from servers import REFERENCE, start_server
    from wire import Wire

    for kind in ["ours"] + (["reference"] if REFERENCE else []):
        server = start_server(kind, "-z", "10")
        try:
            for stream, replies in _EDGES:
                sent = ServerFraming(max_job_size=10).feed(stream + b"list-tube-used\r\n")
                w = Wire(server.connect())
                w.send(stream + b"list-tube-used\r\n")
                got = [w.reply() for _ in sent]
                assert got == replies + [b"USING default\r\n"], (kind, stream)
                w.sock.close()
        finally:
            server.stop()
