# -*- test-case-name: tests.test_web_actions -*-
"""Console actions as tasks that run in slices across reactor turns.

An action that may touch many jobs (kick n, flush, delete/move/bury a
selection) runs as a :class:`Task`: a coroutine that calls
:meth:`Slicer.point` between jobs.  ``point`` returns at once until the
slice has used its time budget (a few milliseconds), then delivers the
engine's wake-ups and gives the reactor a turn before going on, so other
clients wait at most one slice.  The task's progress (done / total) is
what ``GET /api/v1/tasks/<id>`` shows.

Each task acts through its own engine :class:`~twisted_stalk.core.session.Session`
(opened for the task, closed when it ends), so every change is a command
of a client as far as the engine, its counters and its journal can tell.
"""
from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, List, Optional

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.task import deferLater
from twisted.logger import Logger

from .audit import asked, summary
from .auth import Identity
from .http import ApiError

if TYPE_CHECKING:  # pragma: no cover
    from .console import Console

log = Logger(namespace="twisted_stalk.web")

#: Tasks kept for their progress to be read (the oldest finished go first).
KEPT_TASKS = 100
#: Tasks running at once; more answer 429.
RUNNING_TASKS = 4


async def answer(result: Any) -> Any:
    """An engine's outcome, waiting for it if the engine answered with a Deferred."""
    if isinstance(result, Deferred):
        return await result
    return result


class Slicer:
    """Where a long action may give the reactor a turn."""

    def __init__(self, console: "Console", budget: float) -> None:
        self.console = console
        self.budget = budget
        self.started = time.perf_counter()

    async def point(self) -> None:
        """Return at once while the slice has time left; else deliver the
        engine's wake-ups and yield one reactor turn."""
        if time.perf_counter() - self.started < self.budget:
            return
        self.console.deliver()
        await deferLater(self.console.reactor, 0, lambda: None)
        self.started = time.perf_counter()


class Task:
    """One action's progress."""

    def __init__(self, kind: str, identity: Identity, target: str, total: int,
                 asked: Optional[Dict[str, Any]] = None) -> None:
        self.id = secrets.token_hex(8)
        #: The action: a key of :data:`~.audit.WORDINGS`.
        self.kind = kind
        self.user = identity.name
        #: What it acts on, as a person reads it: a tube's name, ``job 3``, ``jobs 1, 2``.
        self.target = target
        #: What it was asked beyond the target (a pause's delay, a move's tube ...).
        self.asked: Dict[str, Any] = dict(asked or {})
        self.total = total
        self.done = 0
        #: Jobs the action could not act on (gone, held by a worker ...).
        self.skipped = 0
        self.state = "running"
        self.error: Optional[str] = None
        self.result: Dict[str, Any] = {}
        self.started = time.time()
        self.finished: Optional[float] = None
        #: The HTTP status of a failure.
        self.status = 409
        #: Fires with the task when it has ended.
        self.ended: Optional[Deferred] = None

    def view(self) -> Dict[str, Any]:
        return {
            "id": self.id, "kind": self.kind, "user": self.user, "target": self.target,
            "asked": self.asked, "total": self.total, "done": self.done,
            "skipped": self.skipped, "state": self.state, "error": self.error,
            "result": self.result, "started": self.started, "finished": self.finished,
            "doing": asked(self),
            "summary": summary(self) if self.finished is not None else None,
        }


class Tasks:
    """The console's tasks: start, run in slices, keep the last few for reading."""

    def __init__(self, console: "Console", budget: float = 0.004) -> None:
        self.console = console
        self.budget = budget
        self.tasks: "OrderedDict[str, Task]" = OrderedDict()

    def running(self) -> int:
        return sum(1 for t in self.tasks.values() if t.state == "running")

    def get(self, task_id: str) -> Task:
        task = self.tasks.get(task_id)
        if task is None:
            raise ApiError(404, "no such task (finished tasks are kept for a while only)")
        return task

    def recent(self, limit: int = 20) -> List[Dict[str, Any]]:
        return [t.view() for t in list(self.tasks.values())[-limit:]][::-1]

    def start(self, kind: str, identity: Identity, target: str, total: int,
              work: Callable[[Task, Any, Slicer], Awaitable[None]],
              asked: Optional[Dict[str, Any]] = None) -> Task:
        """Run ``work(task, session, slicer)`` through a new engine session.
        ``task.ended`` fires with the task when it ends; an action that needs
        no more than one slice has ended when this returns."""
        if self.running() >= RUNNING_TASKS:
            raise ApiError(429, f"{RUNNING_TASKS} actions are already running; try again "
                                "when one has finished")
        task = Task(kind, identity, target, total, asked)
        self.tasks[task.id] = task
        while len(self.tasks) > KEPT_TASKS:
            oldest = next((k for k, t in self.tasks.items() if t.state != "running"), None)
            if oldest is None:
                break
            del self.tasks[oldest]
        task.ended = ensureDeferred(self._run(task, identity, work))
        return task

    async def _run(self, task: Task, identity: Identity, work) -> Task:
        console = self.console
        session = console.open_session(identity)
        slicer = Slicer(console, self.budget)
        try:
            await work(task, session, slicer)
            task.state = "done"
        except ApiError as e:
            task.state, task.error, task.status = "failed", e.message, e.status
        except Exception:
            log.failure("console action {kind} failed", kind=task.kind)
            task.state, task.error = "failed", "internal error (see the server log)"
        finally:
            console.close_session(session)
        await console.settled()
        task.finished = time.time()
        log.info("web console: {user} {summary}", user=task.user, summary=summary(task),
                 kind=task.kind, done=task.done, total=task.total,
                 console_action=task.view())
        return task


__all__ = ["KEPT_TASKS", "RUNNING_TASKS", "Slicer", "Task", "Tasks", "answer"]
