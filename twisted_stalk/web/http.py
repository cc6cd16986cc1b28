# -*- test-case-name: tests.test_web_api -*-
"""HTTP plumbing of the console: bounded requests, JSON answers, security headers.

Every request is bounded: its headers by Twisted (16 KiB), its body by
:class:`BoundedRequest` (413 beyond the site's limit, the rest discarded
unread), the number of open connections by :class:`ConsoleSite` (503 and
close beyond it), and idle connections by the site's timeout.
"""
from __future__ import annotations

import json
from typing import Any, Dict, Optional

from twisted.logger import Logger
from twisted.web.http import HTTPChannel
from twisted.web.server import Request, Site

log = Logger(namespace="twisted_stalk.web")

#: Headers sent with every answer: nothing is framed, sniffed, cached or
#: loaded from anywhere but this server.
SECURITY_HEADERS = {
    b"content-security-policy": (b"default-src 'none'; script-src 'self'; style-src 'self'; "
                                 b"img-src 'self' data:; connect-src 'self'; "
                                 b"frame-ancestors 'none'; base-uri 'none'; form-action 'self'"),
    b"x-content-type-options": b"nosniff",
    b"x-frame-options": b"DENY",
    b"referrer-policy": b"no-referrer",
    b"cache-control": b"no-store",
    b"cross-origin-opener-policy": b"same-origin",
    b"cross-origin-resource-policy": b"same-origin",
}
JSON_TYPE = b"application/json; charset=utf-8"


class ApiError(Exception):
    """An answer other than success: an HTTP status and a message for people."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra


def bad_request(message: str, **extra: Any) -> ApiError:
    return ApiError(400, message, **extra)


def json_body(data: Any) -> bytes:
    """Compact ASCII JSON in which ``<``, ``>`` and ``&`` are escaped too, so
    no answer can be read as markup even by a client that sniffs."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=True)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .encode("ascii"))


def send_json(request: Request, status: int, data: Any) -> None:
    """Write ``data`` as the whole JSON answer (if the client is still there)."""
    if request.finished or getattr(request, "_disconnected", False):
        return
    body = json_body(data)
    request.setResponseCode(status)
    request.setHeader(b"content-type", JSON_TYPE)
    request.setHeader(b"content-length", b"%d" % len(body))
    request.write(body)
    request.finish()


def error_data(error: ApiError) -> Dict[str, Any]:
    data: Dict[str, Any] = {"error": error.message}
    data.update(error.extra)
    return data


def read_json(request: Request) -> Dict[str, Any]:
    """The request's JSON object (400 if it is anything else)."""
    content_type = (request.getHeader(b"content-type") or b"").split(b";")[0].strip().lower()
    if content_type != b"application/json":
        raise ApiError(415, "send the request body as application/json")
    request.content.seek(0)
    raw = request.content.read()
    try:
        data = json.loads(raw.decode("utf-8") or "{}")
    except (UnicodeDecodeError, ValueError):
        raise bad_request("the request body is not valid JSON")
    if not isinstance(data, dict):
        raise bad_request("the request body must be a JSON object")
    return data


class BoundedRequest(Request):
    """A request whose body may not pass ``channel.site.max_body`` bytes."""

    _too_big = False
    _received = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["parsePOSTFormSubmission"] = False  # the API reads JSON only
        super().__init__(*args, **kwargs)
        for name, value in SECURITY_HEADERS.items():
            self.setHeader(name, value)

    def _limit(self) -> int:
        return getattr(self.channel.site, "max_body", 1024 * 1024)

    def gotLength(self, length: Optional[int]) -> None:
        if length is not None and length > self._limit():
            self._refuse()
        super().gotLength(None if self._too_big else length)

    def handleContentChunk(self, data: bytes) -> None:
        if self._too_big:
            return
        self._received += len(data)
        if self._received > self._limit():
            self._refuse()
            return
        super().handleContentChunk(data)

    def _refuse(self) -> None:
        self._too_big = True
        body = b'{"error":"request body too large"}'
        transport = self.channel.transport
        transport.write(b"HTTP/1.1 413 Payload Too Large\r\ncontent-type: application/json\r\n"
                        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))
        self.channel.loseConnection()

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if self._too_big:
            return
        super().requestReceived(command, path, version)

    def processingFailed(self, reason):  # pragma: no cover - handlers catch their errors
        self.site.log_failure(reason)
        if not self.finished and not self.startedWriting:
            send_json(self, 500, {"error": "internal error (see the server log)"})
        return None


class _Refused(HTTPChannel):
    def connectionMade(self) -> None:
        self.transport.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n"
                             b"connection: close\r\n\r\n")
        self.transport.loseConnection()


class ConsoleSite(Site):
    """The console's site: bounded bodies and connections, no tracebacks, quiet log."""

    requestFactory = BoundedRequest
    displayTracebacks = False
    #: No "Starting factory" line: the console's namespace logs at info even
    #: without -V (its actions), and the listener line already says where it is.
    noisy = False

    def __init__(self, resource, reactor, max_body: int, max_connections: int = 64,
                 timeout: float = 60.0) -> None:
        super().__init__(resource, reactor=reactor, timeout=timeout)
        self.max_body = max_body
        self.max_connections = max_connections
        self.open_connections = 0
        self.log_failure = lambda failure: log.failure("web console: request failed", failure)

    def buildProtocol(self, addr):
        if self.open_connections >= self.max_connections:
            proto = _Refused()
            proto.factory = self
            return proto
        proto = super().buildProtocol(addr)
        site = self
        lost = proto.connectionLost

        def connection_lost(reason) -> None:
            site.open_connections -= 1
            lost(reason)

        proto.connectionLost = connection_lost
        self.open_connections += 1
        return proto

    def log(self, request) -> None:
        pass  # actions are logged by name; requests are not


__all__ = ["ApiError", "BoundedRequest", "ConsoleSite", "JSON_TYPE", "SECURITY_HEADERS",
           "bad_request", "error_data", "json_body", "read_json", "send_json"]
