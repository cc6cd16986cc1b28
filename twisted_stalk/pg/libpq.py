# -*- test-case-name: tests.test_pg_libpq -*-
"""A small binding of the libpq calls :mod:`.driver` makes, with cffi in ABI mode.

Why: on PyPy psycopg has no compiled binding and makes every libpq call
through ``ctypes``, which PyPy runs slowly (a drain spent about a third of
the node's time inside ``ctypes`` calls, and reading one result value costs
four of them).  cffi's calls are cheap on PyPy (its JIT calls the C function
directly) and cffi is part of PyPy, so this module needs no compiler and
builds nothing: it opens the system's ``libpq.so.5`` (Debian: ``libpq5``)
with ``ffi.dlopen`` at import.

The contract: :class:`PGconn` and :class:`PGresult` have exactly the
members of :mod:`psycopg.pq`'s ``PGconn`` / ``PGresult`` that the driver uses,
with the same arguments, values and errors (status values are libpq's
numbers, which psycopg's enums equal), so the driver runs unchanged over
either (tests/test_pg_libpq.py runs the driver's tests over both):

* ``PGconn.connect_start``, ``connect_poll``, ``status``, ``socket``,
  ``nonblocking`` (set), ``enter_pipeline_mode``, ``pipeline_sync``,
  ``send_query_params``, ``send_prepare``, ``send_query_prepared``,
  ``flush``, ``consume_input``, ``is_busy``, ``get_result``, ``notifies``,
  ``get_error_message``, ``error_message``, ``finish``;
* ``PGresult.status``, ``ntuples``, ``nfields``, ``ftype``, ``get_value``,
  ``error_message``, ``error_field``, ``clear``.

Failed calls raise :class:`LibpqError` (psycopg raises its
``OperationalError``; the driver catches either as ``Exception``).  Notices
(warnings sent by the server) are dropped, as psycopg's binding does when
no handler is set.  A connection or result not finished / cleared
explicitly is freed when garbage collected.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Any, Optional, Sequence

import cffi

_CDEF = """
typedef struct pg_conn PGconn;
typedef struct pg_result PGresult;
typedef unsigned int Oid;
typedef struct pgNotify { char *relname; int be_pid; char *extra; struct pgNotify *next; } PGnotify;
typedef void (*PQnoticeProcessor) (void *arg, const char *message);

PGconn *PQconnectStart(const char *conninfo);
int PQconnectPoll(PGconn *conn);
int PQstatus(const PGconn *conn);
int PQsocket(const PGconn *conn);
char *PQerrorMessage(const PGconn *conn);
void PQfinish(PGconn *conn);
int PQsetnonblocking(PGconn *conn, int arg);
int PQenterPipelineMode(PGconn *conn);
int PQpipelineSync(PGconn *conn);
int PQsendQueryParams(PGconn *conn, const char *command, int nParams, const Oid *paramTypes,
                      const char *const *paramValues, const int *paramLengths,
                      const int *paramFormats, int resultFormat);
int PQsendPrepare(PGconn *conn, const char *stmtName, const char *query, int nParams,
                  const Oid *paramTypes);
int PQsendQueryPrepared(PGconn *conn, const char *stmtName, int nParams,
                        const char *const *paramValues, const int *paramLengths,
                        const int *paramFormats, int resultFormat);
int PQflush(PGconn *conn);
int PQconsumeInput(PGconn *conn);
int PQisBusy(PGconn *conn);
PGresult *PQgetResult(PGconn *conn);
PGnotify *PQnotifies(PGconn *conn);
void PQfreemem(void *ptr);
PQnoticeProcessor PQsetNoticeProcessor(PGconn *conn, PQnoticeProcessor proc, void *arg);

int PQresultStatus(const PGresult *res);
int PQntuples(const PGresult *res);
int PQnfields(const PGresult *res);
Oid PQftype(const PGresult *res, int field_num);
char *PQgetvalue(const PGresult *res, int tup_num, int field_num);
int PQgetlength(const PGresult *res, int tup_num, int field_num);
int PQgetisnull(const PGresult *res, int tup_num, int field_num);
char *PQresultErrorMessage(const PGresult *res);
char *PQresultErrorField(const PGresult *res, int fieldcode);
void PQclear(PGresult *res);
"""

ffi = cffi.FFI()
ffi.cdef(_CDEF)
#: libpq itself (OSError at import when the system has none).
lib: Any = ffi.dlopen("libpq.so.5")
_NULL = ffi.NULL


@ffi.callback("void(void *, const char *)")
def _drop_notice(arg: Any, message: Any) -> None:
    """libpq's default prints notices on stderr; psycopg's binding drops them."""


class LibpqError(Exception):
    """A libpq call failed (psycopg raises ``OperationalError`` there)."""


#: A notification, as psycopg's ``PGnotify``: relname and extra are bytes.
PGnotify = namedtuple("PGnotify", "relname be_pid extra")


def _params(values: Sequence[Optional[bytes]], formats: Optional[Sequence[int]]) -> tuple:
    """libpq's parameter arrays for ``values`` (bytes or None), and what keeps
    their memory alive until the call returns.

    All values go into one NUL-separated buffer (text parameters are read up
    to their NUL; binary ones by length)."""
    n = len(values)
    if not n:
        return 0, _NULL, _NULL, _NULL, None
    blob = ffi.new("char[]", b"\0".join([b"" if v is None else v for v in values]) + b"\0")
    pointers = ffi.new("char *[]", n)
    lengths = ffi.new("int[]", n)
    at = 0
    for i, v in enumerate(values):
        if v is None:
            pointers[i] = _NULL
        else:
            pointers[i] = blob + at
            lengths[i] = len(v)
            at += len(v)
        at += 1
    fmts = _NULL if formats is None else ffi.new("int[]", list(formats))
    return n, pointers, lengths, fmts, (blob, fmts)


class PGresult:
    """One result (see the module docstring for the members kept)."""

    __slots__ = ("_res",)

    def __init__(self, res: Any) -> None:
        self._res = ffi.gc(res, lib.PQclear)

    @property
    def status(self) -> int:
        return lib.PQresultStatus(self._res)

    @property
    def ntuples(self) -> int:
        return lib.PQntuples(self._res)

    @property
    def nfields(self) -> int:
        return lib.PQnfields(self._res)

    def ftype(self, column: int) -> int:
        return lib.PQftype(self._res, column)

    def get_value(self, row: int, column: int) -> Optional[bytes]:
        res = self._res
        length = lib.PQgetlength(res, row, column)
        if not length and lib.PQgetisnull(res, row, column):
            return None
        return ffi.unpack(lib.PQgetvalue(res, row, column), length)

    @property
    def error_message(self) -> bytes:
        return ffi.string(lib.PQresultErrorMessage(self._res))

    def error_field(self, code: int) -> Optional[bytes]:
        value = lib.PQresultErrorField(self._res, code)
        return None if value == _NULL else ffi.string(value)

    def clear(self) -> None:
        """Free the result now (else the garbage collector does)."""
        res, self._res = self._res, _NULL
        if res != _NULL:
            ffi.release(res)


class PGconn:
    """One libpq connection (see the module docstring for the members kept)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Any) -> None:
        self._conn = ffi.gc(conn, lib.PQfinish)
        lib.PQsetNoticeProcessor(conn, _drop_notice, _NULL)

    @classmethod
    def connect_start(cls, conninfo: bytes) -> "PGconn":
        conn = lib.PQconnectStart(conninfo)
        if conn == _NULL:
            raise MemoryError("couldn't allocate PGconn")
        return cls(conn)

    def connect_poll(self) -> int:
        return lib.PQconnectPoll(self._live())

    def _live(self) -> Any:
        if self._conn == _NULL:
            raise LibpqError("the connection is closed")
        return self._conn

    @property
    def status(self) -> int:
        return 1 if self._conn == _NULL else lib.PQstatus(self._conn)  # 1: CONNECTION_BAD

    @property
    def socket(self) -> int:
        fd = lib.PQsocket(self._live())
        if fd == -1:
            raise LibpqError("the connection has no socket")
        return fd

    @property
    def nonblocking(self) -> int:  # pragma: no cover - the driver only sets it
        raise AttributeError("nonblocking is write-only here")

    @nonblocking.setter
    def nonblocking(self, arg: int) -> None:
        if lib.PQsetnonblocking(self._live(), arg) < 0:
            raise LibpqError(f"setting nonblocking: {self.get_error_message()}")

    def enter_pipeline_mode(self) -> None:
        if lib.PQenterPipelineMode(self._live()) != 1:
            raise LibpqError("failed to enter pipeline mode")

    def pipeline_sync(self) -> None:
        if lib.PQpipelineSync(self._live()) != 1:
            raise LibpqError("failed to sync pipeline")

    def send_query_params(self, command: bytes, params: Optional[Sequence[Optional[bytes]]],
                          param_types: Any = None, param_formats: Optional[Sequence[int]] = None,
                          result_format: int = 0) -> None:
        n, values, lengths, formats, _keep = _params(params or (), param_formats)
        if not lib.PQsendQueryParams(self._live(), command, n, _NULL, values, lengths,
                                     formats, result_format):
            raise LibpqError(f"sending query and params failed: {self.get_error_message()}")

    def send_prepare(self, name: bytes, command: bytes, param_types: Any = None) -> None:
        if not lib.PQsendPrepare(self._live(), name, command, 0, _NULL):
            raise LibpqError(f"sending query and params failed: {self.get_error_message()}")

    def send_query_prepared(self, name: bytes, params: Optional[Sequence[Optional[bytes]]],
                            param_formats: Optional[Sequence[int]] = None,
                            result_format: int = 0) -> None:
        n, values, lengths, formats, _keep = _params(params or (), param_formats)
        if not lib.PQsendQueryPrepared(self._live(), name, n, values, lengths, formats,
                                       result_format):
            raise LibpqError(f"sending prepared query failed: {self.get_error_message()}")

    def flush(self) -> int:
        more = lib.PQflush(self._live())
        if more < 0:
            raise LibpqError(f"flushing failed: {self.get_error_message()}")
        return more

    def consume_input(self) -> None:
        if not lib.PQconsumeInput(self._live()):
            raise LibpqError(f"consuming input failed: {self.get_error_message()}")

    def is_busy(self) -> int:
        return lib.PQisBusy(self._live())

    def get_result(self) -> Optional[PGresult]:
        res = lib.PQgetResult(self._live())
        return None if res == _NULL else PGresult(res)

    def notifies(self) -> Optional[PGnotify]:
        n = lib.PQnotifies(self._live())
        if n == _NULL:
            return None
        try:
            return PGnotify(ffi.string(n.relname), n.be_pid, ffi.string(n.extra))
        finally:
            lib.PQfreemem(n)

    @property
    def error_message(self) -> bytes:
        if self._conn == _NULL:
            return b"the connection is closed"
        return ffi.string(lib.PQerrorMessage(self._conn))

    def get_error_message(self, encoding: str = "utf-8") -> str:
        return self.error_message.decode(encoding, "replace")

    def finish(self) -> None:
        conn, self._conn = self._conn, _NULL
        if conn != _NULL:
            ffi.release(conn)


__all__ = ["LibpqError", "PGconn", "PGnotify", "PGresult", "ffi", "lib"]
