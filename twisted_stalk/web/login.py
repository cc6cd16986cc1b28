# -*- test-case-name: tests.test_web_auth -*-
"""Who is asking: login sessions (a cookie), bearer tokens, and the CSRF rule.

* Without ``--web-auth`` every request is an anonymous *viewer*: the console
  shows everything and changes nothing (actions answer 403).
* With it, a request identifies itself with ``Authorization: Bearer <token>``
  (scripts) or with the session cookie a login set (people); anything else
  gets 401 from the API.
* A POST authenticated by the cookie must carry the session's CSRF token in
  ``X-CSRF-Token`` and, when the browser sends ``Origin``, come from this
  site; every POST must be ``application/json`` (which a cross-site form
  cannot send).  Bearer requests need no CSRF token: browsers never attach
  them by themselves.

Passwords are checked in a thread (scrypt takes tens of milliseconds), at
most :data:`CHECKS_AT_ONCE` at a time, and a name that failed
:data:`FAILURES_ALLOWED` times in a row waits :data:`LOCKOUT` seconds.
"""
from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from twisted.internet.defer import Deferred, ensureDeferred

from .auth import Credentials, Identity, check_password
from .http import ApiError
from .tasks import answer

COOKIE = b"stalk_console"
#: A login lasts this long without use, and at most MAX_AGE in all.
IDLE = 3600.0
MAX_AGE = 12 * 3600.0
MAX_SESSIONS = 1000
CHECKS_AT_ONCE = 2
FAILURES_ALLOWED = 5
LOCKOUT = 60.0
ANONYMOUS = Identity("anonymous", "viewer", "anonymous")


@dataclass
class Login:
    identity: Identity
    csrf: str
    created: float
    used: float = field(default=0.0)


class Logins:
    """The console's login sessions and its answer to "who is this request?"."""

    def __init__(self, credentials: Optional[Credentials],
                 run_check: Optional[Callable[..., Deferred]] = None,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.credentials = credentials
        self.sessions: "OrderedDict[str, Login]" = OrderedDict()
        self.now = now
        self._run_check = run_check
        self._checking = 0
        self._failures: "OrderedDict[str, tuple]" = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.credentials is not None

    def replace_credentials(self, credentials: Credentials) -> int:
        """Use ``credentials`` from now on (a reloaded file).  The logins of a
        user who is gone, or whose password or role changed, end; how many."""
        old = self.credentials.users if self.credentials is not None else {}
        ended = [key for key, login in self.sessions.items()
                 if credentials.users.get(login.identity.name) != old.get(login.identity.name)]
        for key in ended:
            del self.sessions[key]
        self.credentials = credentials
        return len(ended)

    # -------------------------------------------------------- identification

    def identify(self, request) -> Optional[Identity]:
        """The request's identity, or None (auth is on and it proved nothing)."""
        if self.credentials is None:
            return ANONYMOUS
        header = request.getHeader(b"authorization") or b""
        if header[:7].lower() == b"bearer ":
            token = header[7:].strip().decode("latin-1")
            identity = self.credentials.token_identity(token)
            if identity is None:
                raise ApiError(401, "unknown bearer token")
            return identity
        login = self._login_of(request)
        return login.identity if login is not None else None

    def _login_of(self, request) -> Optional[Login]:
        key = request.getCookie(COOKIE)
        if not key:
            return None
        login = self.sessions.get(key.decode("latin-1"))
        if login is None:
            return None
        now = self.now()
        if now - login.used > IDLE or now - login.created > MAX_AGE:
            del self.sessions[key.decode("latin-1")]
            return None
        login.used = now
        return login

    def csrf_of(self, request) -> Optional[str]:
        login = self._login_of(request)
        return login.csrf if login is not None else None

    def check_post(self, request, identity: Identity) -> None:
        """Refuse a POST that a page of another site could have made."""
        content_type = (request.getHeader(b"content-type") or b"").split(b";")[0].strip()
        if content_type.lower() != b"application/json":
            raise ApiError(415, "send the request body as application/json")
        if identity.kind != "password":
            return
        origin = request.getHeader(b"origin")
        if origin is not None and origin != b"null":
            host = request.getHeader(b"host") or b""
            scheme = b"https" if request.isSecure() else b"http"
            if origin != scheme + b"://" + host:
                raise ApiError(403, "cross-site request refused")
        login = self._login_of(request)
        sent = (request.getHeader(b"x-csrf-token") or b"").decode("latin-1")
        if login is None or not hmac.compare_digest(sent, login.csrf):
            raise ApiError(403, "missing or wrong X-CSRF-Token (reload the page)")

    # --------------------------------------------------------- log in and out

    def log_in(self, request, name: str, password: str) -> "Deferred[Login]":
        return ensureDeferred(self._log_in(request, name, password))

    async def _log_in(self, request, name: str, password: str) -> Login:
        if self.credentials is None:
            raise ApiError(404, "this console has no logins (no --web-auth)")
        now = self.now()
        failures, since = self._failures.get(name, (0, now))
        if failures >= FAILURES_ALLOWED and now - since < LOCKOUT:
            raise ApiError(429, f"too many failed logins for {name}; wait a minute")
        if self._checking >= CHECKS_AT_ONCE:
            raise ApiError(429, "busy checking other logins; try again")
        identity, stored = self.credentials.password_check(name, password)
        self._checking += 1
        try:
            ok = await answer(self._check(password, stored))
        finally:
            self._checking -= 1
        if identity is None or not ok:
            self._failures[name] = (failures + 1, now if failures == 0 else since)
            self._failures.move_to_end(name)
            while len(self._failures) > MAX_SESSIONS:
                self._failures.popitem(last=False)
            raise ApiError(401, "wrong user name or password")
        self._failures.pop(name, None)
        key = secrets.token_urlsafe(32)
        login = Login(identity, secrets.token_urlsafe(24), now, now)
        self.sessions[key] = login
        while len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)
        request.addCookie(COOKIE, key.encode(), path=b"/", httpOnly=True, sameSite="strict",
                          secure=request.isSecure(), max_age=str(int(MAX_AGE)))
        return login

    def _check(self, password: str, stored: str) -> Any:
        if not stored:
            return False
        if self._run_check is None:
            from twisted.internet import reactor, threads
            return threads.deferToThreadPool(reactor, reactor.getThreadPool(),
                                             check_password, password, stored)
        return self._run_check(check_password, password, stored)

    def log_out(self, request) -> None:
        key = request.getCookie(COOKIE)
        if key:
            self.sessions.pop(key.decode("latin-1"), None)
        request.addCookie(COOKIE, b"", path=b"/", httpOnly=True, sameSite="strict",
                          max_age="0")


__all__ = ["ANONYMOUS", "COOKIE", "Login", "Logins"]
