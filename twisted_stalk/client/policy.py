# -*- test-case-name: tests.test_client_pool -*-
"""Which server of a :class:`~twisted_stalk.client.BeanstalkPool` a put goes to.

A policy orders the usable servers for one put: the pool tries them in that
order and stops at the first that stores the job.  Three are provided:

* :class:`RoundRobin` (the default): each put starts at the next usable
  server, so N puts over k usable servers put N/k (rounded) on each;
* :class:`Weighted`: smooth weighted round-robin (as nginx does it): with
  weights 3, 1, 1 every 5 puts go 3, 1, 1, interleaved (a, b, a, c, a);
* :class:`KeyHash`: rendezvous (highest random weight) hashing of a caller's
  key, so related jobs land on one server.  The pool uses it for every put
  given a ``key=``, whatever its policy.  When that server is not usable, the
  key's next server in its own order takes over, and only the keys of that
  server move.

A policy is any object with ``order(names, usable, key)``: ``names`` are all
the pool's servers (endpoint strings, in the pool's order), ``usable`` the
indices of those up and answering (never empty), ``key`` the put's key (or
None); it returns indices of ``usable`` in the order to try.  It may also have
``first(names, usable, key)``, the same as ``order(...)[0]`` but cheaper: the
pool asks for the rest of the order only when the first server refuses.
"""
from __future__ import annotations

import hashlib
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

try:  # typing.Protocol without the name clash with twisted protocols
    from typing import Protocol as _Interface
except ImportError:  # pragma: no cover
    _Interface = object  # type: ignore[assignment,misc]


class Policy(_Interface):
    """How a pool orders its usable servers for one put."""

    def order(self, names: Sequence[str], usable: Sequence[int],
              key: Optional[Any] = None) -> List[int]:
        """Indices of ``usable`` in the order to try them."""


class RoundRobin:
    """Each put starts at the next usable server (then the others in turn)."""

    def __init__(self) -> None:
        self._next = 0

    def order(self, names: Sequence[str], usable: Sequence[int],
              key: Optional[Any] = None) -> List[int]:
        if not usable:
            return []
        start = self._next % len(usable)
        self._next = start + 1
        return list(usable[start:]) + list(usable[:start])

    def first(self, names: Sequence[str], usable: Sequence[int],
              key: Optional[Any] = None) -> int:
        """``order(...)[0]`` without building the list (the pool's usual case)."""
        start = self._next % len(usable)
        self._next = start + 1
        return usable[start]


class Weighted:
    """Smooth weighted round-robin: server *i* gets ``weight_i / sum`` of the
    puts, spread out rather than in runs.

    :param weights: by endpoint string (missing servers weigh 1), or a
        sequence in the pool's order.  A weight of 0 takes puts only when no
        other server can.
    """

    def __init__(self, weights: Union[Mapping[str, float], Sequence[float]]) -> None:
        self.weights = weights
        self._current: Dict[int, float] = {}

    def _weight(self, names: Sequence[str], i: int) -> float:
        w = self.weights
        if isinstance(w, Mapping):
            return float(w.get(names[i], 1.0))
        return float(w[i]) if i < len(w) else 1.0

    def order(self, names: Sequence[str], usable: Sequence[int],
              key: Optional[Any] = None) -> List[int]:
        if not usable:
            return []
        weights = {i: self._weight(names, i) for i in usable}
        total = sum(weights.values())
        current = self._current
        for i in usable:
            current[i] = current.get(i, 0.0) + weights[i]
        best = max(usable, key=lambda i: (current[i], -i))
        current[best] -= total
        rest = sorted((i for i in usable if i != best), key=lambda i: (-weights[i], i))
        return [best] + rest


def _score(name: str, key: bytes) -> int:
    digest = hashlib.blake2b(key, key=name.encode("utf-8")[:64], digest_size=8).digest()
    return int.from_bytes(digest, "big")


def key_bytes(key: Any) -> bytes:
    """The bytes a key is hashed as: bytes as they are, anything else as UTF-8 text."""
    return key if isinstance(key, bytes) else str(key).encode("utf-8")


class KeyHash:
    """Rendezvous hashing of the put's key: the same key goes to the same
    server while it is usable; the order does not depend on which others are."""

    def order(self, names: Sequence[str], usable: Sequence[int],
              key: Optional[Any] = None) -> List[int]:
        raw = key_bytes(key)
        return sorted(usable, key=lambda i: _score(names[i], raw), reverse=True)


__all__ = ["KeyHash", "Policy", "RoundRobin", "Weighted", "key_bytes"]
