"""The fast paths (server/_fastpath.py) yield exactly what the exact parser yields.

For any line the fast paths take, the handler they call and the values they
pass must be the ones ``protocol.commands.parse_command`` gives; lines they
do not take are left to that parser.  Checked with hypothesis over lines
built from the command table's words and numbers near every limit.
"""
from __future__ import annotations

from typing import Any, List, Tuple

from hypothesis import example, given, settings
from hypothesis import strategies as st

from twisted_stalk.protocol.commands import COMMANDS, CommandError, parse_command
from twisted_stalk.server._fastpath import FastPaths


def _recording_paths() -> Tuple[FastPaths, List[Tuple[str, tuple]]]:
    calls: List[Tuple[str, tuple]] = []

    def recorder(name: str):
        def handler(proto: Any, *args: Any) -> None:
            calls.append((name, args))
        return handler

    return FastPaths({spec.name: recorder(spec.name) for spec in COMMANDS}), calls


def fast(paths: FastPaths, calls: list, line: bytes):
    """What the fast paths make of ``line``: (command, values), or None if
    they leave it to the exact parser."""
    del calls[:]
    entry = paths.lines.get(line)
    if entry is None:
        entry = paths.route(None, line)
        if entry is False:
            return None
    if entry.__class__ is tuple:
        return ("put", entry + (True,))  # a put line: the exact parser adds trailing_ok
    if entry is not True:
        entry(None)
    [(name, args)] = calls
    return name, args


def exact(line: bytes):
    try:
        spec, args = parse_command(line)
    except CommandError as e:
        return e.reply
    return spec.name, args


_NUMBERS = st.one_of(
    st.integers(0, 2**64 + 10),
    st.sampled_from([0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63, 2**64 - 1, 2**64]),
).map(lambda n: str(n).encode())
_NUMBER_TEXT = st.one_of(_NUMBERS, _NUMBERS.map(lambda t: b"00" + t),
                         st.sampled_from([b"", b"-1", b"+1", b" 1", b"1 ", b"1x", b"x"]))
_WORDS = st.sampled_from([spec.name.encode() for spec in COMMANDS]
                         + [b"delete", b"deletex", b"reserve-job", b"putx"])


@st.composite
def command_lines(draw) -> bytes:
    word = draw(_WORDS)
    args = draw(st.lists(_NUMBER_TEXT, min_size=0, max_size=5))
    sep = draw(st.sampled_from([b" ", b" ", b" ", b"  "]))
    return sep.join([word] + args)


@settings(max_examples=3000, deadline=None)
@given(st.one_of(command_lines(), st.binary(max_size=40)))
@example(b"delete 18446744073709551615")
@example(b"delete 18446744073709551616")
@example(b"delete 0018446744073709551615")
@example(b"reserve-with-timeout 2147483648")
@example(b"kick 4294967296")
@example(b"put 1 2 3 4294967295")
@example(b"release 1 2 4294967296")
@example(b"reserve")
@example(b"quit")
def test_fast_paths_agree_with_the_exact_parser(line):
    paths, calls = _recording_paths()
    got = fast(paths, calls, line)
    if got is not None:
        assert got == exact(line), line


def test_the_hot_commands_do_take_the_fast_paths():
    paths, calls = _recording_paths()
    for line in (b"reserve", b"delete 7", b"release 7 1 0", b"touch 7",
                 b"reserve-with-timeout 5", b"put 1024 0 60 100", b"bury 7 1"):
        assert fast(paths, calls, line) is not None, line
    assert fast(paths, calls, b"put 1024 0 60 100")[1] == (1024, 0, 60, 100, True)


def test_memoised_put_lines_stay_bounded():
    from twisted_stalk.server._fastpath import PUT_LINES_MAX
    paths, _ = _recording_paths()
    for i in range(PUT_LINES_MAX * 3):
        assert paths.put_header(b"put 0 0 60 %d" % i) == (0, 0, 60, i)
    assert len(paths.lines) <= PUT_LINES_MAX + len([c for c in COMMANDS if not c.args])
