# -*- test-case-name: tests.test_ops_startup -*-
"""What ``stalkd`` does before Twisted is imported: early signals and lean imports.

Nothing here imports Twisted (or anything of :mod:`twisted_stalk.server`, whose
package imports it): this module runs while the listening socket is already
bound and the heavy imports are still to come.

:class:`EarlySignals`
    From the moment the port is bound, SIGTERM and SIGINT end the process
    with status 0 (at once, as a server with ``--shutdown-grace 0`` does: the
    early loop, :mod:`twisted_stalk.server._early`, serves only without a
    grace, and with ``-b`` nothing is served yet; if that exit is lost
    where the signal lands, the request is remembered and the server stops as
    soon as it can) and SIGUSR1 is remembered, to enter drain mode as soon as
    the queue exists.  The reactor's own handlers replace these once it runs.

:func:`lean_imports`
    Imports nothing that serving plain TCP does not need (see
    docs/operations.md, "Startup time"): while it is in force, pyOpenSSL is
    reported missing unless TLS was asked for (Twisted then leaves out its
    TLS transports, ~45 ms of ``cryptography`` and ``OpenSSL`` imports), and
    a module Twisted imports only for client-side code (``http.cookiejar``,
    which pulls in ``urllib.request``, ``http.client`` and ``email``, ~8 ms)
    is loaded lazily: on the first use of one of its names, which a server
    never makes.
"""
from __future__ import annotations

# Only what the bind needs may be imported at the top: EarlySignals is
# installed before the socket is bound, and on PyPy even importlib.util or
# typing costs tens of milliseconds.
# _signal: signal's functions and numbers, without the enums its module
# builds (the enum module costs the first reply ~3 ms).
import _signal as signal
import sys

#: Loaded lazily by :func:`lean_imports`: imported by ``twisted.python.compat`` for
#: code a server never runs.  (``ssl`` is not here: asyncio, which
#: ``twisted.internet.defer`` imports, uses it at import time.)
LAZY_MODULES = ("http.cookiejar",)
#: Reported missing by :func:`lean_imports` unless TLS is wanted.
TLS_MODULES = ("OpenSSL",)


class EarlySignals:
    """Signal handling from the bind until the reactor's handlers take over."""

    def __init__(self) -> None:
        #: True once SIGUSR1 arrived: the caller enters drain mode.
        self.drain_requested = False
        #: SIGTERM or SIGINT once one arrived, else 0 (see :meth:`_exit`).
        self.stop_signal = 0
        #: False once the reactor is about to run (:meth:`only_remember`).
        self._exits = True
        self._unraisable = None

    def install(self) -> "EarlySignals":
        signal.signal(signal.SIGTERM, self._exit)
        signal.signal(signal.SIGINT, self._exit)
        # A signal that lands in a callback Python cannot raise out of (a
        # weakref's, as importlib's module locks use) makes its SystemExit
        # "ignored", printed with a traceback; the stop itself is kept
        # (``stop_signal``), so that SystemExit is dropped quietly.
        self._unraisable = sys.unraisablehook
        sys.unraisablehook = self._quiet_exit
        signal.signal(signal.SIGUSR1, self._drain)
        # systemctl reload (the units' ExecReload) must not end a server that
        # is still starting: the console, once up, reads its credentials
        # again on SIGHUP (web/reload.py), and they are read at start anyway.
        signal.signal(signal.SIGHUP, self._hangup)
        return self

    def _exit(self, signum, frame) -> None:
        # Exit as a stopped server without --shutdown-grace does (the early
        # loop serves only then; with -b nothing is acknowledged yet).
        # Where the signal lands that exit can be lost (CPython's compiler,
        # importing a module, has dropped it; a reactor's event trigger
        # swallows it), so the request is also kept: the server looks at
        # ``stop_signal`` before it runs the reactor and once its own
        # handlers are in, and stops then.
        self.stop_signal = signum
        if self._exits:
            raise SystemExit(0)

    def _quiet_exit(self, unraisable) -> None:
        if not (self.stop_signal and isinstance(unraisable.exc_value, SystemExit)):
            self._unraisable(unraisable)

    def only_remember(self) -> None:
        """From now on a SIGTERM or SIGINT is only remembered, for the
        server's own handlers to act on once they are in: called just before
        the reactor runs, whose start installs handlers inside an event
        trigger, where a SystemExit would be logged as a critical error
        (with its traceback) and swallowed."""
        self._exits = False
        if sys.unraisablehook == self._quiet_exit:
            sys.unraisablehook = self._unraisable
        if signal.getsignal(signal.SIGHUP) == self._hangup:
            # No console took SIGHUP over: it ends the server, as beanstalkd's.
            signal.signal(signal.SIGHUP, signal.SIG_DFL)

    def _hangup(self, signum, frame) -> None:
        """SIGHUP while starting: nothing to do (see :meth:`install`)."""

    def _drain(self, signum, frame) -> None:
        self.drain_requested = True


def _lazy(name: str) -> None:
    """Put a lazily loaded ``name`` in ``sys.modules`` (no-op if already imported)."""
    import importlib.util
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
        return
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


class lean_imports:
    """``with lean_imports(tls):`` import only what serving needs (see the
    module docstring)."""

    def __init__(self, tls: bool) -> None:
        self.tls = tls
        self.blocked: list[str] = []

    def __enter__(self) -> None:
        import importlib
        for name in LAZY_MODULES:
            parent = name.rpartition(".")[0]
            if parent:
                importlib.import_module(parent)
            _lazy(name)
        if not self.tls:
            for name in TLS_MODULES:
                if name not in sys.modules:
                    sys.modules[name] = None  # type: ignore[assignment]  # "import" fails
                    self.blocked.append(name)

    def __exit__(self, *exc_info: object) -> None:
        for name in self.blocked:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


__all__ = ["EarlySignals", "LAZY_MODULES", "TLS_MODULES", "lean_imports"]
