"""A Deferred-based beanstalk client for Twisted.

Quick start::

    from twisted.internet.task import react
    from twisted.internet.defer import ensureDeferred
    from twisted_stalk.client import BeanstalkClient

    async def main(reactor):
        client = BeanstalkClient("tcp:127.0.0.1:11300", reactor=reactor)
        job_id = await client.tube("emails").put(b"hello")
        job = await client.watching("emails").reserve(timeout=5)
        await job.delete()
        await client.close()

    react(lambda reactor: ensureDeferred(main(reactor)))

See ``docs/client.md`` for the full guide.
"""
from .client import BeanstalkClient, Tube, TubeSet, connect
from .defaults import TubeDefaults
from .errors import (
    BadFormat,
    BeanstalkConnectionError,
    BeanstalkError,
    Buried,
    ClientClosed,
    ConnectionLost,
    ConnectTimeout,
    DeadlineSoon,
    Draining,
    ExpectedCRLF,
    InternalError,
    InvalidArgument,
    JobExpired,
    JobLost,
    JobTooBig,
    NotFound,
    NotIgnored,
    OutOfMemory,
    ReplyError,
    ResponseTimeout,
    TimedOut,
    UnexpectedReply,
    UnknownCommand,
)
from .job import DEFAULT_PRIORITY, DEFAULT_TTR, Codec, Job, JSONCodec, UTF8Codec
from .link import DEFAULT_RETRY_POLICY, backoff_with_jitter
from .protocol import (
    DEFAULT_RESERVE_GRACE,
    DEFAULT_TIMEOUT,
    BeanstalkClientFactory,
    BeanstalkProtocol,
)
from .aggregate import PoolStats
from .policy import KeyHash, RoundRobin, Weighted
from .pool import BeanstalkPool, JobId, NoServerAvailable, PoolTube, ServerInfo
from .worker import HandlerTimeout, Retry, Worker, WorkerStats, exponential_backoff

__all__ = [
    "BeanstalkClient", "Tube", "TubeSet", "TubeDefaults", "connect", "DEFAULT_RETRY_POLICY",
    "BeanstalkPool", "PoolTube", "JobId", "ServerInfo", "PoolStats",
    "NoServerAvailable", "RoundRobin", "Weighted", "KeyHash",
    "backoff_with_jitter",
    "BeanstalkProtocol", "BeanstalkClientFactory", "DEFAULT_TIMEOUT", "DEFAULT_RESERVE_GRACE",
    "Job", "Codec", "JSONCodec", "UTF8Codec", "DEFAULT_PRIORITY", "DEFAULT_TTR",
    "Worker", "WorkerStats", "Retry", "HandlerTimeout", "exponential_backoff",
    "BeanstalkError", "ReplyError", "NotFound", "Buried", "DeadlineSoon", "TimedOut",
    "Draining", "JobTooBig", "ExpectedCRLF", "BadFormat", "UnknownCommand", "OutOfMemory",
    "InternalError", "NotIgnored", "InvalidArgument", "JobLost", "JobExpired",
    "BeanstalkConnectionError",
    "ConnectionLost", "ResponseTimeout", "UnexpectedReply", "ConnectTimeout", "ClientClosed",
]
