"""Limits: connections (``--max-connections``), job memory (``--max-memory``)
and the process's open-file limit.

Everything here is installed at start and costs nothing per command:

* the connection limit (:class:`ConnectionLimit`) stops reading the listening
  ports while the server holds its maximum of connections and resumes when
  one closes; a connection accepted over it is closed at once, counted in
  :attr:`ConnectionLimit.refused` (``beanstalk_refused_connections_total`` in
  /metrics) and logged (at most one line per :data:`LOG_EVERY` seconds); so
  is a connection that waited in the listen backlog for longer than
  ``--max-connections-wait`` (:class:`BacklogWait`): a short burst waits for a
  place, a client that would wait for hours sees its connection closed;
* the memory limit is the engine's (``Engine.limit_memory``): the engine counts the
  bytes of stored bodies (``job_bytes``) and answers a put that would take
  that count over the limit with ``OUT_OF_MEMORY``;
* :func:`raise_open_file_limit` lifts ``RLIMIT_NOFILE`` to the hard limit (or
  as far as the kernel allows), so a server can hold tens of thousands of
  connections without the operator remembering ``ulimit -n``.
"""
from __future__ import annotations

import resource
from collections import deque
from typing import Deque, Dict, List, Optional, Tuple

from twisted.logger import Logger

from ..wording import counted


log = Logger(namespace="twisted_stalk.limits")

#: Descriptors kept back from the connection limit derived from RLIMIT_NOFILE:
#: stdio, the epoll and waker descriptors, Twisted's EMFILE reserve, the
#: listening sockets, the binlog (its lock, directory, current and compacted
#: files), the metrics port and its at most ``metrics.MAX_CONNECTIONS``
#: connections (16), and room for an accept over the limit.
RESERVED_FDS = 64
#: A flood of refused connections logs one line per this many seconds.
LOG_EVERY = 10.0
#: Seconds a connection may wait in the listen backlog at the limit before it
#: is accepted and closed (``--max-connections-wait``).
DEFAULT_WAIT = 2.0
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

    While paused, :class:`BacklogWait` closes the connections that have
    waited in a port's backlog for longer than ``wait`` seconds (counted and
    logged as refused too), so a client never waits in silence for a place
    that may not free for hours.
    """

    def __init__(self, maximum: int, clock, explicit: bool = True,
                 wait: float = DEFAULT_WAIT) -> None:
        self.maximum = maximum
        #: Seconds a connection may wait in the backlog while paused.
        self.wait = wait
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
        self._backlog = BacklogWait(self)

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
            self._backlog.start()

    def closed(self, count: int) -> None:
        """A connection closed; ``count`` are open now."""
        self.open = count
        if self.paused and count < self.maximum:
            self.paused = False
            self._backlog.stop()
            for port in self.ports:
                _resume(port)

    def refuse(self, addr, why: str = "") -> None:
        """Count and (rate-limited) log a connection closed unserved; the
        factory returns this None as its protocol: the port closes the socket."""
        self.over_limit += 1
        now = self._clock.seconds()
        if self._logged_at is None or now - self._logged_at >= LOG_EVERY:
            peer = getattr(addr, "host", None) or str(addr)
            port = getattr(addr, "port", None)
            log.warn("refused connection from {peer}: at the limit of {places}"
                     + (f" ({why})" if why else "") + " ({refused} refused "
                     "so far, {since} since the last such message)",
                     peer=peer if port is None else f"{peer}:{port}", wait=self.wait,
                     places=counted(self.maximum, "connection"),
                     maximum=self.maximum, refused=self.refused, since=self._unlogged + 1)
            self._logged_at = now
            self._unlogged = 0
        else:
            self._unlogged += 1
        return None


class BacklogWait:
    """While the limit is paused: close what waited too long in the backlogs.

    Every ``tick`` (a quarter of the wait) it reads how many connections each
    watched port's backlog holds (Linux: ``TCP_INFO`` on a listening socket
    gives the accept queue's length) and notes when each new one was first
    seen; the backlog is first in, first out, so those first seen ``wait``
    seconds ago or more are at its head: it accepts them and closes them at
    once (:func:`close_cleanly`: the client reads end-of-file, also after
    sending a command while it waited), counted and logged by
    :meth:`ConnectionLimit.refuse`.  A connection so closed waited between
    ``wait`` and ``wait + tick`` seconds.  Those accepted meanwhile by the
    port (a place freed) leave from the head too, and are forgotten.

    Where the queue's length cannot be read (a unix socket, not Linux) a
    backlog that stays non-empty for ``wait`` seconds is emptied: such a
    connection waits at most ``wait + tick`` seconds, possibly less.
    """

    def __init__(self, limit: ConnectionLimit) -> None:
        self.limit = limit
        #: Per watched port: [(first seen at, how many; None: unknown)], oldest first.
        self.seen: Dict[int, Deque[List]] = {}
        self._call = None

    @property
    def tick(self) -> float:
        return max(0.05, self.limit.wait / 4)

    def start(self) -> None:
        """The limit paused: sweep now, then every tick until :meth:`stop`."""
        if self._call is None:
            self.seen = {}
            self.sweep()

    def stop(self) -> None:
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()
        self.seen = {}

    def sweep(self) -> None:
        clock = self.limit._clock
        self._call = None
        now = clock.seconds()
        for port in self.limit.ports:
            sock = getattr(port, "socket", None)
            if sock is not None and getattr(port, "connected", False):
                self._sweep_port(port, sock, now)
        self._call = clock.callLater(self.tick, self.sweep)

    def _sweep_port(self, port, sock, now: float) -> None:
        batches = self.seen.setdefault(id(port), deque())
        queued = backlog_length(sock)
        if queued is None:  # the length is unknown: is anyone waiting?
            if not _readable(sock):
                batches.clear()
            elif not batches:
                batches.append([now, None])
            if batches and now - batches[0][0] >= self.limit.wait:
                batches.clear()
                self._close(sock, None)
            return
        known = sum(b[1] for b in batches)
        gone = known - queued  # accepted from the head since the last sweep
        while gone > 0 and batches:
            taken = min(gone, batches[0][1])
            batches[0][1] -= taken
            gone -= taken
            if not batches[0][1]:
                batches.popleft()
        if queued > known:
            batches.append([now, queued - known])
        due = 0
        while batches and now - batches[0][0] >= self.limit.wait:
            due += batches.popleft()[1]
        if due:
            self._close(sock, due)

    def _close(self, sock, count: Optional[int]) -> None:
        """Accept ``count`` connections (None: all there are) and close each."""
        while count is None or count > 0:
            try:
                conn, addr = sock.accept()
            except OSError:  # none left (or the port's own accept deals with it)
                return
            close_cleanly(conn)
            self.limit.refuse(_Address(addr), "waited {wait:g} s in the backlog")
            if count is not None:
                count -= 1


#: At most this many bytes a refused client sent are read before its close.
DRAIN_LIMIT = 1 << 20


def close_cleanly(conn) -> None:
    """Close an accepted connection so that its client reads end-of-file:
    read (and drop) what it has sent, then close (FIN).  A client usually
    sends its first command while it waits in the backlog, and closing a
    socket with unread bytes makes the kernel answer with a reset instead
    (the client's read raises "connection reset").  At most
    :data:`DRAIN_LIMIT` bytes are read: a client that keeps sending more is
    reset all the same."""
    try:
        conn.setblocking(False)
        left = DRAIN_LIMIT
        while left > 0:
            data = conn.recv(min(left, 65536))
            if not data:
                break
            left -= len(data)
    except OSError:  # nothing more to read now (or the client already went)
        pass
    conn.close()


class _Address:
    """A socket address as refuse() reads it (host, port)."""

    def __init__(self, addr) -> None:
        if isinstance(addr, tuple) and len(addr) >= 2:
            self.host, self.port = addr[0], addr[1]
        else:
            self.host, self.port = str(addr or "unix socket"), None


#: tcp_info's state for a listening socket, and the offset of tcpi_unacked
#: (for a listening socket, the accept queue's length; Linux).
_TCP_LISTEN = 10
_UNACKED_AT = 24


def backlog_length(sock) -> Optional[int]:
    """Connections waiting in ``sock``'s accept queue (Linux TCP; None elsewhere)."""
    import socket
    import struct
    option = getattr(socket, "TCP_INFO", None)
    if option is None:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, option, 104)
    except OSError:  # not a TCP socket
        return None
    if len(info) < _UNACKED_AT + 4 or info[0] != _TCP_LISTEN:
        return None
    return struct.unpack_from("I", info, _UNACKED_AT)[0]


def _readable(sock) -> bool:
    import select
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return False


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


def install_connection_limit(factory, maximum: int, clock, explicit: bool = True,
                             wait: float = DEFAULT_WAIT) -> Optional[ConnectionLimit]:
    """Stop accepting at ``maximum`` connections (0: no limit); close those
    that wait in the backlog for longer than ``wait`` seconds meanwhile."""
    if maximum <= 0:
        factory.connection_limit = None
        return None
    limit = factory.connection_limit = ConnectionLimit(maximum, clock, explicit, wait)
    return limit


# --------------------------------------------------------------------- memory

def install_memory_limit(factory, max_bytes: int) -> None:
    """Make put answer OUT_OF_MEMORY once stored job bytes would exceed
    ``max_bytes`` (0: no limit).  The engine counts stored bytes always."""
    factory.engine.limit_memory(max_bytes)


def memory_limit_of(factory) -> int:
    """The --max-memory in force for ``factory`` (0: none)."""
    return factory.engine.memory().limit


__all__ = ["BacklogWait", "ConnectionLimit", "DEFAULT_WAIT", "backlog_length", "close_cleanly",
           "emfile_closes",
           "RESERVED_FDS",
           "connections_allowed_by", "install_connection_limit", "install_memory_limit",
           "memory_limit_of", "open_fds", "raise_open_file_limit"]
