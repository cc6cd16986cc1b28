# -*- test-case-name: tests.test_ops_startup -*-
"""Listening sockets at startup: bind now or exit with one line.

A server that cannot bind one of its listeners (``--listen``, ``--port``,
``--tls-listen``, ``--metrics``) must not start half-way: :func:`listen_now`
binds before the reactor runs and raises :class:`ListenError` with one line
naming the listener; ``twistd beanstalk`` (:class:`ListenerService`) turns it
into ``SystemExit`` (status 1, the line on stderr), ``stalkd`` into status 111
as for its main port.

Once bound, each listener is announced in one line (:func:`listening_line`):
what it serves and where, with the URL of the metrics and the web console.
"""
from __future__ import annotations

from typing import Callable, List, Optional

from twisted.application.service import Service
from twisted.logger import Logger
from twisted.python.failure import Failure

log = Logger(namespace="twisted_stalk.listening")


class ListenError(Exception):
    """A listener could not be set up; the message is the one line to print."""


def listen_now(reactor, description: str, factory, what: str):
    """Listen on the endpoint ``description``; the listening port.

    Raises :class:`ListenError` (naming ``what`` and the endpoint) when the
    endpoint string is malformed or the bind fails, or when the endpoint
    cannot say at once whether it is listening (every stream endpoint Twisted
    ships for servers binds synchronously).
    """
    from twisted.internet.endpoints import serverFromString
    try:
        endpoint = serverFromString(reactor, description)
    except Exception as e:  # ValueError, KeyError, TypeError from the parser
        raise ListenError(f"{what} {description}: bad endpoint: {e}")
    outcome: List[object] = []
    endpoint.listen(factory).addBoth(outcome.append)
    if not outcome:
        raise ListenError(f"{what} {description}: the endpoint did not bind at once")
    result = outcome[0]
    if isinstance(result, Failure):
        error = getattr(result.value, "socketError", None)  # CannotListenError's cause
        why = (getattr(error, "strerror", None) or str(error)) if error is not None \
            else result.getErrorMessage()
        raise ListenError(f"cannot listen on {what} {description}: {why}")
    return result


#: What each kind of listener serves, as the start-up lines name it.
SERVES = {"--listen": "beanstalk", "--port": "beanstalk", "--tls-listen": "beanstalk (TLS)",
          "--metrics": "metrics", "--web": "web console"}
#: The path a listener's URL shows (HTTP listeners only).
URL_PATHS = {"--metrics": "/metrics", "--web": "/"}


def listening_line(what: str, port, description: str = "") -> str:
    """The start-up line for a bound listener: what it serves and where, e.g.
    ``beanstalk on tcp 0.0.0.0:11300`` or ``web console on
    http://127.0.0.1:8080/``; an HTTP listener bound to every interface is
    shown as ``localhost`` (the bound address follows)."""
    serves = SERVES.get(what, what)
    host = port.getHost()
    name = getattr(host, "name", None)
    if name is not None or not hasattr(host, "port"):  # a unix socket
        path = name.decode("utf-8", "replace") if isinstance(name, bytes) else name
        return f"{serves} on unix {path or description}"
    address = f"[{host.host}]" if ":" in host.host else host.host
    if what not in URL_PATHS:
        return f"{serves} on tcp {address}:{host.port}"
    scheme = "https" if description.startswith("ssl:") else "http"
    if host.host in ("0.0.0.0", "::"):
        return (f"{serves} on {scheme}://localhost:{host.port}{URL_PATHS[what]} "
                f"(every interface: {address}:{host.port})")
    return f"{serves} on {scheme}://{address}:{host.port}{URL_PATHS[what]}"


class ListenerService(Service):
    """``twistd``: one listener, bound in ``privilegedStartService`` (before
    ``-u``/``-g`` drop privileges); a failure ends the process with one line."""

    def __init__(self, description: str, factory, what: str, reactor,
                 on_port: Optional[Callable[[object], None]] = None) -> None:
        self.description = description
        self.factory = factory
        self.what = what
        self.reactor = reactor
        self.on_port = on_port
        self.port = None

    def privilegedStartService(self) -> None:
        Service.privilegedStartService(self)
        try:
            self.port = listen_now(self.reactor, self.description, self.factory, self.what)
        except ListenError as e:
            raise SystemExit(f"twistd beanstalk: {e}")
        log.info("{line}", line=listening_line(self.what, self.port, self.description))
        if self.on_port is not None:
            self.on_port(self.port)

    def startService(self) -> None:
        if self.port is None:
            self.privilegedStartService()
        Service.startService(self)

    def stopService(self):
        Service.stopService(self)
        port, self.port = self.port, None
        if port is not None:
            return port.stopListening()
        return None


__all__ = ["ListenError", "ListenerService", "listen_now", "listening_line"]
