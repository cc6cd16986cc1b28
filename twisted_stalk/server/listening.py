# -*- test-case-name: tests.test_ops_startup -*-
"""Listening sockets at startup: bind now or exit with one line.

A server that cannot bind one of its listeners (``--listen``, ``--port``,
``--tls-listen``, ``--metrics``) must not start half-way: :func:`listen_now`
binds before the reactor runs and raises :class:`ListenError` with one line
naming the listener; ``twistd beanstalk`` (:class:`ListenerService`) turns it
into ``SystemExit`` (status 1, the line on stderr), ``stalkd`` into status 111
as for its main port.
"""
from __future__ import annotations

from typing import Callable, List, Optional

from twisted.application.service import Service
from twisted.python.failure import Failure


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


__all__ = ["ListenError", "ListenerService", "listen_now"]
