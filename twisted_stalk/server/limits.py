"""Limits: connections (``--max-connections``), job memory (``--max-memory``)
and the process's open-file limit.

Everything here is installed at start and costs nothing per command:

* the connection limit is checked once per accepted connection, in
  :meth:`BeanstalkServerFactory.buildProtocol`; connection N+1 gets a protocol
  that closes it at once (never left hanging in the listen backlog), is counted
  in :attr:`ConnectionLimit.refused` (``beanstalk_refused_connections_total``
  in /metrics) and logged (at most one line per :data:`LOG_EVERY` seconds);
* the memory limit is the engine's ``max_memory``: the engine counts the
  bytes of stored bodies (``job_bytes``) and answers a put that would take
  that count over the limit with ``OUT_OF_MEMORY``;
* :func:`raise_open_file_limit` lifts ``RLIMIT_NOFILE`` to the hard limit (or
  as far as the kernel allows), so a server can hold tens of thousands of
  connections without the operator remembering ``ulimit -n``.
"""
from __future__ import annotations

import resource
from typing import Optional, Tuple

from twisted.internet import tcp
from twisted.internet.protocol import Protocol
from twisted.logger import Logger


log = Logger(namespace="twisted_stalk.limits")

#: Descriptors kept back from the connection limit derived from RLIMIT_NOFILE:
#: the listening sockets, binlog files, the metrics port and its scrapes.
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

class _Refused(Protocol):
    """Stands in for a connection over the limit: closes it at once."""

    def makeConnection(self, transport) -> None:
        self.transport = transport
        self.connected = 1
        if isinstance(transport, tcp.Server):
            transport.loseConnection()  # nothing written: a plain FIN
        else:
            # TLS and other wrappers: do not wait for a handshake to close.
            transport.abortConnection()

    def dataReceived(self, data: bytes) -> None:
        pass


class ConnectionLimit:
    """At most ``maximum`` connections; the factory asks :meth:`refuse` for
    a protocol for each one over it."""

    def __init__(self, maximum: int, clock, explicit: bool = True) -> None:
        self.maximum = maximum
        #: True for --max-connections, False when derived from RLIMIT_NOFILE.
        self.explicit = explicit
        self.refused = 0
        self._clock = clock
        self._logged_at: Optional[float] = None
        self._unlogged = 0

    def refuse(self, addr) -> Protocol:
        self.refused += 1
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
        return _Refused()


def install_connection_limit(factory, maximum: int, clock, explicit: bool = True
                             ) -> Optional[ConnectionLimit]:
    """Refuse connections beyond ``maximum`` (0: no limit)."""
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
    return factory.engine.max_memory


__all__ = ["ConnectionLimit", "RESERVED_FDS",
           "connections_allowed_by", "install_connection_limit", "install_memory_limit",
           "memory_limit_of", "open_fds", "raise_open_file_limit"]
