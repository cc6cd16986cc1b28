# -*- test-case-name: tests.test_differential -*-
"""The YAML shapes of stats and list replies, written and read byte-exactly.

beanstalkd prints these bodies with printf, not a YAML library: ``---`` then
``key: value`` lines, strings that are names or free text in double quotes,
numbers bare; lists as ``- item`` lines.  PyYAML's dumper would write single
quotes, which several clients do not strip, so we write the shape by hand.
The reader accepts both quoted (1.13) and bare (1.12) strings.
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple, Union

    StatValue = Union[int, float, str, bytes, bool]
    #: A stats body as data: ``(key, value)`` pairs in beanstalkd's order.
    StatPairs = Sequence[Tuple[str, StatValue]]


def __getattr__(name: str) -> Any:
    """The type aliases ``StatValue`` and ``StatPairs`` (a stats body as
    data: ``(key, value)`` pairs in beanstalkd's order), built on first use:
    :mod:`typing` costs ``stalkd``'s first reply (server/_early.py)."""
    if name in ("StatValue", "StatPairs"):
        from typing import Sequence, Tuple, Union
        value = Union[int, float, str, bytes, bool]
        globals().update(StatValue=value, StatPairs=Sequence[Tuple[str, value]])
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: Keys whose (string) values beanstalkd 1.13 prints in double quotes and
#: 1.12 prints bare; other strings (``state``, the server ``id``) are bare in both.
QUOTED_KEYS = frozenset({"name", "tube", "version", "hostname", "os", "platform"})


def quoted(value: Union[str, bytes]) -> bytes:
    """A string value as beanstalkd 1.13 prints it: in double quotes."""
    if isinstance(value, str):
        value = value.encode("utf-8", "replace")
    return b'"' + value + b'"'


def mapping(items: Iterable[Tuple[bytes, bytes]]) -> bytes:
    """``---\\nkey: value\\n...`` from already formatted values."""
    return b"---\n" + b"".join([k + b": " + v + b"\n" for k, v in items])


def as_dict(pairs: StatPairs) -> Dict[str, StatValue]:
    """Stats data as a dict, with names (bytes in the engine) as str."""
    return {key: value.decode("utf-8", "replace") if value.__class__ is bytes else value
            for key, value in pairs}


def seconds(value: float) -> bytes:
    """A duration as beanstalkd prints rusage: whole seconds, six decimals."""
    whole = int(value)
    return b"%d.%06d" % (whole, int(round((value - whole) * 1e6)) % 1000000)


#: The keys beanstalkd 1.12 quotes: only ``version`` (its other strings are bare).
QUOTED_KEYS_1_12 = frozenset({"version"})


def render_mapping(pairs: StatPairs, quote: bool = True) -> bytes:
    """A stats body from data: ints bare, floats as :func:`seconds`, bools as
    ``true``/``false``, strings bare or in double quotes: those of
    :data:`QUOTED_KEYS` (``quote``: beanstalkd 1.13's shape) or only
    ``version`` (1.12's)."""
    items = []
    for key, value in pairs:
        kind = value.__class__
        if kind is int:
            text = b"%d" % value
        elif kind is bool:
            text = b"true" if value else b"false"
        elif kind is float:
            text = seconds(value)  # type: ignore[arg-type]
        else:
            text = value if kind is bytes else str(value).encode("utf-8", "replace")
            if key in (QUOTED_KEYS if quote else QUOTED_KEYS_1_12):
                text = b'"' + text + b'"'
        items.append((key.encode("ascii"), text))
    return mapping(items)


def sequence(names: Iterable[bytes]) -> bytes:
    """``---\\n- a\\n- b\\n`` as list-tubes prints it."""
    return b"---\n" + b"".join([b"- " + n + b"\n" for n in names])


def ok_reply(body: bytes) -> bytes:
    """``OK <n>\\r\\n<body>\\r\\n`` with n counting the YAML bytes only."""
    return b"OK %d\r\n%s\r\n" % (len(body), body)


#: Keys whose values are strings, by command: beanstalkd 1.12 prints them bare,
#: so ``name: 007`` must not become the int 7.  ``id`` is the server's instance
#: id in ``stats`` (a string) but the job's id in ``stats-job`` (an int).
STRING_KEYS: Dict[str, FrozenSet[str]] = {
    "stats": frozenset({"id", "version", "hostname", "os", "platform"}),
    "stats-job": frozenset({"tube", "state"}),
    "stats-tube": frozenset({"name"}),
}
#: String keys when the command is not known (every one but the ambiguous ``id``).
ANY_STRING_KEYS = frozenset({"name", "tube", "state", "version", "hostname", "os", "platform"})
#: Keys whose values are seconds with a fraction (rusage).
FLOAT_KEYS = frozenset({"rusage-utime", "rusage-stime"})
#: Keys whose values are ``true``/``false``.
BOOL_KEYS = frozenset({"draining"})


def _unquoted(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    return text


def _scalar(text: str) -> StatValue:
    """A value of a key this module does not know, typed by its look."""
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    if text.isdigit():
        return int(text)
    if text in ("true", "false"):
        return text == "true"
    try:
        if "." in text:
            return float(text)
    except ValueError:
        pass
    return text


def typed_value(key: str, text: str, strings: FrozenSet[str] = ANY_STRING_KEYS) -> StatValue:
    """The value of ``key`` typed by the key, not by its look: names, tubes,
    states, the server id, version, hostname, os and platform are strings
    (``strings``), rusage floats, ``draining`` a bool, counts ints; only keys
    this module does not know are typed by their look."""
    if key in strings:
        return _unquoted(text)
    if key in FLOAT_KEYS:
        try:
            return float(text)
        except ValueError:
            return text
    if key in BOOL_KEYS:
        return text == "true" if text in ("true", "false") else text
    if text.isdigit():
        return int(text)
    return _scalar(text)


def parse_mapping(body: bytes, command: Optional[str] = None) -> Dict[str, StatValue]:
    """Parse a stats body into a dict, each value typed by its key (see
    :func:`typed_value`): ints for counts, floats for rusage, a bool for
    ``draining``, str for names and the other text fields, whether the
    server quotes them (1.13) or not (1.12).

    ``command`` (``"stats"``, ``"stats-job"``, ``"stats-tube"``) says which
    keys are strings; ``id`` is a string only in ``stats`` (the server's
    instance id), so without ``command`` it is typed by its look.
    """
    strings = STRING_KEYS.get(command or "", ANY_STRING_KEYS)
    result: Dict[str, StatValue] = {}
    for raw in body.decode("utf-8", "replace").splitlines():
        if not raw or raw == "---":
            continue
        key, sep, value = raw.partition(": ")
        if not sep:
            key, value = raw.rstrip(":"), ""
        result[key] = typed_value(key, value, strings)
    return result


def parse_sequence(body: bytes) -> List[str]:
    """Parse a list-tubes body into tube names."""
    return [line[2:] for line in body.decode("utf-8", "replace").splitlines()
            if line.startswith("- ")]
