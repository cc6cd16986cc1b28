# -*- test-case-name: tests.test_client_protocol,tests.test_client_reserve -*-
"""Reserved (or peeked) jobs and body codecs."""
from __future__ import annotations

import json
from typing import Any, Dict, Optional
from typing import Protocol as _TypingProtocol

from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from ..protocol.constants import DEFAULT_PUT_PRIORITY, DEFAULT_PUT_TTR
from ..protocol.yaml import StatValue
from .errors import (
    BeanstalkConnectionError,
    BeanstalkError,
    InvalidArgument,
    JobExpired,
    JobLost,
    NotFound,
)

#: Default priority of put, release and bury (the project's one default,
#: :data:`twisted_stalk.protocol.constants.DEFAULT_PUT_PRIORITY`).
DEFAULT_PRIORITY = DEFAULT_PUT_PRIORITY
#: Default time to run of put, in seconds (``DEFAULT_PUT_TTR``).
DEFAULT_TTR = DEFAULT_PUT_TTR


class Codec(_TypingProtocol):
    """Turns job values into bodies and back (see :class:`JSONCodec`)."""

    def encode(self, value: Any) -> bytes:
        """The body for ``value``."""

    def decode(self, body: bytes) -> Any:
        """The value of ``body``."""


class JobConnection(_TypingProtocol):
    """What a job needs of the connection it came from (a
    :class:`~twisted_stalk.client.BeanstalkProtocol`): whether it is open, its
    clock, a way to stop tracking the job, and the job commands (``delete``,
    ``release``, ``bury``, ``touch``, ``kick_job``, ``stats_job``, sent by
    name; a :class:`~twisted_stalk.client.BeanstalkClient` has them too)."""

    connected: bool
    clock: IReactorTime

    def forget(self, job: "Job") -> None:
        """Stop tracking ``job`` as held here (its reservation is over)."""

    def stats_job(self, job_id: int) -> Deferred:
        """The job's ``stats-job``."""


class UTF8Codec:
    """Bodies are UTF-8 text: ``job.value`` is a str."""

    def encode(self, value: Any) -> bytes:
        return str(value).encode("utf-8")

    def decode(self, body: bytes) -> Any:
        return body.decode("utf-8")


class JSONCodec:
    """Bodies are compact JSON documents."""

    def encode(self, value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode("utf-8")

    def decode(self, body: bytes) -> Any:
        return json.loads(body)


class Job:
    """A job returned by ``reserve*`` or ``peek*``.

    A reserved job is bound to the connection that reserved it: only that
    connection may ``delete``, ``release``, ``bury`` or ``touch`` it while it is
    reserved, and the job methods send the command there.  If that connection
    closes, the server puts the job back in the ready queue and the job is
    marked :attr:`lost`; its methods then fail with :class:`JobLost`.  If its
    TTR runs out, the server takes it back too: its methods then fail with
    :class:`JobExpired` (a :class:`JobLost` and a :class:`NotFound`).

    :ivar id: the job id (ids are per server).
    :ivar body: the body, bytes.
    :ivar reserved: True if this job was reserved (not just peeked).
    :ivar finished: ``"deleted"``, ``"released"`` or ``"buried"`` once the
        server confirmed that this client disposed of the job.
    :ivar pending: the disposal sent and not yet confirmed (same words), or None.
    :ivar tube: the job's tube when the client knows it (the reserve watched
        one tube only, or :meth:`stats` was read), else None.
    :ivar priority: the priority when known (from :meth:`stats`), else None.
    :ivar ttr: the time to run in seconds when known (from :meth:`stats`), else None.
    """

    __slots__ = ("id", "body", "reserved", "finished", "pending", "tube", "priority", "ttr",
                 "granted_at", "_lost", "_expired", "_proto", "_client", "_codec",
                 "stats_cache")

    def __init__(self, id: int, body: bytes, *, reserved: bool = False,
                 proto: Optional[JobConnection] = None,
                 client: Any = None,
                 codec: Optional[Codec] = None, tube: Optional[str] = None) -> None:
        self.id = id
        self.body = body
        self.reserved = reserved
        self.finished: Optional[str] = None
        self.pending: Optional[str] = None
        self.tube = tube
        self.priority: Optional[int] = None
        self.ttr: Optional[int] = None
        self._lost: Optional[str] = None
        self._expired = False
        #: When (client clock) the reservation was last granted: the reply to
        #: reserve or touch.  The server's TTR deadline is no later than this
        #: plus the TTR.
        #: Clock time the reservation was last granted (reserved, or touched
        #: and confirmed); 0.0 for a peeked job.
        self.granted_at = 0.0
        self._proto = proto
        self._client = client
        self._codec = codec
        #: The last :meth:`stats` result, if any.
        self.stats_cache: Optional[Dict[str, StatValue]] = None

    def __repr__(self) -> str:
        state = ("expired" if self._expired else "lost" if self._lost
                 else self.finished or ("reserved" if self.reserved else "peeked"))
        return f"<Job {self.id} {state} {self.body[:40]!r}{'...' if len(self.body) > 40 else ''}>"

    @property
    def value(self) -> Any:
        """The body decoded by the client's codec (the bytes when there is none)."""
        return self._codec.decode(self.body) if self._codec is not None else self.body

    @property
    def text(self) -> str:
        """The body decoded as UTF-8."""
        return self.body.decode("utf-8")

    @property
    def server(self) -> Optional[str]:
        """The server the job lives on (its client's endpoint description)."""
        return getattr(self._client, "name", None)

    @property
    def connection(self) -> Optional[JobConnection]:
        """The connection the job came from (None for a job made by hand)."""
        return self._proto

    @property
    def lost(self) -> bool:
        """True once the reservation is gone without this client disposing of
        the job: its connection closed, or its TTR ran out (:attr:`expired`)."""
        return self._lost is not None

    @property
    def lost_reason(self) -> Optional[str]:
        """Why the job is :attr:`lost` (None while it is not)."""
        return self._lost

    @property
    def expired(self) -> bool:
        """True once the client knows the job's TTR ran out while it held it."""
        return self._expired

    def learn(self, stats: Dict[str, StatValue]) -> None:
        """Keep what a ``stats-job`` reply says about the job (its tube,
        priority and TTR; :meth:`stats` does this)."""
        self.stats_cache = stats
        tube, pri, ttr = stats.get("tube"), stats.get("pri"), stats.get("ttr")
        if isinstance(tube, str):
            self.tube = tube
        if isinstance(pri, int) and not isinstance(pri, bool):
            self.priority = pri
        if isinstance(ttr, int) and not isinstance(ttr, bool):
            self.ttr = ttr

    def mark_lost(self, reason: str) -> None:
        """The reservation is gone (its connection closed): the job's commands
        now fail with :class:`JobLost` (called by the connection)."""
        if self.finished is None and self._lost is None:
            self._lost = reason

    def expire(self, reason: str) -> bool:
        """The reservation certainly ended (its TTR ran out): forget the job on
        its connection, and fail its commands with :class:`JobExpired`; False
        if it was disposed of or lost already (called by the client)."""
        if self.finished is not None or self.pending is not None or self._lost is not None:
            return False
        self._lost = reason
        self._expired = True
        if self._proto is not None:
            self._proto.forget(self)
        return True

    def _bound(self) -> JobConnection:
        proto = self._proto
        if self._expired:
            raise JobExpired(self.id, self._lost or "")
        if self._lost is not None or proto is None or not proto.connected:
            raise JobLost(self.id, self._lost or "")
        return proto

    def _anywhere(self):
        """Where to send commands that any connection may send."""
        if self._proto is not None and self._proto.connected:
            return self._proto
        if self._client is not None:
            return self._client
        if self._proto is None:
            raise JobLost(self.id, "no connection")
        return self._proto  # will fail with ConnectionLost

    def _send(self, finish: Optional[str], name: str, *args: Any) -> Deferred:
        bound = self.reserved and self.finished is None
        try:
            if bound and self.pending is not None:
                raise InvalidArgument(f"job {self.id}: {self.pending!r} was already sent")
            target = self._bound() if bound else self._anywhere()
        except BeanstalkError as e:
            return fail(e)
        d = getattr(target, name)(self.id, *args)
        if not bound:
            return d
        if finish is not None:
            self.pending = finish
        return d.addCallbacks(self._confirmed, self._refused, callbackArgs=(finish, name),
                              errbackArgs=(finish, name))

    def _confirmed(self, result: Any, finish: Optional[str], name: str) -> Any:
        if finish is not None:
            self.pending = None
            self.finished = finish
        elif self._proto is not None:  # touch: the TTR restarted
            self.granted_at = self._proto.clock.seconds()
        return result

    def _refused(self, failure: Failure, finish: Optional[str], name: str) -> Failure:
        if finish is not None:
            self.pending = None
        if failure.check(NotFound) and not failure.check(JobExpired):
            # Only the reserving connection may send these; NOT_FOUND means it
            # no longer holds the job: the TTR ran out and the server took it back.
            ttr = f" of {self.ttr} s" if self.ttr is not None else ""
            reason = (f"the server answered NOT_FOUND to {name}: this connection no longer "
                      f"holds the job, because its TTR{ttr} ran out and the server put it "
                      "back (another worker may have it now)")
            if self._lost is None:
                self._lost = reason
                self._expired = True
            return Failure(JobExpired(self.id, reason, name))
        if failure.check(BeanstalkConnectionError):
            self.mark_lost(failure.getErrorMessage())
        return failure

    def delete(self) -> "Deferred[None]":
        """Delete the job (on the reserving connection while reserved)."""
        return self._send("deleted", "delete")

    def release(self, priority: int = DEFAULT_PRIORITY, delay: int = 0) -> "Deferred[None]":
        """Put the reserved job back to ready (or delayed for ``delay`` seconds)."""
        return self._send("released", "release", priority, delay)

    def bury(self, priority: int = DEFAULT_PRIORITY) -> "Deferred[None]":
        """Bury the reserved job."""
        return self._send("buried", "bury", priority)

    def touch(self) -> "Deferred[None]":
        """Ask for another TTR for the reserved job."""
        return self._send(None, "touch")

    def kick(self) -> "Deferred[None]":
        """Kick the (buried or delayed) job to ready."""
        return self._send(None, "kick_job")

    def stats(self) -> "Deferred[Dict[str, StatValue]]":
        """The job's ``stats-job`` dict (also kept in :attr:`stats_cache`, and
        its tube, priority and TTR in :attr:`tube`, :attr:`priority`, :attr:`ttr`)."""
        try:
            target = self._anywhere()
        except JobLost as e:
            return fail(e)
        d = target.stats_job(self.id)

        def keep(stats: Dict[str, StatValue]) -> Dict[str, StatValue]:
            self.learn(stats)
            return stats
        return d.addCallback(keep)
