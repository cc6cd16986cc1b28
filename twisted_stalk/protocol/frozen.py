"""A frozen record without :mod:`dataclasses`, for the modules ``stalkd``
loads before its first reply (server/_early.py).

A subclass names its fields in ``__slots__`` and sets them in its
``__init__`` with ``object.__setattr__``; it gets equality, hash and repr by
field and refuses assignment, as ``@dataclass(frozen=True)`` would.
"""
from __future__ import annotations


class Frozen:
    """A frozen record: what ``@dataclass(frozen=True)`` gives the command
    table's classes (equality, hash and repr by field, no assignment), written out so
    that the modules ``stalkd`` loads before its first reply do not import
    dataclasses and inspect (~10 ms; server/_early.py).  Slots, not named
    tuples: the exact parser reads these fields per command, and CPython
    reads a slot as fast as an instance attribute, a named tuple's field
    about three times slower."""

    __slots__ = ()

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return other.__class__ is self.__class__ and self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot set {name!r}")

    __delattr__ = __setattr__  # type: ignore[assignment]


__all__ = ["Frozen"]
