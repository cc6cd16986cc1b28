"""Reserved (or peeked) jobs and body codecs."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, Optional
from typing import Protocol as _TypingProtocol

from twisted.internet.defer import Deferred, fail

from ..protocol.yaml import StatValue
from .errors import JobLost

if TYPE_CHECKING:  # pragma: no cover
    from .client import BeanstalkClient
    from .protocol import BeanstalkProtocol

#: Default priority of put, release and bury (the middle of the range, as
#: beanstalkd's own tools use).
DEFAULT_PRIORITY = 2**31
#: Default time to run of put, in seconds.
DEFAULT_TTR = 120


class Codec(_TypingProtocol):
    """Turns job values into bodies and back (see :class:`JSONCodec`)."""

    def encode(self, value: Any) -> bytes:
        """The body for ``value``."""

    def decode(self, body: bytes) -> Any:
        """The value of ``body``."""


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
    marked :attr:`lost`; its methods then fail with :class:`JobLost`.

    :ivar id: the job id.
    :ivar body: the body, bytes.
    :ivar reserved: True if this job was reserved (not just peeked).
    """

    __slots__ = ("id", "body", "reserved", "finished", "_lost", "_proto", "_client", "_codec",
                 "stats_cache")

    def __init__(self, id: int, body: bytes, *, reserved: bool = False,
                 proto: "Optional[BeanstalkProtocol]" = None,
                 client: "Optional[BeanstalkClient]" = None,
                 codec: Optional[Codec] = None) -> None:
        self.id = id
        self.body = body
        self.reserved = reserved
        #: "deleted", "released", "buried" once this client disposed of the job.
        self.finished: Optional[str] = None
        self._lost: Optional[str] = None
        self._proto = proto
        self._client = client
        self._codec = codec
        #: The last :meth:`stats` result, if any.
        self.stats_cache: Optional[Dict[str, StatValue]] = None

    def __repr__(self) -> str:
        state = "lost" if self._lost else self.finished or ("reserved" if self.reserved else "peeked")
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
    def lost(self) -> bool:
        """True once the reserving connection closed with the job still reserved."""
        return self._lost is not None

    def _mark_lost(self, reason: str) -> None:
        if self.finished is None and self._lost is None:
            self._lost = reason

    def _bound(self) -> "BeanstalkProtocol":
        proto = self._proto
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
        try:
            target = self._bound() if self.reserved and self.finished is None else self._anywhere()
        except JobLost as e:
            return fail(e)
        if finish is not None and self.reserved:
            self.finished = finish
        return getattr(target, name)(self.id, *args)

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
        """The job's ``stats-job`` dict (also kept in :attr:`stats_cache`)."""
        try:
            target = self._anywhere()
        except JobLost as e:
            return fail(e)
        d = target.stats_job(self.id)

        def keep(stats: Dict[str, StatValue]) -> Dict[str, StatValue]:
            self.stats_cache = stats
            return stats
        return d.addCallback(keep)
