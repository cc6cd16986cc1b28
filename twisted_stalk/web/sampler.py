# -*- test-case-name: tests.test_web_api -*-
"""Rates over the last minutes, sampled from the engine's counters on a timer.

Nothing is added to the engine's commands: every :data:`INTERVAL` seconds
the sampler reads the server's ``stats`` and every tube's figures
(``Engine.server_stats`` and ``Engine.tube_figures``: inspection, counted as
no command) and keeps the cumulative
counters in fixed-size rings: :data:`POINTS` samples per series, for at
most :data:`MAX_TUBES` tubes (tubes beyond that have no charts).  A rate is
the difference of two neighbouring samples over the interval.

Per tube: jobs put (``total-jobs``), deletes (``cmd-delete``) and the ready
gauge.  Server-wide: puts, reserves (``cmd-reserve`` and
``cmd-reserve-with-timeout``) and deletes.  The protocol keeps no per-tube
count of reserves, so the console has no per-tube reserve rate.
"""
from __future__ import annotations

from array import array
from typing import Callable, Dict, List, Optional

from ..core.engine import Engine
from ..protocol.yaml import as_dict

INTERVAL = 2.0
POINTS = 90
MAX_TUBES = 2000

#: Per tube: (series, field of core.readmodel.TubeFigures).
TUBE_SERIES = (("put", "total_jobs"), ("delete", "deletes"))
TUBE_GAUGES = (("ready", "ready"),)
SERVER_SERIES = (("put", ("cmd-put",)),
                 ("reserve", ("cmd-reserve", "cmd-reserve-with-timeout")),
                 ("delete", ("cmd-delete",)))


class Ring:
    """``POINTS + 1`` samples of a few series, oldest overwritten."""

    __slots__ = ("series", "count", "first")

    def __init__(self, names, first: int) -> None:
        self.series = {name: array("q", bytes(8 * (POINTS + 1))) for name in names}
        #: Samples written so far, and the sampler tick of the first.
        self.count = 0
        self.first = first

    def add(self, slot: int, values: Dict[str, int]) -> None:
        for name, ring in self.series.items():
            ring[slot] = values[name]
        self.count += 1


class Sampler:
    """Samples ``engine`` every :data:`INTERVAL` seconds (call :meth:`sample`)."""

    def __init__(self, engine: Engine, interval: float = INTERVAL) -> None:
        self.engine = engine
        self.interval = interval
        #: Samples taken since start (the ring slot is ``ticks % (POINTS + 1)``).
        self.ticks = 0
        self.server = Ring([name for name, _ in SERVER_SERIES], 0)
        self.tubes: Dict[bytes, Ring] = {}
        self._stop: Optional[Callable[[], None]] = None

    def start(self, clock) -> None:
        from twisted.internet.task import LoopingCall
        loop = LoopingCall(self.sample)
        loop.clock = clock
        loop.start(self.interval, now=True)
        self._stop = loop.stop

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None

    def sample(self) -> None:
        engine = self.engine
        slot = self.ticks % (POINTS + 1)
        stats = as_dict(engine.server_stats())
        self.server.add(slot, {name: sum(int(stats.get(k, 0)) for k in keys)
                               for name, keys in SERVER_SERIES})
        seen = set()
        for figures in engine.tube_figures():
            name = figures.name
            ring = self.tubes.get(name)
            if ring is None:
                if len(self.tubes) >= MAX_TUBES:
                    continue
                ring = self.tubes[name] = Ring(
                    [n for n, _ in TUBE_SERIES + TUBE_GAUGES], self.ticks)
            ring.add(slot, {n: getattr(figures, field) for n, field in TUBE_SERIES + TUBE_GAUGES})
            seen.add(name)
        if len(seen) != len(self.tubes):
            for name in [n for n in self.tubes if n not in seen]:
                del self.tubes[name]
        self.ticks += 1

    def _ordered(self, ring: Ring, name: str) -> List[int]:
        """The ring's samples of ``name``, oldest first."""
        n = min(ring.count, POINTS + 1)
        end = self.ticks  # one past the newest
        data = ring.series[name]
        return [data[(end - n + i) % (POINTS + 1)] for i in range(n)]

    def rates(self, ring: Optional[Ring], names) -> Dict[str, List[float]]:
        """Per-second rates between neighbouring samples, oldest first."""
        out: Dict[str, List[float]] = {}
        for name in names:
            if ring is None:
                out[name] = []
                continue
            samples = self._ordered(ring, name)
            out[name] = [round(max(0, b - a) / self.interval, 2)
                         for a, b in zip(samples, samples[1:])]
        return out

    def server_rates(self) -> Dict[str, List[float]]:
        return self.rates(self.server, [name for name, _ in SERVER_SERIES])

    def tube_rates(self, name: bytes) -> Dict[str, List[float]]:
        ring = self.tubes.get(name)
        out = self.rates(ring, [n for n, _ in TUBE_SERIES])
        for gauge, _ in TUBE_GAUGES:
            out[gauge] = self._ordered(ring, gauge) if ring is not None else []
        return out


__all__ = ["INTERVAL", "MAX_TUBES", "POINTS", "Sampler"]
