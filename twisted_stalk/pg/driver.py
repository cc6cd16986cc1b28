# -*- test-case-name: tests.test_pg_faults -*-
"""One PostgreSQL connection driven by the Twisted reactor: libpq, non-blocking, pipelined.

:class:`PgConnection` wraps psycopg's libpq binding (:mod:`psycopg.pq`, its
documented low-level API) and registers the connection's socket with the
reactor itself, so it runs under any reactor (stalkd's lean epoll loop,
twistd's default) without threads or asyncio.

* **Connect**: ``PQconnectStart`` / ``PQconnectPoll``, re-registering the
  socket after every step (libpq may open a new socket for the next host of
  a multi-host string); ``connect_timeout`` is enforced here, since libpq
  does not enforce it in non-blocking mode.
* **Statements**: the connection is in pipeline mode.  :meth:`PgConnection.execute`
  queues a prepared statement and a Sync, so each statement is its own
  transaction (committed, or rolled back on error, on its own), and many
  statements from many clients are in flight at once on one connection.
  Results come back in order; each Deferred fires with a :class:`Rows`.
* **Notifications** (LISTEN/NOTIFY) are handed to ``on_notify`` as they arrive.
* **Loss**: every outstanding Deferred fails with :class:`PgConnectionLost`
  and ``on_lost`` is called once.

Values go out as text (numbers, arrays) or binary (``bytea``); results come
back in binary and are decoded by column type (:func:`decode`).

The libpq binding (:data:`BINDING`): psycopg's :mod:`psycopg.pq` (compiled on
CPython), or on PyPy this package's own :mod:`.libpq` (cffi, ABI mode), which
keeps the same members: psycopg's binding on PyPy is its pure-Python
(``ctypes``) one, which PyPy runs slowly (docs/performance.md, "The engine on
PyPy").  ``TWISTED_STALK_PG_LIBPQ=psycopg`` or ``=cffi`` chooses one anywhere.
psycopg's ``ctypes`` binding still serves the start-up's blocking connections
on PyPy; :func:`fit_pypy_ctypes` makes it work on PyPy releases whose
``ctypes`` cannot hold a weak reference (importing this module applies it).
"""
from __future__ import annotations

import os
import platform
import struct
import weakref
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

from psycopg import pq
from twisted.internet import defer
from twisted.internet.interfaces import IReadDescriptor, IWriteDescriptor
from twisted.python.failure import Failure
from zope.interface import implementer

# libpq's numbers, which psycopg's enums equal (and :mod:`.libpq` returns).
_OK = 0             # CONNECTION_OK
_BAD = 1            # CONNECTION_BAD
_COMMAND_OK = 1     # PGRES_COMMAND_OK
_TUPLES_OK = 2      # PGRES_TUPLES_OK
_PIPELINE_SYNC = 10  # PGRES_PIPELINE_SYNC
_POLL_FAILED = 0    # PGRES_POLLING_FAILED
_POLL_READING = 1
_POLL_WRITING = 2
_POLL_OK = 3
_SQLSTATE = ord("C")  # PG_DIAG_SQLSTATE

#: The environment variable that chooses the binding: ``psycopg`` or ``cffi``.
BINDING_VARIABLE = "TWISTED_STALK_PG_LIBPQ"


def choose_binding(wanted: Optional[str] = None) -> Tuple[str, Any]:
    """The libpq binding's name and ``PGconn`` class: ``wanted`` (default: the
    environment's :data:`BINDING_VARIABLE`), else :mod:`.libpq` on PyPy when it
    loads, else psycopg's."""
    if wanted is None:
        wanted = os.environ.get(BINDING_VARIABLE, "")
    if wanted not in ("", "psycopg", "cffi"):
        raise ValueError(f"{BINDING_VARIABLE}={wanted!r}: psycopg or cffi")
    if wanted == "cffi" or (not wanted and platform.python_implementation() == "PyPy"):
        try:
            from . import libpq
            return "cffi", libpq.PGconn
        except (ImportError, OSError):
            if wanted:
                raise
    return "psycopg", pq.PGconn



class _HeldRef:
    """A weak reference to a ``PGconn`` that can itself be weakly referenced."""

    __slots__ = ("_ref", "__weakref__")

    def __init__(self, obj: Any) -> None:
        self._ref = weakref.ref(obj)

    def __call__(self) -> Any:
        return self._ref()


#: Each PGconn's :class:`_HeldRef`, alive exactly as long as its PGconn.
_held_refs: "weakref.WeakKeyDictionary[Any, _HeldRef]" = weakref.WeakKeyDictionary()


def _held_ref(obj: Any) -> _HeldRef:
    ref = _held_refs[obj] = _HeldRef(obj)
    return ref


def fit_pypy_ctypes() -> bool:
    """Make psycopg's ``ctypes`` binding create connections on PyPy 7.3.11
    and older (Debian 12's); True if it had to.

    Each ``PGconn`` hands libpq a ``py_object(weakref.ref(self))`` for its
    notice receiver.  PyPy's ``ctypes`` keeps a ``py_object``'s value as a
    weak reference itself, and a ``weakref.ref`` cannot be weakly referenced:
    ``TypeError: cannot create weak reference to 'weakref' object``
    (pypy/pypy#3882, psycopg/psycopg#391).  So, only where that ``TypeError``
    happens, psycopg's binding gets in place of ``weakref.ref`` a callable
    weak reference that can be weakly referenced, kept alive by its
    connection (:data:`_held_refs`): psycopg's notice receiver calls what it
    reads back (psycopg/psycopg#686) and gets the connection, as on CPython."""
    if platform.python_implementation() != "PyPy" or pq.__impl__ != "python":
        return False
    from ctypes import py_object

    from psycopg.pq import pq_ctypes
    if pq_ctypes.ref is _held_ref:
        return True
    probe = _HeldRef(fit_pypy_ctypes)
    try:
        py_object(weakref.ref(probe))
    except TypeError:
        pq_ctypes.ref = _held_ref  # type: ignore[attr-defined]
        return True
    return False


fit_pypy_ctypes()

#: The binding the driver's connections use (:func:`choose_binding`).
BINDING, PGconn = choose_binding()

_int8 = struct.Struct(">q").unpack
_int4 = struct.Struct(">i").unpack
_int2 = struct.Struct(">h").unpack
_float8 = struct.Struct(">d").unpack


def _bool(v: bytes) -> bool:
    return v != b"\x00"


#: Decoders of binary column values by type oid (bytea and text stay bytes).
DECODERS: Dict[int, Callable[[bytes], Any]] = {
    20: lambda v: _int8(v)[0],
    23: lambda v: _int4(v)[0],
    21: lambda v: _int2(v)[0],
    701: lambda v: _float8(v)[0],
    16: _bool,
    17: bytes,
    25: bytes,
    1043: bytes,
    19: bytes,
}


class PgError(Exception):
    """A statement failed; ``sqlstate`` is PostgreSQL's five-character code."""

    def __init__(self, message: str, sqlstate: Optional[str] = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class PgConnectionLost(PgError):
    """The connection to the server is gone (or never came up)."""


#: Rows of a result: one tuple of decoded values per row.
Rows = List[Tuple[Any, ...]]


def decode(res: Any) -> Rows:
    """The rows of a binary-format result, each value decoded by its column type."""
    n = res.ntuples
    if not n:
        return []
    nf = res.nfields
    decoders = [DECODERS.get(res.ftype(i), bytes) for i in range(nf)]
    get = res.get_value
    rows = []
    for r in range(n):
        row = []
        for c in range(nf):
            v = get(r, c)
            row.append(None if v is None else decoders[c](v))
        rows.append(tuple(row))
    return rows


def _quietly(remove: Callable[[Any], None], selectable: Any) -> None:
    """Unregister ``selectable``, whose socket libpq may already have closed
    (a lost connection, or the next host of a multi-host string): the poller
    then refuses the stale descriptor, which is already out of it."""
    try:
        remove(selectable)
    except (OSError, KeyError, ValueError):
        pass


class _Pending:
    __slots__ = ("d", "result", "ended")

    def __init__(self, d: Optional[defer.Deferred]) -> None:
        self.d = d
        self.result = None
        self.ended = False


@implementer(IReadDescriptor, IWriteDescriptor)
class PgConnection:
    """A pipelined libpq connection on the reactor (see the module docstring)."""

    def __init__(self, reactor: Any, conninfo: str,
                 statements: Optional[Dict[str, str]] = None,
                 on_notify: Optional[Callable[[bytes, bytes], None]] = None,
                 on_lost: Optional[Callable[["PgConnection"], None]] = None,
                 connect_timeout: float = 10.0,
                 settings: Optional[Dict[str, str]] = None) -> None:
        self.reactor = reactor
        self.conninfo = conninfo
        #: Prepared at connect: name -> SQL.
        self.statements = statements or {}
        #: Session settings made at connect, before preparing: name -> value
        #: (and made again, :meth:`apply_settings`, when changed meanwhile).
        self.settings = settings if settings is not None else {}
        self._sent_settings: Dict[str, str] = {}
        self.on_notify = on_notify
        self.on_lost = on_lost
        self.connect_timeout = connect_timeout
        self.pgconn: Optional[Any] = None
        self._fd = -1
        #: (device, inode) of the libpq socket that ``_fd`` duplicates.
        self._key: Optional[Tuple[int, int]] = None
        self._reading = False
        self._writing = False
        self._pending: Deque[_Pending] = deque()
        self._connecting: Optional[defer.Deferred] = None
        self._timeout = None
        self.ready = False
        self.lost = False
        #: True while libpq's connect state machine runs.
        self._polling = False

    # ------------------------------------------------------------ connect

    def connect(self) -> defer.Deferred:
        """Open the connection and prepare the statements; fires with self."""
        d = self._connecting = defer.Deferred()
        try:
            self.pgconn = PGconn.connect_start(self.conninfo.encode())
        except Exception as e:  # pragma: no cover - out of memory in libpq
            self._connecting = None
            return defer.fail(PgConnectionLost(str(e)))
        if self.pgconn.status == _BAD:
            self._connecting = None
            return defer.fail(PgConnectionLost(self._message()))
        self._timeout = self.reactor.callLater(self.connect_timeout, self._connect_timed_out)
        self._polling = True
        self._poll_connect(_POLL_WRITING)
        return d

    def _connect_timed_out(self) -> None:
        self._timeout = None
        self._fail_connect("connection timed out")

    def _poll_connect(self, status: Any) -> None:
        try:
            if status == _POLL_OK:
                self._polling = False
                self._watch(True, False)
                self._connected()
            elif status == _POLL_FAILED:
                self._polling = False
                self._fail_connect(self._message())
            else:
                self._watch(status == _POLL_READING, status == _POLL_WRITING)
        except Exception as e:  # a socket that went away under us
            self._polling = False
            self._fail_connect(f"connecting: {e}")

    def _watch(self, read: bool, write: bool) -> None:
        """Register libpq's current socket for ``read``/``write``.

        The reactor watches a duplicate of it that this object owns: libpq
        closes its socket on its own (a lost connection, the next host of a
        multi-host string), and a number the reactor still holds could then
        name another socket.  The duplicate is closed only after the reactor
        has let go of it.
        """
        src = self.pgconn.socket
        st = os.fstat(src)
        key = (st.st_dev, st.st_ino)
        if key != self._key:
            self._unwatch()
            self._fd = os.dup(src)
            self._key = key
        self._register(read, write)

    def _unwatch(self) -> None:
        self._register(False, False)
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = -1
        self._key = None

    def _connected(self) -> None:
        pgconn = self.pgconn
        pgconn.nonblocking = 1
        pgconn.enter_pipeline_mode()
        prepared = []
        self._sent_settings = dict(self.settings)
        if self.settings:
            d0: defer.Deferred = defer.Deferred()
            calls = ", ".join("set_config($%d, $%d, false)" % (2 * i + 1, 2 * i + 2)
                              for i in range(len(self.settings)))
            pgconn.send_query_params(f"SELECT {calls}".encode(),
                                     [v.encode() for kv in self.settings.items() for v in kv])
            pgconn.pipeline_sync()
            self._pending.append(_Pending(d0))
            prepared.append(d0)
        for name, sql in self.statements.items():
            d: defer.Deferred = defer.Deferred()
            pgconn.send_prepare(name.encode(), sql.encode())
            pgconn.pipeline_sync()
            self._pending.append(_Pending(d))
            prepared.append(d)
        self._flush()
        done = defer.DeferredList(prepared, fireOnOneErrback=True, consumeErrors=True)
        done.addCallbacks(lambda _: self._ready(), self._prepare_failed)

    def _ready(self) -> None:
        if self._timeout is not None and self._timeout.active():
            self._timeout.cancel()
        self._timeout = None
        self.ready = True
        if self.settings != self._sent_settings:  # changed while it connected
            self.apply_settings().addErrback(lambda _: None)
        d, self._connecting = self._connecting, None
        if d is not None:
            d.callback(self)

    def apply_settings(self) -> defer.Deferred:
        """Make :attr:`settings` (changed since connect) the session's own, ahead
        of every statement sent after this call."""
        self._sent_settings = dict(self.settings)
        if not self.settings:
            return defer.succeed([])
        calls = ", ".join("set_config($%d, $%d, false)" % (2 * i + 1, 2 * i + 2)
                          for i in range(len(self.settings)))
        return self.query(f"SELECT {calls}",
                          [v.encode() for kv in self.settings.items() for v in kv])

    def _prepare_failed(self, failure: Failure) -> None:
        error = failure.value.subFailure if hasattr(failure.value, "subFailure") else failure
        self._fail_connect(f"preparing statements: {error.getErrorMessage()}")

    def _fail_connect(self, message: str) -> None:
        d, self._connecting = self._connecting, None
        self._shut(PgConnectionLost(message), notify=False)
        if d is not None:
            d.errback(PgConnectionLost(message))

    def _message(self) -> str:
        pgconn = self.pgconn
        if pgconn is None:
            text = "no connection"
        elif hasattr(pgconn, "get_error_message"):
            text = pgconn.get_error_message()
        else:  # psycopg before 3.2: a property
            text = pgconn.error_message
        return text.strip() if isinstance(text, str) else text.decode("utf-8", "replace").strip()

    # -------------------------------------------------------------- reactor

    def _register(self, read: bool, write: bool) -> None:
        reactor = self.reactor
        if self._reading and not read:
            _quietly(reactor.removeReader, self)
        elif read and not self._reading:
            reactor.addReader(self)
        if self._writing and not write:
            _quietly(reactor.removeWriter, self)
        elif write and not self._writing:
            reactor.addWriter(self)
        self._reading, self._writing = read, write

    def fileno(self) -> int:
        return self._fd

    def logPrefix(self) -> str:
        return "PgConnection"

    def connectionLost(self, reason: Failure) -> None:
        self._reading = self._writing = False
        self._shut(PgConnectionLost(str(reason.value)))

    def doRead(self) -> None:
        if self._polling:
            self._poll_connect(self.pgconn.connect_poll())
            return
        pgconn = self.pgconn
        try:
            pgconn.consume_input()
        except Exception:  # psycopg raises OperationalError
            self._shut(PgConnectionLost(self._message()))
            return
        self._drain_results()
        if self.on_notify is not None and self.pgconn is not None:
            while True:
                n = self.pgconn.notifies()
                if n is None:
                    break
                self.on_notify(n.relname, n.extra)
        if self.pgconn is not None and self.pgconn.status != _OK:
            self._shut(PgConnectionLost(self._message()))

    def doWrite(self) -> None:
        if self._polling:
            self._poll_connect(self.pgconn.connect_poll())
            return
        self._flush()

    # ------------------------------------------------------------ statements

    def execute(self, name: str, params: Sequence[Any] = (),
                formats: Optional[Sequence[int]] = None) -> defer.Deferred:
        """Run prepared statement ``name``; fires with its :data:`Rows`, or
        fails with :class:`PgError` / :class:`PgConnectionLost`.  ``params``
        are bytes (text, or binary where ``formats`` says 1), ints or None."""
        # A list: psycopg 3.1's compiled binding takes no other sequence.
        fmts = None if formats is None else list(formats)
        return self._send(lambda pgconn, values: pgconn.send_query_prepared(
            name.encode(), values, fmts, 1), params)

    def query(self, sql: str, params: Sequence[Any] = ()) -> defer.Deferred:
        """Run a one-off statement (not prepared)."""
        return self._send(lambda pgconn, values: pgconn.send_query_params(
            sql.encode(), values, None, None, 1), params)

    def _send(self, send: Callable[[Any, List[Any]], None], params: Sequence[Any]
              ) -> defer.Deferred:
        if not self.ready:
            return defer.fail(PgConnectionLost("not connected"))
        values = [p if p is None or p.__class__ is bytes else b"%d" % p for p in params]
        d: defer.Deferred = defer.Deferred()
        try:
            send(self.pgconn, values)
            self.pgconn.pipeline_sync()
        except Exception:
            self._shut(PgConnectionLost(self._message()))
            return defer.fail(PgConnectionLost("connection lost while sending"))
        self._pending.append(_Pending(d))
        if not self._writing:
            self._flush()
        return d

    @property
    def load(self) -> int:
        """Statements sent and not answered yet."""
        return len(self._pending)

    def _flush(self) -> None:
        pgconn = self.pgconn
        if pgconn is None:
            return
        try:
            more = pgconn.flush()
        except Exception:
            self._shut(PgConnectionLost(self._message()))
            return
        self._register(True, bool(more))

    def _drain_results(self) -> None:
        pending = self._pending
        while pending and self.pgconn is not None:
            pgconn = self.pgconn
            if pgconn.is_busy():
                return
            res = pgconn.get_result()
            entry = pending[0]
            if not entry.ended:
                if res is None:
                    entry.ended = True
                else:
                    entry.result = res
                continue
            if res is None:
                continue  # pragma: no cover - defensive: libpq gives the sync next
            if res.status != _PIPELINE_SYNC:
                # An error at the Sync: the implicit transaction did not commit.
                entry.result = res
                continue
            pending.popleft()
            self._deliver(entry)

    def _deliver(self, entry: _Pending) -> None:
        d = entry.d
        res = entry.result
        if d is None:
            return
        if res is None:
            d.errback(PgError("no result"))
            return
        status = res.status
        if status == _TUPLES_OK:
            rows = decode(res)
            res.clear()
            d.callback(rows)
        elif status == _COMMAND_OK:
            res.clear()
            d.callback([])
        else:
            message = res.error_message
            if isinstance(message, bytes):
                message = message.decode("utf-8", "replace")
            state = res.error_field(_SQLSTATE)
            res.clear()
            d.errback(PgError(message.strip() or str(status),
                              state.decode() if state else None))

    # -------------------------------------------------------------- closing

    def close(self) -> None:
        """Close the connection; outstanding statements fail."""
        self._shut(PgConnectionLost("closed"), notify=False)

    def _shut(self, error: PgError, notify: bool = True) -> None:
        if self.lost:
            return
        self.lost = True
        self.ready = False
        if self._timeout is not None and self._timeout.active():
            self._timeout.cancel()
        self._timeout = None
        self._unwatch()
        pgconn, self.pgconn = self.pgconn, None
        if pgconn is not None:
            try:
                pgconn.finish()
            except Exception:  # pragma: no cover
                pass
        pending, self._pending = self._pending, deque()
        for entry in pending:
            if entry.d is not None:
                entry.d.errback(PgConnectionLost(str(error)))
        if notify and self.on_lost is not None:
            self.on_lost(self)


__all__ = ["BINDING", "BINDING_VARIABLE", "PgConnectionLost", "DECODERS", "choose_binding", "PgConnection", "PgError", "Rows", "decode"]
