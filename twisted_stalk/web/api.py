# -*- test-case-name: tests.test_web_api -*-
"""``/api/v1/``: the console's JSON API (docs/web.md lists every endpoint).

One leaf resource matches ``METHOD path`` against :data:`ROUTES`; each
handler is a coroutine returning ``(status, data)``.  Answers are JSON; an
error is ``{"error": "..."}`` with a 4xx status (5xx only for the server's
own trouble, never with a traceback).  GETs only read; POSTs act, and need
an admin identity and pass the CSRF rule (:mod:`.login`).
"""
from __future__ import annotations

import base64
import binascii
import socket
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

from twisted.internet.defer import ensureDeferred
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from .. import __version__
from ..core import outcomes as o
from ..core.engine import JOB_SORTS
from ..core.job import JobRecord
from ..protocol.commands import valid_tube_name
from ..protocol.constants import (
    DEFAULT_PUT_DELAY,
    DEFAULT_PUT_PRIORITY,
    DEFAULT_PUT_TTR,
    JOB_STATES,
    UNRESERVED_STATES,
)
from . import actions
from .auth import Identity
from .console import Console, ConsoleFrontEnd
from .http import ApiError, bad_request, error_data, read_json, send_json
from .tasks import answer
from .views import (
    DETAIL_BYTES,
    body_view,
    job_summary,
    peer_text,
    server_view,
    session_view,
    stats_dict,
    tube_view,
)

log = Logger(namespace="twisted_stalk.web")

API_VERSION = 1
U32 = 2 ** 32 - 1
#: What the put form starts with (``whoami``): the project's one set of defaults.
_PUT_DEFAULTS = {"pri": DEFAULT_PUT_PRIORITY, "delay": DEFAULT_PUT_DELAY,
                 "ttr": DEFAULT_PUT_TTR}
MAX_IDS = 1000
MAX_PAGE = 500
SEARCHES_AT_ONCE = 2
SEARCH_SECONDS = 10.0
#: Time one search step may take before the reactor gets a turn.
SEARCH_STEP = 0.003
TUBE_SORTS = ("name", "ready", "urgent", "reserved", "delayed", "buried", "waiting",
              "total_jobs")

Handler = Callable[..., Awaitable[Tuple[int, Any]]]


# ------------------------------------------------------------------ arguments

def _arg(request, name: str) -> Optional[str]:
    values = request.args.get(name.encode())
    if not values:
        return None
    try:
        return values[0].decode("utf-8")
    except UnicodeDecodeError:
        raise bad_request(f"{name} is not UTF-8")


def int_arg(request, name: str, default: int, low: int, high: int) -> int:
    text = _arg(request, name)
    if text is None or text == "":
        return default
    return checked_int(text, name, low, high)


def checked_int(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool):
        raise bad_request(f"{name} must be a whole number")
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) < 24:
        value = int(value)
    if not isinstance(value, int):
        raise bad_request(f"{name} must be a whole number")
    if not low <= value <= high:
        raise bad_request(f"{name} must be between {low} and {high}")
    return value


def choice_arg(request, name: str, choices, default: str) -> str:
    value = _arg(request, name) or default
    if value not in choices:
        raise bad_request(f"{name} must be one of: {', '.join(choices)}")
    return value


def tube_name(text: Any, what: str = "tube") -> bytes:
    if not isinstance(text, str):
        raise bad_request(f"{what} must be a tube name")
    try:
        name = text.encode("ascii")
    except UnicodeEncodeError:
        name = b""
    if not valid_tube_name(name):
        raise bad_request(f"{what} {text[:210]!r} is not a valid tube name "
                          "(1-200 of A-Z a-z 0-9 - + / ; . $ _ ( ), not starting with -)")
    return name


def job_ids(data: Dict[str, Any]) -> List[int]:
    ids = data.get("ids")
    if not isinstance(ids, list) or not ids:
        raise bad_request("ids must be a non-empty list of job ids")
    if len(ids) > MAX_IDS:
        raise bad_request(f"at most {MAX_IDS} jobs at once")
    return list(dict.fromkeys(checked_int(i, "job id", 1, 2 ** 63 - 1) for i in ids))


def decode_body(data: Dict[str, Any]) -> bytes:
    body = data.get("body", "")
    encoding = data.get("encoding", "text")
    if not isinstance(body, str):
        raise bad_request("body must be a string")
    if encoding == "text":
        return body.encode("utf-8")
    if encoding == "hex":
        try:
            return bytes.fromhex(body)
        except ValueError:
            raise bad_request("body is not valid hex")
    if encoding == "base64":
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise bad_request("body is not valid base64")
    raise bad_request("encoding must be text, hex or base64")


# ------------------------------------------------------------------- the API

class Api:
    """The handlers, bound to one :class:`Console`."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.engine = console.engine

    # Who am I.

    async def whoami(self, request, identity: Optional[Identity]) -> Tuple[int, Any]:
        logins = self.console.logins
        data: Dict[str, Any] = {
            "api": API_VERSION, "version": __version__, "auth": logins.enabled,
            "user": None, "role": None, "can_act": False, "csrf": None, "host": None,
            "put_defaults": _PUT_DEFAULTS,
        }
        if identity is not None:  # the host name only for those who may look
            data.update(user=identity.name, role=identity.role, can_act=identity.can_act,
                        csrf=logins.csrf_of(request), host=socket.gethostname())
        return 200, data

    async def login(self, request, identity) -> Tuple[int, Any]:
        logins = self.console.logins
        if not logins.enabled:
            raise ApiError(404, "this console has no logins (the server runs without --web-auth)")
        logins.check_post(request, Identity("?", "viewer", "anonymous"))
        data = read_json(request)
        name, password = data.get("user"), data.get("password")
        if not isinstance(name, str) or not isinstance(password, str) or not name:
            raise bad_request("user and password are required")
        try:
            login = await logins.log_in(request, name[:64], password[:4096])
        except ApiError as e:
            log.warn("web console: failed login for {user} from {peer}: {why}",
                     user=name[:64], peer=peer_text(request.transport), why=e.message)
            raise
        log.info("web console: {user} logged in from {peer}", user=login.identity.name,
                 peer=peer_text(request.transport))
        return 200, {"user": login.identity.name, "role": login.identity.role,
                     "can_act": login.identity.can_act, "csrf": login.csrf}

    async def logout(self, request, identity) -> Tuple[int, Any]:
        self.console.logins.log_out(request)
        return 200, {"user": None}

    # Looking.

    async def overview(self, request, identity) -> Tuple[int, Any]:
        engine = self.engine
        sampler = self.console.sampler
        offset = int_arg(request, "offset", 0, 0, 10 ** 9)
        limit = int_arg(request, "limit", 50, 1, MAX_PAGE)
        needle = (_arg(request, "filter") or "")[:200]
        sort = choice_arg(request, "sort", TUBE_SORTS, "name")
        descending = choice_arg(request, "order", ("asc", "desc"), "asc") == "desc"
        tubes = []
        names = engine.tube_names()
        for name in names:
            if needle and needle not in name.decode("latin-1"):
                continue
            pairs = engine.tube_stats(name)
            if isinstance(pairs, list):
                tubes.append(tube_view(pairs))
        tubes.sort(key=lambda t: (t[sort], t["name"]), reverse=descending)
        page = tubes[offset:offset + limit]
        for t in page:
            t["rates"] = sampler.tube_rates(t["name"].encode("latin-1"))
        return 200, {
            "server": server_view(engine.server_stats(), engine),
            "rates": sampler.server_rates(),
            "interval": sampler.interval,
            "tubes": page,
            "total_tubes": len(names),
            "matched": len(tubes),
            "offset": offset,
            "limit": limit,
        }

    async def tubes(self, request, identity) -> Tuple[int, Any]:
        return 200, {"tubes": [n.decode("latin-1") for n in self.engine.tube_names()]}

    def _tube(self, name: bytes) -> Dict[str, Any]:
        pairs = self.engine.tube_stats(name)
        if pairs is o.NOT_FOUND:
            raise ApiError(404, f"no tube {name.decode('latin-1')}")
        view = tube_view(pairs)
        view["rates"] = self.console.sampler.tube_rates(name)
        return view

    async def tube(self, request, identity, tube: bytes) -> Tuple[int, Any]:
        return 200, {"tube": self._tube(tube), "interval": self.console.sampler.interval}

    async def tube_jobs(self, request, identity, tube: bytes) -> Tuple[int, Any]:
        state = choice_arg(request, "state", JOB_STATES, "ready")
        sort = choice_arg(request, "sort", JOB_SORTS, "id")
        order = choice_arg(request, "order", ("asc", "desc"), "asc")
        offset = int_arg(request, "offset", 0, 0, 10 ** 9)
        limit = int_arg(request, "limit", 50, 1, MAX_PAGE)
        view = self._tube(tube)
        page = await answer(self.engine.jobs_page(tube, state, sort, offset, limit,
                                                  order == "desc"))
        if page is o.NOT_FOUND:
            raise ApiError(404, f"no tube {tube.decode('latin-1')}")
        total, jobs = page
        now = self.console.now()
        return 200, {"tube": view, "interval": self.console.sampler.interval,
                     "state": state, "sort": sort, "order": order,
                     "offset": offset, "limit": limit, "total": total,
                     "jobs": [job_summary(job, now) for job in jobs]}

    async def search(self, request, identity, tube: bytes) -> Tuple[int, Any]:
        text = _arg(request, "q") or ""
        encoding = choice_arg(request, "encoding", ("text", "hex"), "text")
        limit = int_arg(request, "limit", 100, 1, 500)
        seconds = int_arg(request, "seconds", int(SEARCH_SECONDS), 1, 30)
        if encoding == "hex":
            try:
                needle = bytes.fromhex(text)
            except ValueError:
                raise bad_request("q is not valid hex")
        else:
            needle = text.encode("utf-8")
        if not 0 < len(needle) <= 1024:
            raise bad_request("search for 1 to 1024 bytes")
        self._tube(tube)
        console = self.console
        if console.searches >= SEARCHES_AT_ONCE:
            raise ApiError(429, f"{SEARCHES_AT_ONCE} searches are running; try again")
        console.searches += 1
        try:
            return 200, await self._search(request, tube, needle, limit, seconds)
        finally:
            console.searches -= 1

    async def _search(self, request, tube: bytes, needle: bytes, limit: int,
                      seconds: int) -> Dict[str, Any]:
        engine = self.engine
        console = self.console
        found: List[JobRecord] = []
        after: Optional[int] = 0
        span = 4096
        started = time.perf_counter()
        reason = None
        while after is not None:
            if getattr(request, "_disconnected", False):
                reason = "disconnected"
                break
            if time.perf_counter() - started > seconds:
                reason = "time"
                break
            step = time.perf_counter()
            result = await answer(engine.search_bodies(tube, needle, after, span))
            if result is o.NOT_FOUND:
                break  # the tube went away: nothing more to find
            jobs, after_next = result
            found.extend(jobs)
            if after_next is None:
                after = None
                break
            after = after_next
            if len(found) >= limit:
                reason = "limit"
                break
            took = time.perf_counter() - step
            span = max(256, min(1 << 20, int(span * SEARCH_STEP / max(took, 1e-5))))
            await deferLater(console.reactor, 0, lambda: None)
        now = console.now()
        return {"matches": [job_summary(job, now) for job in found[:limit]],
                "complete": after is None, "stopped": reason,
                "searched_to": after, "seconds": round(time.perf_counter() - started, 3)}

    async def job(self, request, identity, job_id: int) -> Tuple[int, Any]:
        engine = self.engine
        stats = await answer(engine.job_stats(job_id))
        job = await answer(engine.job(job_id))
        if stats is o.NOT_FOUND or not isinstance(job, JobRecord):
            raise ApiError(404, f"no job {job_id}")
        facts = stats_dict(stats)
        holder = None
        if facts["state"] == "reserved":
            holder = self._holder(await answer(engine.job_holder(job_id)), facts)
        return 200, {"stats": facts, "body": body_view(job.body[:-2], DETAIL_BYTES),
                     "holder": holder,
                     "ready_in": facts["time-left"] if facts["state"] == "delayed" else None}

    def _holder(self, session, facts) -> Optional[Dict[str, Any]]:
        if session is None:
            return None
        frontend = session.frontend
        if isinstance(frontend, ConsoleFrontEnd):
            peer = f"web console ({frontend.identity.name})"
        else:
            peer = self.console.factory.peer_of(session) or "?"
        return {"peer": peer, "ttr_left": facts["time-left"],
                "jobs_held": len(session.reserved)}

    async def job_body(self, request, identity, job_id: int) -> Tuple[int, Any]:
        job = await answer(self.engine.job(job_id))
        if not isinstance(job, JobRecord):
            raise ApiError(404, f"no job {job_id}")
        return 200, Raw(job.body[:-2], b"application/octet-stream",
                        b'attachment; filename="job-%d.bin"' % job_id)

    async def connections(self, request, identity) -> Tuple[int, Any]:
        offset = int_arg(request, "offset", 0, 0, 10 ** 9)
        limit = int_arg(request, "limit", 100, 1, MAX_PAGE)
        rows = [session_view(facts) for facts in self.console.factory.connection_facts()]
        rows.sort(key=lambda r: r["peer"])
        return 200, {"total": len(rows), "offset": offset, "limit": limit,
                     "connections": rows[offset:offset + limit]}

    async def tasks(self, request, identity) -> Tuple[int, Any]:
        return 200, {"tasks": self.console.tasks.recent()}

    async def task(self, request, identity, task: str) -> Tuple[int, Any]:
        return 200, {"task": self.console.tasks.get(task).view()}

    # Acting: each runs as a task (see tasks.py and actions.py).

    async def _run(self, identity, kind: str, target: str, total: int, work,
                   **asked: Any) -> Tuple[int, Any]:
        task = self.console.tasks.start(kind, identity, target, total, work, asked)
        if task.state == "running" or task.finished is None:
            # Still running: answer now; the page follows its progress.
            return 202, {"task": task.view()}
        if task.state == "failed":
            raise ApiError(task.status, task.error or "failed", task=task.view())
        return 200, {"task": task.view()}

    async def put(self, request, identity, tube: bytes) -> Tuple[int, Any]:
        data = read_json(request)
        body = decode_body(data)
        pri = checked_int(data.get("pri", DEFAULT_PUT_PRIORITY), "pri", 0, U32)
        delay = checked_int(data.get("delay", DEFAULT_PUT_DELAY), "delay", 0, U32)
        ttr = checked_int(data.get("ttr", DEFAULT_PUT_TTR), "ttr", 0, U32)
        return await self._run(identity, "put", _text(tube), 1, lambda task, s, sl: actions.put(
            self.engine, task, s, sl, tube, pri, delay, ttr, body))

    async def pause(self, request, identity, tube: bytes) -> Tuple[int, Any]:
        delay = checked_int(read_json(request).get("delay"), "delay", 0, U32)
        return await self._run(identity, "pause" if delay else "unpause", _text(tube), 1,
                               lambda task, s, sl: actions.pause(self.engine, task, s, sl,
                                                                 tube, delay), delay=delay)

    async def kick(self, request, identity, tube: bytes) -> Tuple[int, Any]:
        bound = checked_int(read_json(request).get("bound"), "bound", 1, U32)
        return await self._run(identity, "kick", _text(tube), bound,
                               lambda task, s, sl: actions.kick(self.engine, task, s, sl,
                                                                tube, bound), bound=bound)

    async def flush(self, request, identity, tube: bytes) -> Tuple[int, Any]:
        data = read_json(request)
        state = data.get("state")
        if state not in UNRESERVED_STATES:
            raise bad_request("state must be ready, delayed or buried (jobs a worker holds "
                              "cannot be deleted)")
        if data.get("confirm") != _text(tube):
            raise bad_request("type the tube's name to confirm the flush")
        self._tube(tube)
        return await self._run(identity, "flush", _text(tube), 0,
                               lambda task, s, sl: actions.flush(self.engine, task, s, sl,
                                                                 tube, state), state=state)

    async def jobs_action(self, request, identity, action: str) -> Tuple[int, Any]:
        data = read_json(request)
        ids = job_ids(data)
        engine = self.engine
        if action == "delete":
            work = lambda task, s, sl: actions.delete_jobs(engine, task, s, sl, ids)  # noqa
        elif action == "kick":
            work = lambda task, s, sl: actions.kick_jobs(engine, task, s, sl, ids)  # noqa
        elif action == "bury":
            pri = data.get("pri")
            pri = None if pri is None else checked_int(pri, "pri", 0, U32)
            work = lambda task, s, sl: actions.bury_jobs(engine, task, s, sl, ids, pri)  # noqa
        elif action == "move":
            to = tube_name(data.get("tube"), "destination tube")
            work = lambda task, s, sl: actions.move_jobs(engine, task, s, sl, ids, to)  # noqa
            return await self._run(identity, "move", _describe(ids), len(ids), work,
                                   tube=_text(to))
        else:
            raise ApiError(404, "no such action")
        # A tube's kick is "kick"; this one kicks chosen jobs.
        kind = "kick-jobs" if action == "kick" else action
        return await self._run(identity, kind, _describe(ids), len(ids), work)


def _text(tube: bytes) -> str:
    return tube.decode("latin-1")


def _describe(ids: List[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:5])
    return f"job {shown}" if len(ids) == 1 else f"jobs {shown}" + (" ..." if len(ids) > 5 else "")


class Raw:
    """A non-JSON answer (a job's body for download)."""

    def __init__(self, data: bytes, content_type: bytes, disposition: bytes) -> None:
        self.data = data
        self.content_type = content_type
        self.disposition = disposition


#: (method, path pattern, handler name, acts).  ``{tube}`` is a tube name,
#: ``{job_id}`` a job id, ``{task}`` a task id, ``{action}`` a jobs action.
ROUTES: Tuple[Tuple[str, str, str, bool], ...] = (
    ("GET", "whoami", "whoami", False),
    ("POST", "login", "login", False),
    ("POST", "logout", "logout", False),
    ("GET", "overview", "overview", False),
    ("GET", "tubes", "tubes", False),
    ("GET", "tubes/{tube}", "tube", False),
    ("GET", "tubes/{tube}/jobs", "tube_jobs", False),
    ("GET", "tubes/{tube}/search", "search", False),
    ("POST", "tubes/{tube}/jobs", "put", True),
    ("POST", "tubes/{tube}/pause", "pause", True),
    ("POST", "tubes/{tube}/kick", "kick", True),
    ("POST", "tubes/{tube}/flush", "flush", True),
    ("GET", "jobs/{job_id}", "job", False),
    ("GET", "jobs/{job_id}/body", "job_body", False),
    ("POST", "jobs/{action}", "jobs_action", True),
    ("GET", "connections", "connections", False),
    ("GET", "tasks", "tasks", False),
    ("GET", "tasks/{task}", "task", False),
)
#: Answered without an identity (the page needs them to offer a login).
OPEN = {"whoami", "login", "logout"}


def match(method: str, segments: List[str]) -> Tuple[str, bool, Dict[str, Any]]:
    """The handler name, whether it acts, and its parsed path parameters."""
    allowed = False
    for route_method, pattern, name, acts in ROUTES:
        parts = pattern.split("/")
        if len(parts) != len(segments):
            continue
        params: Dict[str, Any] = {}
        for part, segment in zip(parts, segments):
            if part.startswith("{"):
                params[part[1:-1]] = segment
            elif part != segment:
                break
        else:
            if route_method != method:
                allowed = True
                continue
            return name, acts, _parse_params(params)
    if allowed:
        raise ApiError(405, "method not allowed here")
    raise ApiError(404, "no such API endpoint (see docs/web.md)")


def _parse_params(params: Dict[str, str]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in params.items():
        if key == "tube":
            out[key] = tube_name(value)
        elif key == "job_id":
            out[key] = checked_int(value, "job id", 1, 2 ** 63 - 1)
        elif key == "action":
            if value not in ("delete", "kick", "bury", "move"):
                raise ApiError(404, "jobs actions are delete, kick, bury and move")
            out[key] = value
        else:
            if not (0 < len(value) <= 64 and value.isalnum()):
                raise bad_request("bad task id")
            out[key] = value
    return out


class ApiResource(Resource):
    """``/api/v1/...``: every request goes through :meth:`handle`."""

    isLeaf = True

    def __init__(self, console: Console) -> None:
        super().__init__()
        self.api = Api(console)
        self.console = console

    def render(self, request):
        ensureDeferred(self.handle(request))
        return NOT_DONE_YET

    async def handle(self, request) -> None:
        try:
            method = request.method.decode("ascii", "replace")
            if method == "HEAD":
                method = "GET"
            try:
                segments = [s.decode("utf-8") for s in request.postpath]
            except UnicodeDecodeError:
                raise bad_request("the path is not UTF-8")
            if segments and segments[-1] == "":
                segments.pop()
            name, acts, params = match(method, segments)
            logins = self.console.logins
            identity = logins.identify(request)
            if identity is None and name not in OPEN:
                raise ApiError(401, "log in first")
            if acts:
                if not identity.can_act:
                    raise ApiError(403, "read-only: this console cannot change the queue"
                                   if not logins.enabled else
                                   f"{identity.name} is a viewer: actions need an admin")
                logins.check_post(request, identity)
            status, data = await getattr(self.api, name)(request, identity, **params)
        except ApiError as e:
            send_json(request, e.status, error_data(e))
            return
        except Exception:
            log.failure("web console: {method} {path} failed", method=request.method,
                        path=request.path)
            send_json(request, 500, {"error": "internal error (see the server log)"})
            return
        if isinstance(data, Raw):
            if not request.finished and not getattr(request, "_disconnected", False):
                request.setHeader(b"content-type", data.content_type)
                request.setHeader(b"content-disposition", data.disposition)
                request.setHeader(b"content-length", b"%d" % len(data.data))
                request.write(data.data)
                request.finish()
            return
        send_json(request, status, data)


__all__ = ["API_VERSION", "Api", "ApiResource", "ROUTES", "match"]
