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
* :mod:`.auth`, :mod:`.login`: the credentials file, logins, CSRF;
  :mod:`.reload`: the file read again on SIGHUP.
* :mod:`.audit`: what each action says it did (the audit log).
* :mod:`.http`: bounded requests, JSON answers, security headers.
"""
from __future__ import annotations

from typing import Optional


def load_credentials(auth_file: Optional[str]):
    """The ``--web-auth`` credentials (None: the console is read-only).
    Raises :class:`~twisted_stalk.web.auth.AuthFileError` for an unusable
    file.  Read it before the server drops privileges (``-u``)."""
    if not auth_file:
        return None
    from .auth import load
    return load(auth_file)


def make_console(factory, reactor, credentials=None):
    """The console's twisted.web site for the server of ``factory``."""
    from .site import make_site
    return make_site(factory, reactor, credentials)


def _reload_on_sighup(site, reactor) -> None:
    """SIGHUP reads the credentials file again (:mod:`.reload`); without one it
    only says so (a ``systemctl reload`` must not end the server)."""
    from .reload import reload_on_sighup
    logins = site.console.logins
    reload_on_sighup(reactor, logins, logins.credentials.path if logins.credentials else None)


def console_service(factory, reactor, endpoint: str, auth_file: Optional[str] = None):
    """``twistd beanstalk --web``: a service that binds ``endpoint`` before
    twistd drops privileges (a failure ends twistd with one line) and runs
    the console's rate sampler while it runs."""
    from ..server.listening import ListenerService

    site = make_console(factory, reactor, load_credentials(auth_file))

    class ConsoleService(ListenerService):
        def startService(self) -> None:
            site.console.start()
            _reload_on_sighup(site, reactor)
            super().startService()

        def stopService(self):
            site.console.stop()
            return super().stopService()

    service = ConsoleService(endpoint, site, "--web", reactor)
    service.site = site
    return service


def listen(factory, reactor, endpoint: str, credentials=None):
    """``stalkd --web``: listen now; the listening port.  Raises
    :class:`~twisted_stalk.server.listening.ListenError` with one line."""
    from ..server.listening import listen_now

    site = make_console(factory, reactor, credentials)
    port = listen_now(reactor, endpoint, site, "--web")
    site.console.start()
    _reload_on_sighup(site, reactor)
    return port


__all__ = ["console_service", "listen", "load_credentials", "make_console"]
