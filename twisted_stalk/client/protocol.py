# -*- test-case-name: tests.test_client_protocol -*-
"""One beanstalk connection: every command, a Deferred each.

:class:`BeanstalkProtocol` is three ideas in three modules:

* :mod:`twisted_stalk.client.pipeline`: the FIFO of Deferreds matched to
  replies in order, the response timer, held calls behind a reserve,
  cancellation, per-call tube targeting;
* this module: the commands, encoded from the command table
  (:func:`twisted_stalk.protocol.commands.encode_command`), their arguments
  checked once per argument kind by the same table
  (:func:`twisted_stalk.client._validate.command_args`), their replies
  turned into typed results (:class:`~twisted_stalk.client.job.Job` for
  reserves and peeks); ``reserve`` has no response timeout and
  ``reserve-with-timeout N`` gets ``N + reserve_grace`` seconds;
* :mod:`twisted_stalk.client.extensions`: our server's extension verbs
  (``capabilities``, ``list-jobs``, ``flush-tube``) and their fallbacks on
  stock commands.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import Factory
from twisted.python.failure import Failure

from ..protocol.commands import (command_format, command_spec, encode_command,
                                 validate_command_args)
from ..protocol.constants import DEFAULT_MAX_JOB_SIZE, MAX_RESERVE_TIMEOUT, U32_MAX
from ..protocol.replies import Reply
from ..protocol.yaml import StatValue
from . import _validate as v
from .errors import InvalidArgument
from .extensions import ExtensionCommands
from .job import DEFAULT_PRIORITY, DEFAULT_TTR, Codec, Job
from .pipeline import DEFAULT_TIMEOUT, TubeName, _job_id, _none, _reply, _value

Stats = Dict[str, StatValue]

#: Extra seconds a ``reserve-with-timeout N`` may take beyond N.
DEFAULT_RESERVE_GRACE = 5.0

# put is the hot path: its format from the table, filled in place.
_PUT = command_format("put")


def _reserved(proto: "BeanstalkProtocol", reply: Reply, tube: Optional[str] = None) -> Job:
    job_id = reply.job_id
    assert job_id is not None and reply.body is not None
    job = Job(job_id, reply.body, reserved=True, proto=proto, client=proto.client,
              codec=proto.codec, tube=tube)
    job.granted_at = proto.clock.seconds()
    jobs = proto._jobs
    old = jobs.get(job_id)
    if old is not None:  # reserved again here: the first reservation's TTR ran out
        old.expire("its TTR ran out: the server took it back, and this connection "
                    "reserved it again (as another Job)")
    jobs[job_id] = job
    return job


def _reserved_in(tube: bytes) -> Callable[["BeanstalkProtocol", Reply], Job]:
    """``_reserved`` for a reserve watching ``tube`` only: the job's tube is known."""
    name = tube.decode("ascii")
    return lambda proto, reply: _reserved(proto, reply, name)


def _found(proto: "BeanstalkProtocol", reply: Reply) -> Job:
    assert reply.job_id is not None and reply.body is not None
    return Job(reply.job_id, reply.body, reserved=False, proto=proto, client=proto.client,
               codec=proto.codec)


class BeanstalkProtocol(ExtensionCommands):
    """A beanstalk client connection.

    Every method sends one command (plus any ``use``/``watch``/``ignore`` its
    tube arguments need) and returns a Deferred of its typed result, or fails
    it with the :mod:`~twisted_stalk.client.errors` class of the error reply
    (:class:`InvalidArgument`, and nothing sent, for a bad argument).
    Any number of calls may be outstanding; they are answered in order.

    :param clock: the reactor (or a ``Clock``) for the response timer.
    :param timeout: seconds the command at the head of the pipeline may wait
        for its reply (None: forever); ``reserve`` never times out and
        ``reserve-with-timeout N`` gets ``N + reserve_grace``.
    :param max_job_size: largest body ``put`` sends (None: no check).
    :param codec: encodes non-bytes bodies and decodes ``Job.value``.
    """

    #: The client this connection belongs to, if any (jobs use it for commands
    #: that need no particular connection).
    client: Any = None
    #: Called with no argument when the last job reserved on this connection
    #: is disposed of (the reserve pool uses it).
    on_jobs_done: Optional[Callable[[], None]] = None

    def __init__(self, clock: Optional[IReactorTime] = None, *,
                 timeout: Optional[float] = DEFAULT_TIMEOUT,
                 reserve_grace: float = DEFAULT_RESERVE_GRACE,
                 max_job_size: Optional[int] = DEFAULT_MAX_JOB_SIZE,
                 codec: Optional[Codec] = None) -> None:
        super().__init__(clock, timeout=timeout)
        self.reserve_grace = reserve_grace
        self.max_job_size = max_job_size
        self.codec = codec
        #: Jobs reserved on this connection and not yet deleted/released/buried.
        self._jobs: Dict[int, Job] = {}

    @property
    def reserved_jobs(self) -> Tuple[Job, ...]:
        """Jobs reserved on this connection and not yet disposed of."""
        return tuple(self._jobs.values())

    def _connection_failed(self, reason: str) -> None:
        jobs = list(self._jobs.values())
        self._jobs.clear()
        for job in jobs:
            job.mark_lost(reason)

    def held(self, job_id: int) -> Optional[Job]:
        """The job with this id reserved on this connection and not yet
        disposed of, if any."""
        return self._jobs.get(job_id)

    def forget(self, job: Job) -> None:
        """Stop tracking ``job`` as held here (its TTR ran out: the server
        took it back); unlike a disposal, ``on_jobs_done`` is not called."""
        if self._jobs.get(job.id) is job:
            del self._jobs[job.id]

    def _job_done(self, job_id: Any) -> None:
        jobs = self._jobs
        job = jobs.pop(job_id.id if isinstance(job_id, Job) else job_id, None)
        if job is not None and not jobs and self.on_jobs_done is not None:
            self.on_jobs_done()

    # --------------------------------------------------------------- producing

    def put(self, body: Union[bytes, str, Any], priority: int = DEFAULT_PRIORITY,
            delay: int = 0, ttr: int = DEFAULT_TTR,
            tube: Optional[TubeName] = None) -> "Deferred[int]":
        """Insert a job; fires with its id.

        ``body`` is bytes, or a str (UTF-8) or any value the codec encodes.
        ``tube`` (default: the tube in use) is selected with ``use`` first if needed.
        Errors: :class:`Buried` (with ``job_id``), :class:`JobTooBig`,
        :class:`Draining`, :class:`ExpectedCRLF`, :class:`InvalidArgument`.
        """
        if not self._ready():
            return self._closed()
        try:
            # The hot path: plain bytes and ints in range are taken as they are.
            if type(body) is not bytes or (self.max_job_size is not None
                                            and len(body) > self.max_job_size):
                body = v.body(body, self.codec, self.max_job_size)
            if not (type(priority) is int and type(delay) is int and type(ttr) is int
                    and 0 <= priority <= U32_MAX and 0 <= delay <= U32_MAX
                    and 0 <= ttr <= U32_MAX):
                priority, delay, ttr = v.command_args("put", (priority, delay, ttr))
            if tube is not None:
                self._ensure_use(tube)
        except InvalidArgument as e:
            return fail(e)
        return self._send("put", _PUT % (priority, delay, ttr, len(body), body), _job_id,
                          self.timeout)

    # ------------------------------------------------------------------ tubes

    def use(self, tube: TubeName) -> "Deferred[str]":
        """Use ``tube`` for later puts, peeks and kicks; fires with its name."""
        return self._command("use", (tube,), None, send=self._use)

    def _use(self, raw: bytes) -> Deferred:
        self._using = raw
        return self._send("use", encode_command("use", raw), _value, self.timeout)

    def watch(self, tube: TubeName) -> "Deferred[int]":
        """Add ``tube`` to the watch list; fires with the list's length."""
        return self._command("watch", (tube,), None, send=self._watch)

    def _watch(self, raw: bytes) -> Deferred:
        if raw not in self._watching:
            self._watching = self._watching + [raw]
        return self._send("watch", encode_command("watch", raw), _value, self.timeout)

    def ignore(self, tube: TubeName) -> "Deferred[int]":
        """Remove ``tube`` from the watch list; fires with the list's length.

        Errors: :class:`NotIgnored` (it is the only tube watched).
        """
        return self._command("ignore", (tube,), None, send=self._ignore)

    def _ignore(self, raw: bytes) -> Deferred:
        if raw in self._watching and len(self._watching) > 1:
            self._watching = [t for t in self._watching if t != raw]
        return self._send("ignore", encode_command("ignore", raw), _value, self.timeout)

    # -------------------------------------------------------------- reserving

    def reserve(self, timeout: Optional[int] = None,
                watching: Optional[Sequence[TubeName]] = None) -> "Deferred[Job]":
        """Reserve a job from the watched tubes (or from ``watching``, which
        becomes the connection's watch list).

        ``timeout`` None sends ``reserve`` (waits forever, no response
        timeout); a number sends ``reserve-with-timeout`` (0 answers at once).
        Errors: :class:`TimedOut`, :class:`DeadlineSoon`.
        """
        if timeout is None:
            return self._command("reserve", (), None, watching=watching, send=self._reserve)
        return self._command("reserve-with-timeout", (timeout,), None, watching=watching,
                             send=self._reserve)

    def _reserve(self, timeout: Optional[int] = None) -> Deferred:
        watched = self._watching
        convert = _reserved_in(watched[0]) if len(watched) == 1 else _reserved
        if timeout is None:
            return self._send("reserve", encode_command("reserve"), convert, None,
                              blocking=True)
        return self._send("reserve-with-timeout", encode_command("reserve-with-timeout", timeout),
                          convert, timeout + self.reserve_grace, blocking=True)

    def reserve_with_timeout(self, timeout: int,
                             watching: Optional[Sequence[TubeName]] = None) -> "Deferred[Job]":
        """``reserve-with-timeout``: like :meth:`reserve` with a timeout."""
        return self.reserve(timeout if timeout is not None else 0, watching)

    def reserve_job(self, job_id: int) -> "Deferred[Job]":
        """Reserve the job with this id (ready, delayed or buried). Errors: :class:`NotFound`."""
        return self._id_command("reserve-job", job_id, _reserved)

    # ------------------------------------------------------------------- jobs

    def _id_command(self, name: str, job_id: Any, convert: Callable[..., Any],
                    *extra: Any) -> Deferred:
        return self._command(name, (job_id.id if isinstance(job_id, Job) else job_id,) + extra,
                             convert)

    def _disposing(self, d: Deferred, job_id: Any) -> Deferred:
        """``d`` deletes, releases or buries ``job_id``: it is no longer this
        connection's to hold, unless its arguments were refused (nothing sent)."""
        if not (d.called and isinstance(d.result, Failure) and d.result.check(InvalidArgument)):
            self._job_done(job_id)
        return d

    def delete(self, job_id: int) -> "Deferred[None]":
        """Delete a job. Errors: :class:`NotFound`."""
        return self._disposing(self._id_command("delete", job_id, _none), job_id)

    def release(self, job_id: int, priority: int = DEFAULT_PRIORITY,
                delay: int = 0) -> "Deferred[None]":
        """Release a job reserved on this connection.

        Errors: :class:`NotFound`, :class:`Buried` (server out of memory).
        """
        return self._disposing(self._id_command("release", job_id, _none, priority, delay),
                               job_id)

    def bury(self, job_id: int, priority: int = DEFAULT_PRIORITY) -> "Deferred[None]":
        """Bury a job reserved on this connection. Errors: :class:`NotFound`."""
        return self._disposing(self._id_command("bury", job_id, _none, priority), job_id)

    def touch(self, job_id: int) -> "Deferred[None]":
        """Restart the TTR of a job reserved on this connection. Errors: :class:`NotFound`."""
        return self._id_command("touch", job_id, _none)

    def kick_job(self, job_id: int) -> "Deferred[None]":
        """Kick one buried or delayed job. Errors: :class:`NotFound`."""
        return self._id_command("kick-job", job_id, _none)

    def peek(self, job_id: int) -> "Deferred[Job]":
        """The job with this id. Errors: :class:`NotFound`."""
        return self._id_command("peek", job_id, _found)

    def stats_job(self, job_id: int) -> "Deferred[Stats]":
        """The job's statistics. Errors: :class:`NotFound`."""
        return self._id_command("stats-job", job_id, _value)

    # ----------------------------------------------------- the tube in use

    def peek_ready(self, tube: Optional[TubeName] = None) -> "Deferred[Job]":
        """The next ready job of the tube in use (or ``tube``). Errors: :class:`NotFound`."""
        return self._command("peek-ready", (), _found, tube)

    def peek_delayed(self, tube: Optional[TubeName] = None) -> "Deferred[Job]":
        """The delayed job with the shortest delay left. Errors: :class:`NotFound`."""
        return self._command("peek-delayed", (), _found, tube)

    def peek_buried(self, tube: Optional[TubeName] = None) -> "Deferred[Job]":
        """The next buried job. Errors: :class:`NotFound`."""
        return self._command("peek-buried", (), _found, tube)

    def kick(self, bound: int, tube: Optional[TubeName] = None) -> "Deferred[int]":
        """Kick up to ``bound`` buried (or else delayed) jobs; fires with the number kicked."""
        return self._command("kick", (bound,), _value, tube)

    def list_tube_used(self, tube: Optional[TubeName] = None) -> "Deferred[str]":
        """The tube in use (after switching to ``tube`` if given)."""
        return self._command("list-tube-used", (), _value, tube)

    def list_tubes_watched(self, watching: Optional[Sequence[TubeName]] = None
                           ) -> "Deferred[List[str]]":
        """The watch list (after switching to ``watching`` if given)."""
        return self._command("list-tubes-watched", (), _value, watching=watching)

    # --------------------------------------------------------------- server

    def stats(self) -> "Deferred[Stats]":
        """The server's statistics."""
        return self._command("stats", (), _value)

    def list_tubes(self) -> "Deferred[List[str]]":
        """All existing tubes."""
        return self._command("list-tubes", (), _value)

    def pause_tube(self, tube: TubeName, delay: int) -> "Deferred[None]":
        """Hold back reserves from ``tube`` for ``delay`` seconds. Errors: :class:`NotFound`."""
        return self._command("pause-tube", (tube, delay), _none)

    # ------------------------------------------------------------ any command

    def command(self, name: str, *args: Union[int, str, bytes],
                body: Optional[bytes] = None) -> "Deferred[Reply]":
        """Send any command of the command table (stock or extension verb) with
        these arguments and fire with its decoded
        :class:`~twisted_stalk.protocol.replies.Reply`, error replies included
        (``reply.ok``; ``reply.error()`` is the exception; ``reply.value`` the
        typed value).  The arguments are checked as the shell checks them
        (:class:`InvalidArgument`); ``use``/``watch``/``ignore`` keep this
        connection's tracked state right.  A ``reserve`` sent this way holds
        later calls until it is answered, and its job is not tracked (no
        :class:`Job`): dispose of it with ``command("delete", id)`` here.
        """
        if not self._ready():
            return self._closed()
        if name == "quit":
            return fail(InvalidArgument("send quit with quit()"))
        texts = [a.decode("ascii", "replace") if isinstance(a, bytes) else str(a)
                 for a in args]
        problem = validate_command_args(name, texts)
        if problem is None and (body is None) == (name == "put"):
            problem = "put takes a body" if name == "put" else f"{name} takes no body"
        if problem is not None:
            return fail(InvalidArgument(problem))
        data = encode_command(name, *args, body=body)
        raw = args[0] if args and isinstance(args[0], bytes) else texts[0].encode() if texts else b""
        if name == "use":
            self._using = raw
        elif name == "watch" and raw not in self._watching:
            self._watching = self._watching + [raw]
        elif name == "ignore" and raw in self._watching and len(self._watching) > 1:
            self._watching = [t for t in self._watching if t != raw]
        timeout = self.timeout
        if name == "reserve":
            timeout = None
        elif name == "reserve-with-timeout":
            timeout = int(texts[0]) + self.reserve_grace
        return self._send(name, data, _reply, timeout,
                          blocking=command_spec(name).blocks, replies=True)


class BeanstalkClientFactory(Factory):
    """Builds :class:`BeanstalkProtocol` connections with shared settings.

    Quiet: Twisted's "Starting factory" / "Stopping factory" lines would be
    logged on every (re)connection."""

    protocol = BeanstalkProtocol  # type: ignore[assignment]
    noisy = False

    def __init__(self, clock: Optional[IReactorTime] = None, *,
                 timeout: Optional[float] = DEFAULT_TIMEOUT,
                 reserve_grace: float = DEFAULT_RESERVE_GRACE,
                 max_job_size: Optional[int] = DEFAULT_MAX_JOB_SIZE,
                 codec: Optional[Codec] = None, client: Any = None,
                 on_connection: Optional[Callable[[BeanstalkProtocol], None]] = None) -> None:
        if clock is None:
            from twisted.internet import reactor as clock  # type: ignore[no-redef]
        self.clock = clock
        self.timeout = timeout
        self.reserve_grace = reserve_grace
        self.max_job_size = max_job_size
        self.codec = codec
        self.client = client
        self.on_connection = on_connection

    def buildProtocol(self, addr: Any) -> BeanstalkProtocol:
        proto = self.protocol(self.clock, timeout=self.timeout,  # type: ignore[call-arg]
                              reserve_grace=self.reserve_grace,
                              max_job_size=self.max_job_size, codec=self.codec)
        proto.factory = self
        proto.client = self.client
        if self.on_connection is not None:
            self.on_connection(proto)
        return proto


__all__ = ["BeanstalkProtocol", "BeanstalkClientFactory", "DEFAULT_TIMEOUT",
           "DEFAULT_RESERVE_GRACE", "MAX_RESERVE_TIMEOUT"]
