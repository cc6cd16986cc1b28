# -*- test-case-name: tests.test_web_actions -*-
"""What a console action says it did: one wording per action.

The console's audit log (``web console: alice paused tube emails for 60 s``)
and the page's notice after an action (``Paused tube emails for 60 s``) are
both :func:`summary` of the action's :class:`~.tasks.Task`: the wording of
each kind of action is in :data:`WORDINGS` and nowhere else.  Every count
goes through :func:`~twisted_stalk.wording.counted`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, NamedTuple

from ..wording import counted

if TYPE_CHECKING:  # pragma: no cover
    from .tasks import Task


def _jobs(task: "Task", verb: str, where: str = "") -> str:
    """An action on chosen jobs: ``deleted job 3``, ``deleted 8 of 9 jobs (jobs 1,
    2, 3, 4, 5 ...; 1 skipped)``; ``where`` goes after the count."""
    if task.total == 1 and task.done == 1:
        return f"{verb} {task.target}{where}"
    skipped = f"; {task.skipped} skipped" if task.skipped else ""
    return f"{verb} {task.done} of {counted(task.total, 'job')}{where} ({task.target}{skipped})"


def _moved(task: "Task") -> str:
    to = f" to tube {task.asked['tube']}"
    moved = task.result.get("moved", {})
    if task.total == 1 and len(moved) == 1:
        [(old, new)] = moved.items()
        return f"moved job {old}{to} (now job {new})"
    return _jobs(task, "moved", to)


def _kicked(task: "Task") -> str:
    kind = task.result.get("kind")
    noun = f"{kind} job" if kind else "job"
    return f"kicked {counted(task.done, noun)} in tube {task.target} " \
           f"(up to {task.asked['bound']})"


def _flushed(task: "Task") -> str:
    state = task.asked["state"]
    return f"flushed tube {task.target}: deleted {task.done} of " \
           f"{counted(task.total, state + ' job')}"


class Wording(NamedTuple):
    #: What was done, from the task's progress and result.
    done: Callable[["Task"], str]
    #: What was asked: the page's progress line while it runs, and after
    #: "could not" when it failed having done nothing.
    asked: Callable[["Task"], str]


#: Each kind of action: what it says it did, and what it was asked to do.
WORDINGS: Dict[str, Wording] = {
    "put": Wording(lambda t: f"put job {t.result['id']} in {t.target}",
                   lambda t: f"put a job in {t.target}"),
    "pause": Wording(lambda t: f"paused tube {t.target} for {t.asked['delay']} s",
                     lambda t: f"pause tube {t.target} for {t.asked['delay']} s"),
    "unpause": Wording(lambda t: f"unpaused tube {t.target}",
                       lambda t: f"unpause tube {t.target}"),
    "kick": Wording(_kicked, lambda t: f"kick up to {counted(t.asked['bound'], 'job')} "
                                       f"in tube {t.target}"),
    "kick-jobs": Wording(lambda t: _jobs(t, "kicked"), lambda t: f"kick {t.target}"),
    "delete": Wording(lambda t: _jobs(t, "deleted"), lambda t: f"delete {t.target}"),
    "bury": Wording(lambda t: _jobs(t, "buried"), lambda t: f"bury {t.target}"),
    "move": Wording(_moved, lambda t: f"move {t.target} to tube {t.asked['tube']}"),
    "flush": Wording(_flushed,
                     lambda t: f"flush the {t.asked['state']} jobs of tube {t.target}"),
}


def asked(task: "Task") -> str:
    """What the action was asked to do: ``delete jobs 1, 2``, ``move job 4 to tube retry``."""
    return WORDINGS[task.kind].asked(task)


def summary(task: "Task") -> str:
    """What the finished action did (or could not do), without who did it."""
    if task.state == "failed":
        if task.done:
            return f"{WORDINGS[task.kind].done(task)}, then failed: {task.error}"
        return f"could not {asked(task)}: {task.error}"
    return WORDINGS[task.kind].done(task)


__all__ = ["WORDINGS", "Wording", "asked", "summary"]
