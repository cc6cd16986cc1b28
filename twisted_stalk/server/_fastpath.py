# -*- test-case-name: tests.test_fastpath -*-
"""A speed trick, fenced: short paths for well-formed hot command lines.

Contract: when :meth:`FastPaths.route` (or the exact-line table
:attr:`FastPaths.lines`) handles a line, it calls the command's handler
with exactly the values :func:`twisted_stalk.protocol.commands.parse_command`
gives for that line; a line it does not handle goes to that exact parser.
tests/test_fastpath.py checks this with hypothesis over generated lines.

Everything here is generated from the command table:

* :attr:`FastPaths.lines` maps exact lines to what they mean: each command
  without arguments (``b"reserve"`` -> its handler) and each put line seen
  before (``b"put 1024 0 120 100"`` -> its header ``(pri, delay, ttr,
  bytes)``).  Producers repeat the same few put lines, and one dict lookup
  of the whole line costs a fraction of splitting it and converting four
  numbers; the put entries are dropped when they reach
  :data:`PUT_LINES_MAX`, so the table stays small.
* :meth:`FastPaths.route` serves the other commands whose arguments are all
  numbers: digits only, single spaces, each value within what its kind
  means exactly the same to the exact parser.  Anything else (signs, extra
  spaces, values needing C's truncation) is left to the exact parser.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple, Union

from ..protocol.commands import COMMANDS, CommandSpec
from ..protocol.constants import U32_MAX, U64_MAX

#: Put lines memoised at most (then the table starts again).
PUT_LINES_MAX = 1024

#: The largest value of each numeric argument kind that a digits-only text
#: parses to unchanged: beyond it the exact parser refuses it (u32/u64) or
#: truncates it as C does (a ``timeout`` is stored in a C int, a ``bound``
#: in 32 bits).
FAST_LIMITS: Dict[str, int] = {
    "u32": U32_MAX, "seconds": U32_MAX, "bytes": U32_MAX, "bound": U32_MAX,
    "u64": U64_MAX, "timeout": 2**31 - 1,
}

Handler = Callable[..., object]
#: What an exact line means: a handler to call, or a put line's header.
LineEntry = Union[Handler, Tuple[int, int, int, int]]
#: A route: run the command for an argument text, True if it did.
Route = Callable[[object, bytes], bool]


def _route_one(handler: Handler, limit: int) -> Route:
    def route(proto: object, text: bytes) -> bool:
        if text.isdigit():
            value = int(text)
            if value <= limit:
                handler(proto, value)
                return True
        return False
    return route


def _route_many(handler: Handler, limits: Tuple[int, ...]) -> Route:
    count = len(limits)

    def route(proto: object, text: bytes) -> bool:
        parts = text.split(b" ")
        if len(parts) == count and all(p.isdigit() for p in parts):
            values = [int(p) for p in parts]
            if all(v <= lim for v, lim in zip(values, limits)):
                handler(proto, *values)
                return True
        return False
    return route


def _numeric(spec: CommandSpec) -> bool:
    return bool(spec.args) and not spec.has_body and all(a.kind in FAST_LIMITS for a in spec.args)


#: ``delete <id>`` is the most common command with an argument: its route
#: is tried first, without a word lookup.  Ids of up to 19 digits are below
#: 2**64; longer texts go to the exact parser.
_DELETE = b"delete "


def _router(delete: Handler, words: Dict[bytes, Route],
            put_header: Callable[[bytes], Optional[Tuple[int, int, int, int]]]):
    # A closure: the handlers it calls are cell variables, which CPython
    # loads faster than attributes of an object.
    def route(proto: object, line: bytes) -> Union[bool, Tuple[int, int, int, int]]:
        if line[:7] == _DELETE:
            text = line[7:]
            if text.isdigit() and len(text) < 20:
                delete(proto, int(text))
                return True
            return False
        sp = line.find(b" ")
        if sp > 0:
            word = line[:sp]
            if word == b"put":
                return put_header(line) or False
            fast = words.get(word)
            if fast is not None:
                return fast(proto, line[sp + 1:])
        return False
    return route


class FastPaths:
    """The fast paths for one set of command handlers (by command name)."""

    def __init__(self, handlers: Dict[str, Handler]) -> None:
        self._no_args: Dict[bytes, LineEntry] = {
            spec.name.encode(): handlers[spec.name] for spec in COMMANDS if not spec.args}
        #: Exact lines: see the module docstring.
        self.lines: Dict[bytes, LineEntry] = dict(self._no_args)
        #: Routes of the numeric commands, by command word.
        self.words: Dict[bytes, Route] = {}
        for spec in COMMANDS:
            if _numeric(spec):
                limits = tuple(FAST_LIMITS[a.kind] for a in spec.args)
                handler = handlers[spec.name]
                self.words[spec.name.encode()] = (
                    _route_one(handler, limits[0]) if len(limits) == 1
                    else _route_many(handler, limits))

        #: Run ``line`` (not in :attr:`lines`) if a fast path takes it: True;
        #: a well-formed put line is not run but memoised and its header
        #: returned; False leaves it to the exact parser.
        self.route: Callable[[object, bytes], Union[bool, Tuple[int, int, int, int]]] = \
            _router(handlers["delete"], self.words, self.put_header)

    def put_header(self, line: bytes) -> Optional[Tuple[int, int, int, int]]:
        """Parse and memoise ``pri delay ttr bytes`` of a well-formed put
        line; None if it is not one (the exact parser then answers)."""
        parts = line.split(b" ")
        if len(parts) == 5:
            _, a, b, c, d = parts
            if a.isdigit() and b.isdigit() and c.isdigit() and d.isdigit():
                header = int(a), int(b), int(c), int(d)
                if max(header) <= U32_MAX:
                    lines = self.lines
                    if len(lines) >= len(self._no_args) + PUT_LINES_MAX:
                        lines.clear()
                        lines.update(self._no_args)
                    lines[line] = header
                    return header
        return None


__all__ = ["FAST_LIMITS", "FastPaths", "PUT_LINES_MAX"]
