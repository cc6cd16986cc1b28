"""Client-side argument checks: nothing malformed is ever sent.

One check per argument *kind* of the command table
(:data:`twisted_stalk.protocol.commands.COMMANDS`), as the server's parser
reads them: :func:`command_args` checks a command's arguments by the kinds
the table gives them, so no command method repeats a check.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

from ..protocol.commands import COMMANDS, EXTENSION_COMMANDS, valid_tube_name
from ..protocol.constants import (
    JOB_STATES,
    MAX_RESERVE_TIMEOUT,
    MAX_TUBE_NAME,
    U32_MAX,
    U64_MAX,
)
from .errors import InvalidArgument

TubeName = Union[str, bytes]


def tube_name(name: Any, what: str = "tube") -> bytes:
    """The tube name as bytes, or :class:`InvalidArgument`."""
    if isinstance(name, str):
        try:
            raw = name.encode("ascii")
        except UnicodeEncodeError:
            raise InvalidArgument(f"{what} name {name!r}: only ASCII A-Z a-z 0-9 - + / ; . $ _ ( )")
    elif isinstance(name, bytes):
        raw = name
    else:
        raise InvalidArgument(f"{what} name must be str or bytes, not {type(name).__name__}")
    if not valid_tube_name(raw):
        if not raw:
            why = "is empty"
        elif len(raw) > MAX_TUBE_NAME:
            why = f"is {len(raw)} bytes long (at most {MAX_TUBE_NAME})"
        elif raw[:1] == b"-":
            why = "starts with '-'"
        else:
            why = "has characters other than A-Z a-z 0-9 - + / ; . $ _ ( )"
        raise InvalidArgument(f"{what} name {name!r} {why}")
    return raw


def uint(value: Any, what: str, limit: int = U32_MAX) -> int:
    """A non-negative integer no larger than ``limit`` (floats only if whole)."""
    if type(value) is int and 0 <= value <= limit:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{what} must be an integer, not {type(value).__name__}")
    if isinstance(value, float):
        if not value.is_integer():
            raise InvalidArgument(f"{what} must be a whole number, not {value!r}")
        value = int(value)
    if not 0 <= value <= limit:
        raise InvalidArgument(f"{what} must be between 0 and {limit}, not {value}")
    return value


def job_id(value: Any) -> int:
    return uint(value, "job id", U64_MAX)


def body(value: Any, codec: Any, max_job_size: Optional[int]) -> bytes:
    """Encode a job body: bytes as is; other values through the codec (str as
    UTF-8 when there is none); check the size limit."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
    elif codec is not None:
        raw = codec.encode(value)
        if not isinstance(raw, bytes):
            raise InvalidArgument(f"codec {codec!r} returned {type(raw).__name__}, not bytes")
    elif isinstance(value, str):
        raw = value.encode("utf-8")
    else:
        raise InvalidArgument(
            f"job body must be bytes or str (or set a codec), not {type(value).__name__}")
    if max_job_size is not None and len(raw) > max_job_size:
        raise InvalidArgument(f"job body is {len(raw)} bytes; the limit is {max_job_size}"
                              " (max_job_size)")
    return raw


def job_state(value: Any) -> str:
    """One of :data:`JOB_STATES` (str or bytes), as str."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not isinstance(value, str) or value not in JOB_STATES:
        raise InvalidArgument(f"job state must be one of {', '.join(JOB_STATES)}, not {value!r}")
    return value


# ------------------------------------------------------ driven by the table

_Check = Callable[[Any, str], Any]


def _u64(value: Any, what: str) -> int:
    if type(value) is int and 0 <= value <= U64_MAX:  # job ids: the common case first
        return value
    return uint(value, what, U64_MAX)


#: One check per argument kind of the command table ("bytes", put's byte
#: count, is the body's length: :func:`body` checks the body itself).
KIND_CHECKS: Dict[str, _Check] = {
    "u32": uint,
    "seconds": uint,
    "bound": uint,
    "u64": _u64,
    # beanstalkd keeps the timeout in a C int: 2**31 and up would wrap.
    "timeout": lambda value, what: uint(value, what, MAX_RESERVE_TIMEOUT),
    "tube": lambda value, what: tube_name(value),
    "state": lambda value, what: job_state(value),
}

#: How messages name an argument whose table name is terse (else its name).
_LABELS = {"pri": "priority", "id": "job id", "bound": "kick bound",
           "seconds": "reserve timeout"}

_CHECKS: Dict[str, Tuple[Tuple[_Check, str], ...]] = {
    spec.name: tuple((KIND_CHECKS[a.kind], _LABELS.get(a.name, a.name))
                     for a in spec.args if a.kind != "bytes")
    for spec in COMMANDS + EXTENSION_COMMANDS
}


def command_args(name: str, values: Sequence[Any]) -> Tuple[Any, ...]:
    """``values`` (the leading arguments of command ``name``, in the table's
    order) checked by their kinds: ints, tube names as bytes, states as str;
    or :class:`InvalidArgument` naming the first bad one."""
    checks = _CHECKS[name]
    if len(values) == 1:  # most commands: one argument
        check, what = checks[0]
        return (check(values[0], what),)
    return tuple([check(value, what) for (check, what), value in zip(checks, values)])
