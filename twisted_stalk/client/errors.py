"""Exceptions of the client library.

Error replies from the server (one class per reply word) come from
:mod:`twisted_stalk.protocol.replies`, shared with the shell; this module adds
the errors that are about the connection rather than a reply.

Hierarchy::

    BeanstalkError
    ├── ReplyError                 the server answered with an error word
    │   ├── NotFound, Buried (job_id), DeadlineSoon, TimedOut, Draining,
    │   ├── JobTooBig, ExpectedCRLF, BadFormat, UnknownCommand,
    │   └── OutOfMemory, InternalError, NotIgnored
    ├── InvalidArgument (also a ValueError)   rejected before sending
    ├── JobLost                    the connection that reserved the job is gone
    │   └── JobExpired (also NotFound)  the job's TTR ran out: the server took it back
    └── BeanstalkConnectionError   the call did not get its reply
        ├── ConnectionLost         the connection closed (or was dropped)
        ├── ResponseTimeout        no reply in time; the connection was dropped
        ├── UnexpectedReply        the reply made no sense; the connection was dropped
        ├── ConnectTimeout         no connection could be made in time
        ├── NoServerAvailable      no server of a pool could take the call
        └── ClientClosed           the client was closed
"""
from __future__ import annotations

from typing import Dict, Optional

from ..protocol.replies import (
    ERRORS,
    BadFormat,
    BeanstalkError,
    Buried,
    DeadlineSoon,
    Draining,
    ExpectedCRLF,
    InternalError,
    JobTooBig,
    NotFound,
    NotIgnored,
    OutOfMemory,
    ReplyError,
    TimedOut,
    UnknownCommand,
)
from ..protocol.replies import ReplyOutOfStep


class InvalidArgument(BeanstalkError, ValueError):
    """An argument the protocol cannot carry (bad tube name, out-of-range integer,
    body too big...).  Raised before anything is sent."""


class JobLost(BeanstalkError):
    """The job's reservation is gone: the connection that reserved it closed, so
    the server put the job back (it may already be reserved by someone else)."""

    def __init__(self, job_id: int, reason: str = "") -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id} was lost: {reason or 'its connection closed'}")


class JobExpired(JobLost, NotFound):
    """The job's reservation ended because its TTR ran out: the server put it
    back in the ready queue (another reserve, maybe of this client, may hold it
    now).  Raised by ``delete``/``release``/``bury``/``touch`` of such a job,
    either without sending anything (the client knows: it reserved the same
    job again, or the TTR has certainly passed) or when the server answered
    ``NOT_FOUND`` to it.  It is a :class:`JobLost` and, for code written
    against ``NOT_FOUND``, a :class:`NotFound`."""

    def __init__(self, job_id: int, reason: str = "", command: str = "") -> None:
        self.job_id = job_id
        self.reason = reason
        self.command = command
        self.reply = b"NOT_FOUND"
        Exception.__init__(self, f"job {job_id} is no longer reserved by this client: "
                           f"{reason or 'its TTR ran out and the server took it back'}")

    def __reduce__(self):
        return (self.__class__, (self.job_id, self.reason, self.command))


class BeanstalkConnectionError(BeanstalkError):
    """The call did not get a reply because of the connection."""


class ConnectionLost(BeanstalkConnectionError):
    """The connection closed while the call was pending (or before it was sent)."""


class ResponseTimeout(BeanstalkConnectionError):
    """No reply within the response timeout.  The connection was dropped, since a
    late reply would otherwise be matched to the wrong command."""


class UnexpectedReply(ReplyOutOfStep, BeanstalkConnectionError):
    """A reply that does not answer the command at the head of the queue.  Shows the
    bytes.  The connection was dropped rather than mismatching later replies."""


class ConnectTimeout(BeanstalkConnectionError):
    """No connection to the server within the connect timeout."""


class ClientClosed(BeanstalkConnectionError):
    """The client (or the connection) was closed by its owner."""


class NoServerAvailable(BeanstalkConnectionError):
    """No server of the pool could take the call.

    :ivar errors: why each server tried failed, by name.
    """

    def __init__(self, message: str, errors: Optional[Dict[str, BaseException]] = None) -> None:
        super().__init__(message)
        self.errors: Dict[str, BaseException] = dict(errors or {})


def connection_lost(reason: Optional[str] = None) -> ConnectionLost:
    return ConnectionLost(reason or "connection lost")


__all__ = [
    "BeanstalkError", "ReplyError", "NotFound", "Buried", "DeadlineSoon", "TimedOut",
    "Draining", "JobTooBig", "ExpectedCRLF", "BadFormat", "UnknownCommand", "OutOfMemory",
    "InternalError", "NotIgnored", "InvalidArgument", "JobLost", "JobExpired",
    "BeanstalkConnectionError",
    "ConnectionLost", "ResponseTimeout", "UnexpectedReply", "ConnectTimeout", "ClientClosed",
    "NoServerAvailable", "ERRORS",
]
