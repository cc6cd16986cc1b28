# -*- test-case-name: tests.test_pg_units,tests.test_pg_nodes -*-
"""What PostgreSQL nodes tell each other: one typed value per notice.

A node sends a notice (``NOTIFY`` on the queue's channel) after the
statement that caused it has committed; every other node hears it on its
LISTEN connection (:mod:`.notifications`) and the engine acts on it
(:mod:`.upkeep`).  Each kind is a frozen dataclass with its wire form, and
:func:`decode` reads any of them back (None for a payload it does not
understand, which a node ignores):

- :class:`JobsReady` ``r <node> <tube> <count>``: ``count`` jobs became ready;
- :class:`DelayedDue` ``d <node> <seconds>``: a delayed job is due then;
- :class:`PauseEnds` ``p <node> <tube> <seconds>``: a pause ends then;
- :class:`NodeHere` ``h <node>``: a node has come (or its LISTEN came back).

Tube names cannot hold spaces (``protocol.commands.valid_tube_name``), so a
space separates the fields.  The ``put_many`` statement sends its
:class:`JobsReady` notices itself (pg/sql.py), through SQL's ``format()``
with :attr:`JobsReady.FORMAT`, the same text this module encodes with.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Dict, List, Optional, Sequence, Tuple, Union


@dataclass(frozen=True)
class JobsReady:
    """``count`` jobs of ``tube`` became ready through node ``node``."""

    node: int
    tube: bytes
    count: int

    #: The wire form's format, as both Python's ``%`` and SQL's ``format()``
    #: read it (``%s`` only): node, tube, count.
    FORMAT: ClassVar[str] = "r %s %s %s"

    def encode(self) -> str:
        return self.FORMAT % (self.node, self.tube.decode("ascii"), self.count)


@dataclass(frozen=True)
class DelayedDue:
    """A delayed job put or released through node ``node`` is due in ``seconds``."""

    node: int
    seconds: float

    def encode(self) -> str:
        return "d %d %.3f" % (self.node, self.seconds)


@dataclass(frozen=True)
class PauseEnds:
    """The pause of ``tube`` ends in ``seconds`` (0: it ended)."""

    node: int
    tube: bytes
    seconds: float

    def encode(self) -> str:
        return "p %d %s %.3f" % (self.node, self.tube.decode("ascii"), self.seconds)


@dataclass(frozen=True)
class NodeHere:
    """Node ``node`` is there: the others notify again if they had stopped
    (a node that knows of no other sends no notices)."""

    node: int

    def encode(self) -> str:
        return "h %d" % self.node


Notice = Union[JobsReady, DelayedDue, PauseEnds, NodeHere]


def decode(payload: bytes) -> Optional[Notice]:
    """The notice a payload carries, or None if it is not one."""
    parts = payload.split(b" ")
    try:
        kind, node = parts[0], int(parts[1])
        if kind == b"r" and len(parts) == 4:
            return JobsReady(node, parts[2], int(parts[3]))
        if kind == b"d" and len(parts) == 3:
            return DelayedDue(node, float(parts[2]))
        if kind == b"p" and len(parts) == 4:
            return PauseEnds(node, parts[2], float(parts[3]))
        if kind == b"h" and len(parts) == 2:
            return NodeHere(node)
    except (IndexError, ValueError):
        pass
    return None


def merged(notices: Sequence[Notice]) -> List[Notice]:
    """``notices`` with the :class:`JobsReady` of one node and tube added
    up (first, in order of first appearance), then the others in order."""
    ready: Dict[Tuple[int, bytes], JobsReady] = {}
    other: List[Notice] = []
    for n in notices:
        if isinstance(n, JobsReady):
            key = (n.node, n.tube)
            seen = ready.get(key)
            ready[key] = n if seen is None else replace(seen, count=seen.count + n.count)
        else:
            other.append(n)
    return [*ready.values(), *other]


def payload_array(notices: Sequence[Notice]) -> bytes:
    """The notices as a PostgreSQL text array literal (the ``notify`` statement's argument)."""
    return ("{" + ",".join('"%s"' % n.encode() for n in notices) + "}").encode()


__all__ = ["DelayedDue", "JobsReady", "NodeHere", "Notice", "PauseEnds", "decode", "merged",
           "payload_array"]
