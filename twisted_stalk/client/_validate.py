"""Client-side argument checks: nothing malformed is ever sent."""
from __future__ import annotations

from typing import Any, Optional, Union

from ..protocol.commands import valid_tube_name
from ..protocol.constants import JOB_STATES, MAX_TUBE_NAME, U32_MAX, U64_MAX
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
