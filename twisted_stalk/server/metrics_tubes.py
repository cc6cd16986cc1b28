# -*- test-case-name: tests.test_ops_metrics -*-
"""Which tubes get their own series in /metrics (``--metrics-tubes``,
``--metrics-tube-pattern``), and the ``*other*`` aggregate of the rest.

Tubes are made by clients (a ``watch`` of a new name makes one), so exporting
every tube lets any client choose how many series a scrape carries.  The
policy: a tube gets its own series when its name matches the pattern (default:
every name) and it is *active* -- it holds jobs, a worker waits on it, or it is
paused -- or it is ``default``; of those, at most ``limit`` (default
:data:`DEFAULT_LIMIT`), the ones holding the most jobs first (ties by name).
Every other tube is summed into one series with the label ``tube="*other*"``
(``*`` cannot be part of a tube name), so each family still adds up to the
server's totals.  ``beanstalk_metrics_tubes_aggregated`` says how many tubes
that series stands for.  A tube moving in or out of its own series makes the
``*other*`` counters step down or up: ``rate()`` reads a step down as a reset.

The engine gives each tube's figures as a :class:`~twisted_stalk.core.readmodel.TubeFigures`
(``Engine.tube_figures``); one pass picks the tubes, and the rest are summed
column by column, so a scrape at 10,000 tubes costs a few milliseconds.
"""
from __future__ import annotations

import heapq
import re
from typing import List, Optional, Sequence, Tuple

from ..core.readmodel import TubeFigures

#: Tubes with their own series at most, by default.
DEFAULT_LIMIT = 100
#: The label value of the aggregate of the other tubes.
OTHER = "*other*"

#: Per-tube metrics: (metric name, type, help, field of
#: :class:`~twisted_stalk.core.readmodel.TubeFigures`).
TUBE_METRICS: Tuple[Tuple[str, str, str, str], ...] = (
    ("beanstalk_tube_current_jobs_urgent", "gauge", "Ready jobs with priority below 1024.",
     "urgent"),
    ("beanstalk_tube_current_jobs_ready", "gauge", "Ready jobs.", "ready"),
    ("beanstalk_tube_current_jobs_reserved", "gauge", "Reserved jobs.", "reserved"),
    ("beanstalk_tube_current_jobs_delayed", "gauge", "Delayed jobs.", "delayed"),
    ("beanstalk_tube_current_jobs_buried", "gauge", "Buried jobs.", "buried"),
    ("beanstalk_tube_jobs_total", "counter", "Jobs created in the tube.", "total_jobs"),
    ("beanstalk_tube_current_using", "gauge", "Connections using the tube.", "using"),
    ("beanstalk_tube_current_watching", "gauge", "Connections watching the tube.", "watching"),
    ("beanstalk_tube_current_waiting", "gauge", "Connections waiting in a reserve on the tube.",
     "waiting"),
    ("beanstalk_tube_deletes_total", "counter", "Delete commands for jobs of the tube.",
     "deletes"),
    ("beanstalk_tube_pauses_total", "counter", "pause-tube commands for the tube.", "pauses"),
    ("beanstalk_tube_pause_seconds", "gauge", "Length of the current pause (0: not paused).",
     "pause"),
    ("beanstalk_tube_pause_time_left_seconds", "gauge", "Seconds left in the current pause.",
     "pause_left"),
)
#: Where each metric's field lies in a TubeFigures (its first field is the name).
_COLUMNS = tuple(TubeFigures._fields.index(field) for _, _, _, field in TUBE_METRICS)
assert TubeFigures._fields[2:6] == ("ready", "reserved", "delayed", "buried")
assert TubeFigures._fields[9] == "waiting" and TubeFigures._fields[12] == "pause"


class TubeSeries:
    """The tubes of one scrape: ``own`` (each its own series) and the sums of
    the others (``other``, in :data:`TUBE_METRICS` order; None when none)."""

    __slots__ = ("own", "other", "aggregated")

    def __init__(self, own: List, other: Optional[List], aggregated: int) -> None:
        self.own = own
        self.other = other
        self.aggregated = aggregated


class TubePolicy:
    """See the module docstring.  ``limit`` 0: every tube in ``*other*``."""

    def __init__(self, limit: int = DEFAULT_LIMIT, pattern: Optional[str] = None) -> None:
        if limit < 0:
            raise ValueError("the tube limit must not be negative")
        self.limit = limit
        self.pattern = re.compile(pattern) if pattern else None

    def split(self, tubes: Sequence[TubeFigures]) -> TubeSeries:
        """Pick the tubes with their own series and sum the rest."""
        match = self.pattern.fullmatch if self.pattern is not None else None
        candidates = []
        # By position (name, urgent, ready, reserved, delayed, buried, ...,
        # waiting at 9, pause at 12): a scrape runs this for every tube.
        for t in tubes:
            jobs = t[2] + t[3] + t[4] + t[5]
            if (jobs or t[9] or t[12] or t[0] == b"default") and (
                    match is None or match(t[0].decode("latin-1"))):
                candidates.append((jobs, t[0], t))
        if len(candidates) > self.limit:
            candidates = heapq.nsmallest(self.limit, candidates,
                                         key=lambda c: (-c[0], c[1]))
        own = sorted((c[2] for c in candidates), key=lambda t: t.name)
        if len(own) == len(tubes):
            return TubeSeries(own, None, 0)
        chosen = {t[0] for t in own}
        rest = [t for t in tubes if t[0] not in chosen]
        columns = list(zip(*rest))  # transposed in C: one tuple per field
        sums = [sum(columns[i]) for i in _COLUMNS]
        return TubeSeries(own, sums, len(rest))


__all__ = ["DEFAULT_LIMIT", "OTHER", "TUBE_METRICS", "TubePolicy", "TubeSeries"]
