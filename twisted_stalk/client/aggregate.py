# -*- test-case-name: tests.test_client_pool -*-
"""Statistics of several servers added up (``pool.stats()``, ``pool.stats_tube()``).

Counts, rates and CPU times are summed.  The rest combine by meaning:
``uptime`` and ``max-job-size`` take the smallest value (what holds for every
server), ``pause``/``pause-time-left`` the largest, ``draining`` is true when
any server drains; strings (``name``, ``version`` ...) are kept when every
server gives the same one; values that only make sense for one process
(``pid``, binlog file indexes and sizes) are left out.  Each server's own
dict stays available.  None of this imports Twisted.
"""
from __future__ import annotations

from typing import Dict, Iterable, Mapping

from ..protocol.yaml import StatValue

Stats = Dict[str, StatValue]

_MIN = frozenset({"uptime", "max-job-size"})
_MAX = frozenset({"pause", "pause-time-left"})
_LEFT_OUT = frozenset({"pid", "binlog-oldest-index", "binlog-current-index",
                       "binlog-max-size"})


class PoolStats(Dict[str, StatValue]):
    """Stats summed over servers (a dict), with each server's own.

    :ivar servers: the stats of each server that answered, by name.
    :ivar errors: why each other server did not answer (down, no such
        tube ...), by name.
    """

    def __init__(self, servers: Mapping[str, Stats],
                 errors: Mapping[str, BaseException]) -> None:
        super().__init__(combine(servers.values()))
        self.servers: Dict[str, Stats] = dict(servers)
        self.errors: Dict[str, BaseException] = dict(errors)


def combine(dicts: Iterable[Stats]) -> Stats:
    """One stats dict from several (see the module's rules); key order is
    the first dict's, then keys first seen later."""
    out: Stats = {}
    left_out = set(_LEFT_OUT)
    for stats in dicts:
        for key, value in stats.items():
            if key in left_out:
                continue
            if key not in out:
                out[key] = value
                continue
            have = out[key]
            if isinstance(value, bool) or isinstance(have, bool):
                out[key] = bool(have) or bool(value)
            elif isinstance(value, (int, float)) and isinstance(have, (int, float)):
                if key in _MIN:
                    out[key] = min(have, value)
                elif key in _MAX:
                    out[key] = max(have, value)
                else:
                    out[key] = have + value
            elif have != value:  # strings that differ (hostname, id, version ...)
                del out[key]
                left_out.add(key)
    return out


__all__ = ["PoolStats", "combine"]
