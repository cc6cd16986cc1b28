# -*- test-case-name: tests.test_pg_libpq,tests.test_pg_units -*-
"""Which libpq binding the driver (:mod:`.driver`) uses, chosen once at import.

psycopg's :mod:`psycopg.pq` (compiled on CPython), or on PyPy this
package's own :mod:`.libpq` (cffi, ABI mode), which keeps the same members:
psycopg's binding on PyPy is its pure-Python (``ctypes``) one, which PyPy
runs slowly.  ``TWISTED_STALK_PG_LIBPQ=psycopg`` or ``=cffi`` chooses one
anywhere.  psycopg's ``ctypes`` binding still serves the start-up's blocking
connections on PyPy; :func:`fit_pypy_ctypes` makes it work on PyPy releases
whose ``ctypes`` cannot hold a weak reference (importing this module
applies it).
"""
from __future__ import annotations

import os
import platform
import weakref
from typing import Any, Optional, Tuple

from psycopg import pq

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


__all__ = ["BINDING", "BINDING_VARIABLE", "PGconn", "choose_binding", "fit_pypy_ctypes"]
