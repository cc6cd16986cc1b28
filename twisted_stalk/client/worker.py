"""A worker loop: reserve, run a handler, delete / release / bury.

::

    async def send_email(job):
        await mailer.send(job.value)          # any exception -> bury
        # raise Retry() to have the job released with backoff instead

    worker = Worker(client, send_email, tubes=["emails"], concurrency=4)
    worker.start()
    ...
    await worker.stop(timeout=30)             # finish (or release) jobs in hand

Outcomes of one job:

* the handler returns (plain value, Deferred or coroutine): **delete**;
* it raises an exception ``retryable(exc)`` accepts (default: :class:`Retry`):
  **release** with a delay of ``retry_delay(attempt)`` (or ``Retry(delay=)``),
  or **bury** once the job has been reserved more than ``max_retries + 1`` times;
* it raises anything else: **bury**;
* the handler deleted/released/buried the job itself: nothing more;
* the job's connection was lost meanwhile: nothing (the server released it).

While a handler runs, the job is touched before its TTR runs out (once the
handler has run ``touch_check`` seconds the worker reads the job's
``time-left`` with ``stats-job``, then touches ``touch_margin`` seconds before
each deadline), so long jobs are not handed to another worker.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Union

from twisted.internet.defer import CancelledError, Deferred, DeferredList, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger

from .errors import (
    BeanstalkConnectionError,
    ClientClosed,
    DeadlineSoon,
    JobLost,
    TimedOut,
)
from .job import DEFAULT_PRIORITY, Job

Handler = Callable[[Job], Any]


class Retry(Exception):
    """Raise from a handler to have the job released and tried again later.

    :param delay: seconds before the job is ready again (default: the
        worker's ``retry_delay`` for this attempt).
    """

    def __init__(self, message: str = "", delay: Optional[int] = None) -> None:
        super().__init__(message)
        self.delay = delay


def exponential_backoff(base: float = 1.0, factor: float = 2.0,
                        maximum: float = 3600.0) -> Callable[[int], int]:
    """Release delays ``base * factor ** (attempt - 1)`` seconds, capped at ``maximum``."""
    def delay(attempt: int) -> int:
        return int(min(maximum, base * factor ** max(0, attempt - 1)))
    return delay


@dataclass
class WorkerStats:
    """What a :class:`Worker` did so far."""

    reserved: int = 0
    deleted: int = 0
    released: int = 0
    buried: int = 0
    #: Jobs whose connection closed while their handler ran.
    lost: int = 0
    #: Jobs the handler deleted, released or buried itself.
    self_disposed: int = 0
    touched: int = 0
    #: Errors reserving or disposing of jobs (not handler errors).
    errors: int = 0


class _InHand:
    __slots__ = ("job", "timer", "abandoned")

    def __init__(self, job: Job) -> None:
        self.job = job
        self.timer: Optional[IDelayedCall] = None
        self.abandoned = False


class Worker:
    """Runs ``handler`` on jobs reserved from ``tubes`` by ``concurrency`` loops.

    :param client: a :class:`~twisted_stalk.client.BeanstalkClient`.
    :param handler: called with each :class:`~twisted_stalk.client.Job`; may
        return a value, a Deferred or a coroutine.
    :param tubes: tubes to reserve from (default: the client's watch list).
    :param concurrency: jobs handled at once (each loop reserves on its own
        connection of the client's reserve pool).
    :param max_retries: releases allowed before a retryable job is buried.
    :param retry_delay: release delay for attempt *n* (1-based).
    :param retryable: which handler exceptions mean "release and retry"
        (default: :class:`Retry` only).
    :param release_priority: priority for released jobs; ``bury_priority`` for buried.
    :param touch: touch jobs whose handler runs close to the TTR.
    :param touch_margin: touch this many seconds before the TTR runs out.
    :param touch_check: seconds a handler runs before the worker reads the
        job's ``time-left`` (``stats-job``) to schedule touches; quicker
        handlers cost no extra round trip.
    :param reserve_timeout: None reserves without a timeout (stop cancels the
        reserve, closing its connection); N uses ``reserve-with-timeout N``.
    :param error_backoff: seconds to wait after a failed reserve.
    """

    log = Logger()

    def __init__(self, client: Any, handler: Handler,
                 tubes: Optional[Sequence[Union[str, bytes]]] = None, *,
                 concurrency: int = 1, max_retries: int = 5,
                 retry_delay: Callable[[int], int] = exponential_backoff(),
                 retryable: Optional[Callable[[BaseException], bool]] = None,
                 release_priority: int = DEFAULT_PRIORITY,
                 bury_priority: int = DEFAULT_PRIORITY,
                 touch: bool = True, touch_margin: float = 2.0, touch_check: float = 0.5,
                 reserve_timeout: Optional[int] = None, error_backoff: float = 1.0,
                 clock: Optional[IReactorTime] = None) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.client = client
        self.handler = handler
        self.tubes = tuple(tubes) if tubes is not None else None
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.retry_delay = retry_delay
        self.retryable = retryable or (lambda exc: isinstance(exc, Retry))
        self.release_priority = release_priority
        self.bury_priority = bury_priority
        self.touch = touch
        self.touch_margin = touch_margin
        self.touch_check = touch_check
        self.reserve_timeout = reserve_timeout
        self.error_backoff = error_backoff
        self.clock: IReactorTime = clock or client.clock
        self.stats = WorkerStats()
        self._running = False
        self._loops: List[Deferred] = []
        self._waits: Set[Deferred] = set()
        self._in_hand: Dict[int, _InHand] = {}
        self._stopped: Optional[Deferred] = None

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return self._running

    @property
    def jobs_in_hand(self) -> List[Job]:
        """Jobs whose handlers are running."""
        return [h.job for h in self._in_hand.values()]

    def start(self) -> None:
        """Start the reserve loops."""
        if self._running:
            return
        self._running = True
        self._stopped = None
        self._loops = [Deferred.fromCoroutine(self._loop()) for _ in range(self.concurrency)]

    def stop(self, timeout: Optional[float] = None) -> "Deferred[None]":
        """Stop reserving; fire once every job in hand is finished.

        With ``timeout``, jobs whose handlers are still running after that
        many seconds are released (their handlers' results are then ignored).
        """
        if self._stopped is not None:
            return self._chain(self._stopped)
        self._running = False
        for d in list(self._waits):
            d.cancel()
        loops = DeferredList(self._loops, consumeErrors=True)
        done: Deferred = Deferred()
        self._stopped = done
        timer: Optional[IDelayedCall] = None

        def finished(_: Any) -> None:
            if timer is not None and timer.active():
                timer.cancel()
            if not done.called:
                done.callback(None)
        loops.addCallback(finished)

        if timeout is not None:
            def give_up() -> None:
                releases = [self._abandon(h) for h in list(self._in_hand.values())]
                DeferredList(releases, consumeErrors=True).addCallback(finished)
            timer = self.clock.callLater(timeout, give_up)
        return self._chain(done)

    @staticmethod
    def _chain(d: Deferred) -> Deferred:
        """A new Deferred firing (with None) when ``d`` does; ``d`` is untouched."""
        out: Deferred = Deferred()

        def fire(result: Any) -> Any:
            out.callback(None)
            return result
        d.addBoth(fire)
        return out

    def _abandon(self, hand: _InHand) -> Deferred:
        hand.abandoned = True
        self._stop_touching(hand)
        job = hand.job
        self._in_hand.pop(job.id, None)
        if job.finished or job.lost:
            return succeed(None)
        self.stats.released += 1
        return job.release(self.release_priority, 0).addErrback(self._dispose_failed, job)

    # ------------------------------------------------------------------ loop

    async def _sleep(self, seconds: float) -> None:
        d = deferLater(self.clock, seconds, lambda: None)
        self._waits.add(d)
        try:
            await d
        except CancelledError:
            pass
        finally:
            self._waits.discard(d)

    async def _loop(self) -> None:
        client = self.client
        while self._running:
            d = client.reserve(self.reserve_timeout, tubes=self.tubes)
            self._waits.add(d)
            try:
                job = await d
            except CancelledError:
                break
            except ClientClosed:
                break
            except (TimedOut, DeadlineSoon):
                continue
            except Exception as e:
                self.stats.errors += 1
                if self._running:
                    self.log.warn("reserve failed: {error!r}; retrying in {delay} s",
                                  error=e, delay=self.error_backoff)
                    await self._sleep(self.error_backoff)
                continue
            finally:
                self._waits.discard(d)
            self.stats.reserved += 1
            if not self._running:  # reserved while stopping: give it back
                self.stats.released += 1
                try:
                    await job.release(self.release_priority, 0)
                except Exception as e:
                    self._dispose_failed(e, job)
                break
            await self._process(job)

    async def _run_handler(self, job: Job) -> Any:
        result = self.handler(job)
        if inspect.isawaitable(result) and not isinstance(result, Deferred):
            result = Deferred.fromCoroutine(result)  # type: ignore[arg-type]
        if isinstance(result, Deferred):
            result = await result
        return result

    async def _process(self, job: Job) -> None:
        hand = _InHand(job)
        self._in_hand[job.id] = hand
        if self.touch:
            self._start_touching(hand)
        error: Optional[BaseException] = None
        try:
            await self._run_handler(job)
        except Exception as e:
            error = e
        finally:
            self._stop_touching(hand)
            self._in_hand.pop(job.id, None)
        if hand.abandoned:
            return
        if job.lost:
            self.stats.lost += 1
            self.log.warn("job {id} was lost (its connection closed) while its handler ran",
                          id=job.id)
            return
        if job.finished is not None:
            self.stats.self_disposed += 1
            return
        try:
            if error is None:
                self.stats.deleted += 1
                await job.delete()
            elif self.retryable(error):
                await self._retry(job, error)
            else:
                self.log.failure("handler failed on job {id}; burying it", id=job.id,
                                 failure=_failure(error))
                self.stats.buried += 1
                await job.bury(self.bury_priority)
        except Exception as e:
            self._dispose_failed(e, job)

    async def _retry(self, job: Job, error: BaseException) -> None:
        stats = job.stats_cache
        if stats is None:
            try:
                stats = await job.stats()
            except Exception:
                stats = {}
        attempts = stats.get("reserves", 1)
        attempt = attempts if isinstance(attempts, int) and attempts > 0 else 1
        if attempt > self.max_retries:
            self.log.warn("job {id} failed {n} times; burying it", id=job.id, n=attempt)
            self.stats.buried += 1
            await job.bury(self.bury_priority)
            return
        delay = getattr(error, "delay", None)
        if delay is None:
            delay = self.retry_delay(attempt)
        self.stats.released += 1
        await job.release(self.release_priority, int(delay))

    def _dispose_failed(self, error: Any, job: Job) -> None:
        if isinstance(error, (JobLost, BeanstalkConnectionError)) or getattr(
                error, "check", lambda *a: False)(JobLost, BeanstalkConnectionError):
            self.stats.lost += 1
        else:
            self.stats.errors += 1
        self.log.warn("could not dispose of job {id}: {error}", id=job.id, error=error)

    # ----------------------------------------------------------------- touch

    def _start_touching(self, hand: _InHand) -> None:
        # Most handlers finish quickly: only ask for the job's time-left (one
        # round trip) once the handler has run for touch_check seconds.
        hand.timer = self.clock.callLater(self.touch_check, self._check_deadline, hand)

    def _check_deadline(self, hand: _InHand) -> None:
        hand.timer = None
        job = hand.job
        if job.finished is not None or job.lost or hand.abandoned:
            return

        def got(stats: Dict[str, Any]) -> None:
            left = stats.get("time-left")
            if (isinstance(left, int) and not hand.abandoned and job.id in self._in_hand
                    and hand.timer is None):
                self._schedule_touch(hand, left)

        job.stats().addCallbacks(got, lambda f: None)

    def _schedule_touch(self, hand: _InHand, seconds_left: float) -> None:
        delay = max(seconds_left - self.touch_margin, seconds_left / 2.0, 0.1)
        hand.timer = self.clock.callLater(delay, self._touch, hand)

    def _touch(self, hand: _InHand) -> None:
        hand.timer = None
        job = hand.job
        if job.finished is not None or job.lost or hand.abandoned:
            return

        def touched(_: Any) -> None:
            self.stats.touched += 1
            ttr = (job.stats_cache or {}).get("ttr")
            if isinstance(ttr, int) and job.id in self._in_hand and not hand.abandoned:
                self._schedule_touch(hand, ttr)

        job.touch().addCallbacks(touched, lambda f: None)

    @staticmethod
    def _stop_touching(hand: _InHand) -> None:
        timer, hand.timer = hand.timer, None
        if timer is not None and timer.active():
            timer.cancel()


def _failure(error: BaseException) -> Any:
    from twisted.python.failure import Failure
    return Failure(error)
