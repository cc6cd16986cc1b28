# -*- test-case-name: tests.test_client_worker -*-
"""A worker loop: reserve, run a handler, delete / release / bury.

::

    async def send_email(job):
        await mailer.send(job.value)          # any exception -> bury
        # raise Retry() to have the job released with backoff instead

    worker = Worker(client, send_email, tubes=["emails"], concurrency=4)
    # or one handler per tube: Worker(client, {"emails": send_email, "thumbs": resize})
    worker.start()
    ...
    await worker.stop(timeout=30)             # finish (or release) jobs in hand

Outcomes of one job:

* the handler returns (plain value, Deferred or coroutine): **delete**;
* it raises an exception ``retryable(exc)`` accepts (default: :class:`Retry`,
  and :class:`HandlerTimeout`): **release** with a delay of
  ``retry_delay(attempt)`` (or ``Retry(delay=)``); on attempt
  ``max_retries + 1`` **bury** instead, so a job runs at most
  ``max_retries + 1`` times.  The attempt number is ``releases + 1`` from the
  job's ``stats-job``: how many times anyone released the job, plus one;
* it raises anything else: **bury**;
* it runs longer than ``handler_timeout``: cancelled, then as a :class:`HandlerTimeout`;
* the handler deleted/released/buried the job itself: nothing more;
* the job's connection was lost meanwhile, or its TTR ran out: nothing (the
  server took the job back).

While a handler runs, the job is touched before its TTR runs out (once the
handler has run ``touch_check`` seconds the worker reads the job's
``time-left`` with ``stats-job``, then touches ``touch_margin`` seconds before
each deadline), so long jobs are not handed to another worker.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Union

from twisted.internet.defer import (
    CancelledError,
    Deferred,
    DeferredList,
    TimeoutError,
    succeed,
)
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger

from ..wording import counted

from .errors import (
    BeanstalkConnectionError,
    ClientClosed,
    DeadlineSoon,
    JobLost,
    TimedOut,
)
from .job import DEFAULT_PRIORITY, Job

Handler = Callable[[Job], Any]
Handlers = Union[Handler, Mapping[str, Handler]]


class Retry(Exception):
    """Raise from a handler to have the job released and tried again later.

    :param delay: seconds before the job is ready again (default: the
        worker's ``retry_delay`` for this attempt).
    """

    def __init__(self, message: str = "", delay: Optional[int] = None) -> None:
        super().__init__(message)
        self.delay = delay


class HandlerTimeout(Retry):
    """The handler ran longer than the worker's ``handler_timeout``: it was
    cancelled (a Deferred or coroutine handler; a plain function cannot be)
    and the job is released for a retry, like :class:`Retry`."""


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
    #: Jobs the worker could not dispose of because the server took them back
    #: (their connection closed, or their TTR ran out), or whose disposal got
    #: no answer: a job counts as deleted only once the server confirmed it.
    lost: int = 0
    #: Jobs the handler deleted, released or buried itself.
    self_disposed: int = 0
    touched: int = 0
    #: Errors reserving or disposing of jobs (not handler errors).
    errors: int = 0
    #: Handlers cancelled after ``handler_timeout``.
    timeouts: int = 0


class _InHand:
    __slots__ = ("job", "timer", "abandoned")

    def __init__(self, job: Job) -> None:
        self.job = job
        self.timer: Optional[IDelayedCall] = None
        self.abandoned = False


class Worker:
    """Runs handlers on jobs reserved from ``tubes`` by ``concurrency`` loops.

    :param client: a :class:`~twisted_stalk.client.BeanstalkClient` or a
        :class:`~twisted_stalk.client.BeanstalkPool`.
    :param handler: called with each :class:`~twisted_stalk.client.Job`; may
        return a value, a Deferred or a coroutine.  Or a mapping of tube name
        to handler (one handler per tube, as beaneater's ``jobs.register``);
        more can be added with :meth:`register` before :meth:`start`.
    :param tubes: tubes to reserve from (default: the handler mapping's
        tubes, else the client's watch list).
    :param concurrency: jobs handled at once (each loop reserves on its own
        connection), hence the most jobs the worker ever holds.
    :param max_retries: releases allowed before a retryable job is buried: a
        job runs at most ``max_retries + 1`` times.  The attempt number is the
        job's ``releases`` count (``stats-job``) plus one; releases by anyone
        count (also this worker's releases when it stops with jobs in hand),
        TTR expiries and closed connections do not.
    :param retry_delay: release delay for attempt *n* (1-based).
    :param retryable: which handler exceptions mean "release and retry"
        (default: :class:`Retry`, which includes :class:`HandlerTimeout`).
    :param release_priority: priority for released jobs; ``bury_priority`` for buried.
    :param touch: touch jobs whose handler runs close to the TTR.
    :param touch_margin: touch this many seconds before the TTR runs out.
    :param touch_check: seconds a handler runs before the worker reads the
        job's ``time-left`` (``stats-job``) to schedule touches; quicker
        handlers cost no extra round trip.
    :param handler_timeout: seconds a handler may run (None: no limit); then
        it is cancelled and the job handled as :class:`HandlerTimeout`.  With
        ``touch`` on and no limit, a hung handler holds its job forever.
    :param reserve_timeout: None reserves without a timeout (stop cancels the
        reserve, closing its connection); N uses ``reserve-with-timeout N``.
    :param error_backoff: seconds to wait after a failed reserve.
    :param on_retry: called as ``on_retry(job, error, delay)`` when a job is released for a retry.
    :param on_bury: called as ``on_bury(job, error)`` when the worker buries a job.
    :param on_lost: called as ``on_lost(job, reason)`` when a job in hand was
        taken back by the server (connection closed, TTR ran out).
    """

    log = Logger()

    def __init__(self, client: Any, handler: Optional[Handlers] = None,
                 tubes: Optional[Sequence[Union[str, bytes]]] = None, *,
                 concurrency: int = 1, max_retries: int = 5,
                 retry_delay: Callable[[int], int] = exponential_backoff(),
                 retryable: Optional[Callable[[BaseException], bool]] = None,
                 release_priority: int = DEFAULT_PRIORITY,
                 bury_priority: int = DEFAULT_PRIORITY,
                 touch: bool = True, touch_margin: float = 2.0, touch_check: float = 0.5,
                 handler_timeout: Optional[float] = None,
                 reserve_timeout: Optional[int] = None, error_backoff: float = 1.0,
                 on_retry: Optional[Callable[[Job, BaseException, int], Any]] = None,
                 on_bury: Optional[Callable[[Job, BaseException], Any]] = None,
                 on_lost: Optional[Callable[[Job, str], Any]] = None,
                 clock: Optional[IReactorTime] = None) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.client = client
        self._running = False
        self.handler: Optional[Handler] = None
        #: Handlers by tube name (see :meth:`register`).
        self.handlers: Dict[str, Handler] = {}
        if isinstance(handler, Mapping):
            for tube, fn in handler.items():
                self.register(tube, fn)
        else:
            self.handler = handler
        self._tubes = tuple(tubes) if tubes is not None else None
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.retry_delay = retry_delay
        self.retryable = retryable or (lambda exc: isinstance(exc, Retry))
        self.release_priority = release_priority
        self.bury_priority = bury_priority
        self.touch = touch
        self.touch_margin = touch_margin
        self.touch_check = touch_check
        self.handler_timeout = handler_timeout
        self.reserve_timeout = reserve_timeout
        self.error_backoff = error_backoff
        self.on_retry = on_retry
        self.on_bury = on_bury
        self.on_lost = on_lost
        self.clock: IReactorTime = clock or client.clock
        self.stats = WorkerStats()
        self._running = False
        self._loops: List[Deferred] = []
        self._waits: Set[Deferred] = set()
        self._in_hand: Dict[int, _InHand] = {}
        self._stopped: Optional[Deferred] = None

    def register(self, tube: Union[str, bytes], handler: Handler) -> None:
        """Handle jobs of ``tube`` with ``handler`` (before :meth:`start`)."""
        if self._running:
            raise RuntimeError("register handlers before start()")
        name = tube.decode("ascii") if isinstance(tube, bytes) else tube
        self.handlers[name] = handler

    @property
    def tubes(self) -> Optional[tuple]:
        """The tubes reserved from (None: the client's watch list)."""
        if self._tubes is not None:
            return self._tubes
        return tuple(self.handlers) if self.handlers else None

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
        if self.handler is None and not self.handlers:
            raise ValueError("a Worker needs a handler (or handlers by tube)")
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
        if job.finished or job.pending or job.lost:
            return succeed(None)
        d = job.release(self.release_priority, 0)
        d.addCallbacks(self._count, self._dispose_failed, callbackArgs=("released",),
                       errbackArgs=(job,))
        return d

    def _count(self, _: Any, what: str) -> None:
        setattr(self.stats, what, getattr(self.stats, what) + 1)

    def _hook(self, hook: Optional[Callable[..., Any]], *args: Any) -> None:
        if hook is None:
            return
        try:
            hook(*args)
        except Exception:
            self.log.failure("the worker's {hook!r} hook failed", hook=hook)

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
                try:
                    await job.release(self.release_priority, 0)
                    self.stats.released += 1
                except Exception as e:
                    self._dispose_failed(e, job)
                break
            await self._process(job)

    async def _handler_for(self, job: Job) -> Handler:
        if not self.handlers:
            return self.handler  # type: ignore[return-value]
        if job.tube is None:
            await job.stats()  # one round trip: the reserve watched several tubes
        handler = self.handlers.get(job.tube or "", self.handler)
        if handler is None:
            raise LookupError(f"no handler for tube {job.tube!r} (job {job.id})")
        return handler

    async def _run_handler(self, job: Job) -> Any:
        handler = await self._handler_for(job)
        result = handler(job)
        if inspect.isawaitable(result) and not isinstance(result, Deferred):
            result = Deferred.fromCoroutine(result)  # type: ignore[arg-type]
        if isinstance(result, Deferred):
            if self.handler_timeout is not None:
                result.addTimeout(self.handler_timeout, self.clock)
            try:
                result = await result
            except TimeoutError:
                self.stats.timeouts += 1
                raise HandlerTimeout(f"the handler ran more than {self.handler_timeout:g} s "
                                     "and was cancelled") from None
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
            self.log.warn("job {id} was lost while its handler ran: {why}", id=job.id,
                          why=job.lost_reason)
            self._hook(self.on_lost, job, job.lost_reason or "")
            return
        if job.finished is not None or job.pending is not None:
            self.stats.self_disposed += 1
            return
        try:
            if error is None:
                await job.delete()
                self.stats.deleted += 1
            elif self.retryable(error):
                await self._retry(job, error)
            else:
                self.log.failure("handler failed on job {id}; burying it", id=job.id,
                                 failure=_failure(error))
                await self._bury(job, error)
        except Exception as e:
            self._dispose_failed(e, job)

    async def _bury(self, job: Job, error: BaseException) -> None:
        await job.bury(self.bury_priority)
        self.stats.buried += 1
        self._hook(self.on_bury, job, error)

    async def _retry(self, job: Job, error: BaseException) -> None:
        stats = job.stats_cache
        if stats is None:
            try:
                stats = await job.stats()
            except Exception:
                stats = {}
        releases = stats.get("releases", 0)
        attempt = releases + 1 if isinstance(releases, int) and releases >= 0 else 1
        if attempt > self.max_retries:
            self.log.warn("job {id} failed {times}; burying it", id=job.id, n=attempt,
                          times=counted(attempt, "time"))
            await self._bury(job, error)
            return
        delay = getattr(error, "delay", None)
        if delay is None:
            delay = self.retry_delay(attempt)
        await job.release(self.release_priority, int(delay))
        self.stats.released += 1
        self._hook(self.on_retry, job, error, int(delay))

    def _dispose_failed(self, error: Any, job: Job) -> None:
        if isinstance(error, (JobLost, BeanstalkConnectionError)) or getattr(
                error, "check", lambda *a: False)(JobLost, BeanstalkConnectionError):
            self.stats.lost += 1
            self._hook(self.on_lost, job, str(getattr(error, "value", error)))
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
