# -*- test-case-name: tests.test_web_api -*-
"""The web console (``--web ENDPOINT``, ``--web-auth FILE``): see docs/web.md.

Nothing here is imported unless ``--web`` is given.  The console serves a
page and a JSON API (``/api/v1/``) from the server's own reactor with
``twisted.web``; it reads the queue through the engine's inspection methods
and changes it only through the engine's protocol commands, each action in
its own engine session, large ones in slices across reactor turns.

* :mod:`.site`: the page, its assets and the API resource; :func:`make_site`.
* :mod:`.api`: the endpoints; :mod:`.views`: what they say about jobs, tubes, the server.
* :mod:`.actions` and :mod:`.tasks`: what the actions do, and how they run in slices.
* :mod:`.sampler`: rates over the last minutes, sampled on a timer.
* :mod:`.auth`, :mod:`.login`: the credentials file, logins, CSRF.
* :mod:`.http`: bounded requests, JSON answers, security headers.
"""
from __future__ import annotations

from typing import Optional


def make_console(factory, reactor, endpoint: str, auth_file: Optional[str] = None):
    """``(site, endpoint)`` for ``--web endpoint`` (and ``--web-auth auth_file``).

    Raises :class:`~twisted_stalk.web.auth.AuthFileError` for an unusable
    credentials file and ``ValueError`` for a malformed endpoint string.
    """
    from twisted.internet.endpoints import serverFromString

    from .auth import load
    from .site import make_site
    credentials = load(auth_file) if auth_file else None
    site = make_site(factory, reactor, credentials)
    return site, serverFromString(reactor, endpoint)


def console_service(factory, reactor, endpoint: str, auth_file: Optional[str] = None):
    """A service listening on ``endpoint`` with the console; its rate
    sampler runs while the service runs (``twistd beanstalk --web``)."""
    from twisted.application.internet import StreamServerEndpointService

    site, server_endpoint = make_console(factory, reactor, endpoint, auth_file)

    class ConsoleService(StreamServerEndpointService):
        def startService(self) -> None:
            site.console.start()
            super().startService()

        def stopService(self):
            site.console.stop()
            return super().stopService()

    service = ConsoleService(server_endpoint, site)
    service.site = site
    return service


def listen(factory, reactor, endpoint: str, auth_file: Optional[str] = None):
    """Listen now (``stalkd --web``); returns the Deferred of ``endpoint.listen``."""
    site, server_endpoint = make_console(factory, reactor, endpoint, auth_file)
    site.console.start()
    return server_endpoint.listen(site)


__all__ = ["console_service", "listen", "make_console"]
