"""A console site over an engine on a Clock, spoken to in HTTP over string
transports (no sockets, no sleeps), and wire clients beside it."""
from __future__ import annotations

import base64
import hashlib
import json
from typing import Any, Dict, List, Optional, Tuple

from twisted.internet.address import IPv4Address
from twisted.internet.defer import succeed
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from twisted_stalk.engines import open_engine
from twisted_stalk.server import BeanstalkServerFactory
from twisted_stalk.web.auth import Credentials, hash_token, parse
from twisted_stalk.web.site import make_site

ADMIN_TOKEN = "admin-token-0123456789"
VIEWER_TOKEN = "viewer-token-0123456789"


def cheap_hash(password: str) -> str:
    """A pbkdf2 entry at the lowest cost the file accepts (tests only)."""
    salt = b"0123456789abcdef"
    key = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, 1000)
    return f"pbkdf2-sha256$1000${base64.b64encode(salt).decode()}${base64.b64encode(key).decode()}"


def credentials() -> Credentials:
    text = "\n".join([
        f"user alice admin {cheap_hash('wonderland')}",
        f"user bob viewer {cheap_hash('builder')}",
        f"token ci admin {hash_token(ADMIN_TOKEN)}",
        f"token grafana viewer {hash_token(VIEWER_TOKEN)}",
    ])
    return Credentials(parse(text))


class Response:
    def __init__(self, status: int, headers: Dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<Response {self.status} {self.body[:200]!r}>"


class StepClock(Clock):
    """A Clock whose :meth:`step` runs only the calls due when it starts, as
    one reactor turn would (``advance(0)`` also runs calls they schedule)."""

    def step(self) -> None:
        due = [c for c in self.calls if c.getTime() <= self.seconds()]
        for call in due:
            if call in self.calls:
                self.calls.remove(call)
                call.called = 1
                call.func(*call.args, **call.kw)


def _sync_check(fn, *args):
    return succeed(fn(*args))


class Harness:
    """A server factory and its console on one Clock."""

    def __init__(self, creds: Optional[Credentials] = None, budget: float = 10.0,
                 max_job_size: int = 65535) -> None:
        self.clock = StepClock()
        self.clock.advance(1000)
        self.factory = BeanstalkServerFactory(self.clock, open_engine("memory:", self.clock, max_job_size=max_job_size))
        self.engine = self.factory.engine
        self.site = make_site(self.factory, self.clock, creds, slice_budget=budget,
                              run_check=_sync_check)
        self.console = self.site.console
        #: Requests that failed inside the site (logged as critical when served).
        self.failures: List[Any] = []
        self.site.log_failure = self.failures.append
        self.cookies: Dict[str, str] = {}
        self.csrf: Optional[str] = None

    # HTTP

    def raw(self, data: bytes, settle: int = 10000) -> Tuple[StringTransport, Any]:
        addr = IPv4Address("TCP", "127.0.0.1", 40000)
        channel = self.site.buildProtocol(addr)
        transport = StringTransport(peerAddress=addr, hostAddress=IPv4Address(
            "TCP", "127.0.0.1", 8080))
        channel.makeConnection(transport)
        channel.dataReceived(data)
        for _ in range(settle):
            if _complete(transport.value()) or transport.disconnecting:
                break
            self.clock.advance(0)
        return transport, channel

    def request(self, method: str, path: str, body: Any = None,
                headers: Optional[Dict[str, str]] = None, raw_body: Optional[bytes] = None,
                csrf: bool = True) -> Response:
        hdrs = {"Host": "console"}
        if self.cookies:
            hdrs["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        if method == "POST":
            hdrs["Content-Type"] = "application/json"
            if csrf and self.csrf:
                hdrs["X-CSRF-Token"] = self.csrf
        hdrs.update(headers or {})
        data = raw_body if raw_body is not None else (
            json.dumps(body).encode() if body is not None else b"")
        if method == "POST" or data:
            hdrs["Content-Length"] = str(len(data))
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in hdrs.items() if v is not None) + "\r\n"
        transport, channel = self.raw(head.encode() + data)
        response = parse_response(transport.value())
        for value in response.headers.get("set-cookie", "").split("\n"):
            if "=" in value:
                name, _, rest = value.partition("=")
                self.cookies[name] = rest.split(";")[0]
        channel.connectionLost(None)
        return response

    def get(self, path: str, **kw) -> Response:
        return self.request("GET", "/api/v1/" + path, **kw)

    def post(self, path: str, body: Any = None, **kw) -> Response:
        return self.request("POST", "/api/v1/" + path, {} if body is None else body, **kw)

    def login(self, user: str = "alice", password: str = "wonderland") -> Response:
        response = self.post("login", {"user": user, "password": password})
        if response.status == 200:
            self.csrf = response.json["csrf"]
        return response

    def run_tasks(self) -> None:
        for _ in range(100000):
            if not self.console.tasks.running():
                return
            self.clock.advance(0)
        raise AssertionError("tasks did not finish")

    # Wire clients

    def client(self, port: int = 50000):
        proto = self.factory.buildProtocol(None)
        transport = StringTransport(peerAddress=IPv4Address("TCP", "10.1.2.3", port))
        proto.makeConnection(transport)
        return proto, transport

    def say(self, client, line: bytes) -> bytes:
        proto, transport = client
        transport.clear()
        proto.dataReceived(line)
        self.factory.after_input()
        return transport.value()


def _complete(data: bytes) -> bool:
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


def parse_response(data: bytes) -> Response:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers: Dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        key = name.strip().lower()
        headers[key] = (headers[key] + "\n" if key in headers else "") + value.strip()
    length = int(headers.get("content-length", len(body)))
    return Response(status, headers, body[:length])
