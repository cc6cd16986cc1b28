# -*- test-case-name: tests.test_web_actions -*-
"""What the console's actions do, command by command, through an engine session.

Each function is the ``work`` of a :class:`~.tasks.Task`: it gets the task
(for progress), the task's own engine session and a slicer, and changes the
queue only through the engine's protocol commands, as a client would:

* **put**: ``use`` the tube, ``put``.
* **kick n**: ``use`` the tube, ``kick`` in slices of at most :data:`SLICE`
  (buried jobs if the tube had any when the action started, else delayed
  ones, as one ``kick`` would choose).
* **kick / delete** selected jobs: ``kick-job`` / ``delete`` each.  A job a
  worker holds cannot be deleted (as over the wire): it is skipped.
* **bury** selected jobs: ``reserve-job`` then ``bury`` each (beanstalk buries
  only jobs the session reserved); already buried jobs are skipped.
* **move** selected jobs: ``reserve-job``, ``use`` the other tube, ``put`` a
  copy (same body, priority, TTR; a delayed job keeps its time left), then
  ``delete`` the original.  The copy is a new job with a new id.  If the
  server stops between the put and the delete, both jobs exist after a
  restart (the original comes back ready): a move never loses a job.
* **flush** a state: list a slice of the tube's jobs in that state (the
  engine's ``jobs_page``, counted as no command), ``delete`` each, until as
  many jobs as the tube had in that state when the flush began are gone or
  a slice deletes nothing.
* **pause**: ``pause-tube`` (a delay of 0 ends a pause).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from ..core import outcomes as o
from ..core.engine import Engine
from ..core.job import JobRecord
from ..core.outcomes import Outcome
from ..core.session import Session
from ..protocol.yaml import as_dict
from .http import ApiError
from .tasks import Slicer, Task, answer

if TYPE_CHECKING:  # pragma: no cover
    from ..core.engine import Result  # a type alias for the type checker only

#: Jobs listed or kicked per engine call.
SLICE = 200

_FAILURES = {
    o.DRAINING: (503, "the server is draining (SIGUSR1): it takes no new jobs"),
    o.OUT_OF_MEMORY: (507, "the server's --max-memory is reached"),
    o.INTERNAL_ERROR: (500, "the binlog could not record the change"),
    o.JOB_TOO_BIG: (413, "the body is larger than the server's max job size"),
    o.EXPECTED_CRLF: (400, "the body is malformed"),
    o.BAD_FORMAT: (400, "bad tube name"),
}


def _fail(outcome: Any) -> ApiError:
    status, message = _FAILURES.get(outcome, (500, f"the engine answered {outcome!r}"))
    return ApiError(status, message)


def _name(tube: bytes) -> str:
    return tube.decode("latin-1")


async def put(engine: Engine, task: Task, s: Session, slicer: Slicer,
              tube: bytes, pri: int, delay: int, ttr: int, body: bytes) -> None:
    refused = engine.refuse_oversized(s, len(body))
    if refused is not None:
        raise _fail(refused)
    await answer(engine.use(s, tube))
    job_id = await answer(engine.put(s, pri, delay, ttr, body + b"\r\n"))
    if not isinstance(job_id, int):
        raise _fail(job_id)
    task.done = 1
    task.result = {"id": job_id, "tube": _name(tube)}


async def pause(engine: Engine, task: Task, s: Session, slicer: Slicer,
                tube: bytes, delay: int) -> None:
    outcome = await answer(engine.pause_tube(s, tube, delay))
    if outcome is o.NOT_FOUND:
        raise ApiError(404, f"no tube {_name(tube)}")
    if outcome is not o.PAUSED:
        raise _fail(outcome)
    task.done = 1
    task.result = {"tube": _name(tube), "pause": delay}


async def kick(engine: Engine, task: Task, s: Session, slicer: Slicer,
               tube: bytes, bound: int) -> None:
    stats = await answer(engine.tube_stats(tube))
    if stats is o.NOT_FOUND:
        raise ApiError(404, f"no tube {_name(tube)}")
    buried_first = int(as_dict(stats)["current-jobs-buried"]) > 0
    await answer(engine.use(s, tube))
    while task.done < bound:
        if buried_first:
            now = await answer(engine.tube_stats(tube))
            if now is o.NOT_FOUND or as_dict(now)["current-jobs-buried"] == 0:
                break  # one kick would not go on to the delayed jobs
        kicked = await answer(engine.kick(s, min(SLICE, bound - task.done)))
        if kicked is o.INTERNAL_ERROR:
            raise _fail(kicked)
        task.done += kicked
        if not kicked:
            break
        await slicer.point()
    task.total = task.done
    task.result = {"kicked": task.done, "kind": "buried" if buried_first else "delayed"}


async def _each_job(task: Task, slicer: Slicer, ids: List[int],
                    command: Callable[[int], Result], done: Outcome, key: str) -> None:
    """Run ``command(job_id)`` (an engine command) for each id: ``done`` counts,
    NOT_FOUND (gone, or held by a worker) is skipped, anything else fails."""
    changed: List[int] = []
    for job_id in ids:
        outcome = await answer(command(job_id))
        if outcome is done:
            task.done += 1
            changed.append(job_id)
        elif outcome is o.NOT_FOUND:
            task.skipped += 1
        else:
            raise _fail(outcome)
        await slicer.point()
    task.result = {key: changed}


async def kick_jobs(engine: Engine, task: Task, s: Session, slicer: Slicer, ids: List[int]) -> None:
    await _each_job(task, slicer, ids, lambda job_id: engine.kick_job(s, job_id),
                    o.KICKED, "kicked")


async def delete_jobs(engine: Engine, task: Task, s: Session, slicer: Slicer,
                      ids: List[int]) -> None:
    await _each_job(task, slicer, ids, lambda job_id: engine.delete(s, job_id),
                    o.DELETED, "deleted")


async def bury_jobs(engine: Engine, task: Task, s: Session, slicer: Slicer, ids: List[int],
                    pri: Optional[int]) -> None:
    buried: List[int] = []
    for job_id in ids:
        job = await answer(engine.job(job_id))
        if not isinstance(job, JobRecord) or job.state_name == "buried":
            task.skipped += 1
            continue
        job = await answer(engine.reserve_job(s, job_id))
        if not isinstance(job, JobRecord):
            if job is not o.NOT_FOUND:
                raise _fail(job)
            task.skipped += 1  # gone, or held by a worker
            continue
        outcome = await answer(engine.bury(s, job_id, job.pri if pri is None else pri))
        if outcome is not o.BURIED:
            raise _fail(outcome)
        task.done += 1
        buried.append(job_id)
        await slicer.point()
    task.result = {"buried": buried}


async def move_jobs(engine: Engine, task: Task, s: Session, slicer: Slicer, ids: List[int],
                    destination: bytes) -> None:
    moved = {}
    for job_id in ids:
        stats = await answer(engine.job_stats(job_id))
        if stats is o.NOT_FOUND:
            task.skipped += 1
            continue
        facts = as_dict(stats)
        if facts["tube"] == _name(destination):
            task.skipped += 1
            continue
        delay = int(facts["time-left"]) if facts["state"] == "delayed" else 0
        job = await answer(engine.reserve_job(s, job_id))
        if not isinstance(job, JobRecord):
            if job is not o.NOT_FOUND:
                raise _fail(job)
            task.skipped += 1  # held by a worker
            continue
        await answer(engine.use(s, destination))
        new_id = await answer(engine.put(s, job.pri, delay, job.ttr, job.body))
        if not isinstance(new_id, int):
            await _put_back(engine, s, job, facts, delay)
            raise _fail(new_id)
        outcome = await answer(engine.delete(s, job_id))
        if outcome is not o.DELETED:
            raise _fail(outcome)  # the copy exists; the original returns to ready
        task.done += 1
        moved[job_id] = new_id
        await slicer.point()
    task.result = {"moved": {str(k): v for k, v in moved.items()},
                   "tube": _name(destination)}


async def _put_back(engine: Engine, s: Session, job: JobRecord, facts: Dict[str, Any],
                    delay: int) -> None:
    """Undo a move's reserve-job when the copy could not be put."""
    if facts["state"] == "buried":
        await answer(engine.bury(s, job.id, job.pri))
    else:
        await answer(engine.release(s, job.id, job.pri, delay))


async def flush(engine: Engine, task: Task, s: Session, slicer: Slicer,
                tube: bytes, state: str) -> None:
    stats = await answer(engine.tube_stats(tube))
    if stats is o.NOT_FOUND:
        raise ApiError(404, f"no tube {_name(tube)}")
    task.total = int(as_dict(stats)[f"current-jobs-{state}"])
    while task.done < task.total:
        # Any order will do; id order is the one an engine finds cheapest
        # to resume after deletions (no stale heap entries to step over).
        page = await answer(engine.jobs_page(tube, state, "id", 0,
                                             min(SLICE, task.total - task.done)))
        if page is o.NOT_FOUND or not page[1]:
            break
        progress = task.done
        for job in page[1]:
            outcome = await answer(engine.delete(s, job.id))
            if outcome is o.DELETED:
                task.done += 1
            elif outcome is o.NOT_FOUND:
                task.skipped += 1
            else:
                raise _fail(outcome)
            await slicer.point()
        if task.done == progress:
            break
    task.result = {"deleted": task.done, "state": state}


__all__ = ["SLICE", "bury_jobs", "delete_jobs", "flush", "kick", "kick_jobs", "move_jobs",
           "pause", "put"]
