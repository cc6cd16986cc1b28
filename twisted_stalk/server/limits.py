"""Limits: connections (``--max-connections``), job memory (``--max-memory``)
and the process's open-file limit.

Everything here is installed at start and costs nothing per command:

* the connection limit (:class:`ConnectionLimit`) stops reading the listening
  ports while the server holds its maximum of connections and resumes when
  one closes; a connection accepted over it is closed at once, counted in
  :attr:`ConnectionLimit.refused` (``beanstalk_refused_connections_total`` in
  /metrics) and logged (at most one line per :data:`LOG_EVERY` seconds);
* the memory limit is the engine's ``max_memory``: the engine counts the
  bytes of stored bodies (``job_bytes``) and answers a put that would take
  that count over the limit with ``OUT_OF_MEMORY``;
* :func:`raise_open_file_limit` lifts ``RLIMIT_NOFILE`` to the hard limit (or
  as far as the kernel allows), so a server can hold tens of thousands of
  connections without the operator remembering ``ulimit -n``.
"""
from __future__ import annotations

import resource
from typing import List, Optional, Tuple

from twisted.logger import Logger


log = Logger(namespace="twisted_stalk.limits")

#: Descriptors kept back from the connection limit derived from RLIMIT_NOFILE:
#: stdio, the epoll and waker descriptors, Twisted's EMFILE reserve, the
#: listening sockets, the binlog (its lock, directory, current and compacted
#: files), the metrics port and its at most ``metrics.MAX_CONNECTIONS``
#: connections (16), and room for an accept over the limit.
RESERVED_FDS = 64
#: A flood of refused connections logs one line per this many seconds.
LOG_EVERY = 10.0
#: Tried when the hard limit is unlimited (macOS refuses more than OPEN_MAX).
_FALLBACK_TARGETS = (1048576, 524288, 65536, 10240)


# ----------------------------------------------------------------- open files

def raise_open_file_limit() -> Tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` as far as allowed; returns (soft, hard).

    Never lowers it and never fails: when the kernel refuses, the limit stays
    as it was (the caller reports what is in force).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        targets = [_nr_open()] + list(_FALLBACK_TARGETS)
    else:
        targets = [hard]
    for target in targets:
        if target is None or (soft != resource.RLIM_INFINITY and target <= soft):
            continue
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            break
        except (ValueError, OSError):
            continue
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def _nr_open() -> Optional[int]:
    try:
        with open("/proc/sys/fs/nr_open") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def connections_allowed_by(soft_limit: int) -> int:
    """The default connection limit for an open-file limit of ``soft_limit``."""
    if soft_limit == resource.RLIM_INFINITY:
        return 0  # unlimited
    return max(1, soft_limit - RESERVED_FDS)


def open_fds() -> Optional[int]:
    """Descriptors this process has open (Linux /proc; None elsewhere)."""
    import os
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the listdir's own
    except OSError:
        return None


# ---------------------------------------------------------------- connections

class ConnectionLimit:
    """At most ``maximum`` connections at once.

    At the limit the server stops accepting: the listening ports registered
    with :meth:`watch` stop being read (``stopReading``), so a flood of
    connections neither wakes the reactor nor takes descriptors; those
    connections wait in the kernel's listen backlog and are accepted, in
    order, as open ones close (:meth:`closed` resumes reading).  A watched
    port accepts at most as many connections per turn as there are free
    places (its ``numberAccepts``, set before each of its reads), so it never
    accepts one it must close.  A connection accepted over the limit all the
    same (a port that cannot pause or be bounded) is refused: :meth:`refuse`
    counts it and the factory returns no protocol, so the port closes the
    socket at once.  ``refused`` counts those, plus the connections Twisted
    accepts and closes when the process runs out of descriptors (its EMFILE
    recovery; see :func:`emfile_closes`): every connection the server closes
    unserved.  A connection the kernel drops because the backlog is full never
    reaches the process and is not counted (see docs/operations.md).
    """

    def __init__(self, maximum: int, clock, explicit: bool = True) -> None:
        self.maximum = maximum
        #: True for --max-connections, False when derived from RLIMIT_NOFILE.
        self.explicit = explicit
        #: Connections accepted over the limit and closed at once.
        self.over_limit = 0
        #: Times accepting stopped because the limit was reached.
        self.pauses = 0
        self.paused = False
        #: Connections open now (as last reported by :meth:`opened`/:meth:`closed`).
        self.open = 0
        self.ports: List[object] = []
        self._clock = clock
        self._emfile_base = _emfile_closed[0]
        self._logged_at: Optional[float] = None
        self._unlogged = 0

    @property
    def refused(self) -> int:
        """Every connection closed unserved: over the limit, or by EMFILE recovery."""
        return self.over_limit + _emfile_closed[0] - self._emfile_base

    def watch(self, port) -> None:
        """Pause and resume ``port`` (a listening port of this server) at the limit."""
        _watch_emfile()
        self.ports.append(port)
        if self.paused:
            _pause(port)
        read = getattr(port, "doRead", None)
        if read is not None and hasattr(port, "numberAccepts"):
            def bounded_read():
                # Accept no more than there are places (Twisted's Port accepts
                # up to numberAccepts per read, then adapts that number).
                port.numberAccepts = max(1, self.maximum - self.open)
                return read()
            port.doRead = bounded_read

    def opened(self, count: int) -> None:
        """A connection opened; ``count`` are open now."""
        self.open = count
        if count >= self.maximum and not self.paused:
            self.paused = True
            self.pauses += 1
            for port in self.ports:
                _pause(port)

    def closed(self, count: int) -> None:
        """A connection closed; ``count`` are open now."""
        self.open = count
        if self.paused and count < self.maximum:
            self.paused = False
            for port in self.ports:
                _resume(port)

    def refuse(self, addr) -> None:
        """Count and (rate-limited) log a connection over the limit; the
        factory returns this None as its protocol: the port closes the socket."""
        self.over_limit += 1
        now = self._clock.seconds()
        if self._logged_at is None or now - self._logged_at >= LOG_EVERY:
            peer = getattr(addr, "host", None) or str(addr)
            port = getattr(addr, "port", None)
            log.warn("refused connection from {peer}: at the limit of {maximum} "
                     "connections ({refused} refused so far, {since} since the last "
                     "such message)", peer=peer if port is None else f"{peer}:{port}",
                     maximum=self.maximum, refused=self.refused, since=self._unlogged + 1)
            self._logged_at = now
            self._unlogged = 0
        else:
            self._unlogged += 1
        return None


def _pause(port) -> None:
    stop = getattr(port, "stopReading", None)
    if stop is not None and getattr(port, "connected", False):
        stop()


def _resume(port) -> None:
    start = getattr(port, "startReading", None)
    if start is not None and getattr(port, "connected", False):
        start()


#: Connections Twisted's listening ports closed in EMFILE recovery (process-wide).
_emfile_closed = [0]
_emfile_watched = [False]


def _count_emfile(event) -> None:
    if event.get("log_format", "").startswith("EMFILE recovery: Closed socket"):
        _emfile_closed[0] += 1


def _watch_emfile() -> None:
    """Count Twisted's EMFILE-recovery closes (it logs one event per socket)."""
    if not _emfile_watched[0]:
        from twisted.logger import globalLogPublisher
        globalLogPublisher.addObserver(_count_emfile)
        _emfile_watched[0] = True


def emfile_closes() -> int:
    """Connections closed by Twisted's EMFILE recovery since the first :meth:`ConnectionLimit.watch`."""
    return _emfile_closed[0]


def install_connection_limit(factory, maximum: int, clock, explicit: bool = True
                             ) -> Optional[ConnectionLimit]:
    """Stop accepting at ``maximum`` connections (0: no limit)."""
    if maximum <= 0:
        factory.connection_limit = None
        return None
    limit = factory.connection_limit = ConnectionLimit(maximum, clock, explicit)
    return limit


# --------------------------------------------------------------------- memory

def install_memory_limit(factory, max_bytes: int) -> None:
    """Make put answer OUT_OF_MEMORY once stored job bytes would exceed
    ``max_bytes`` (0: no limit).  The engine counts stored bytes always."""
    factory.engine.max_memory = max(0, max_bytes)


def memory_limit_of(factory) -> int:
    """The --max-memory in force for ``factory`` (0: none)."""
    return factory.engine.memory().limit


__all__ = ["ConnectionLimit", "emfile_closes", "RESERVED_FDS",
           "connections_allowed_by", "install_connection_limit", "install_memory_limit",
           "memory_limit_of", "open_fds", "raise_open_file_limit"]
