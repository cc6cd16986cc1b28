"""The client's extension calls: capabilities, list_jobs, flush_tube.

Against our server with ``--extensions`` they use the verbs; against ours
without it and against the reference beanstalkd (when installed) they fall
back on stock commands.  The in-memory part (``MemoryBeanstalk``) checks the
caching and the fallback's bounds without sockets.
"""
import itertools
import os

import pytest
from twisted.internet import defer, reactor
from twisted.trial import unittest

from servers import REFERENCE, start_server
from twisted_stalk.client import (
    BeanstalkClient,
    InvalidArgument,
    NotFound,
    UnknownCommand,
)
from twisted.application.internet import backoffPolicy
from twisted_stalk.protocol.replies import (
    EXTENSION_BY_NAME,
    ReplyOutOfStep,
    decode_body,
    decode_reply,
    success_reply,
)
from twisted_stalk.protocol.commands import validate_command_args as validate_extension_args
from twisted_stalk.server import admin
from twisted_stalk.testing import MemoryBeanstalk

ALL = frozenset(["list-jobs", "flush-tube", "capabilities"])
FAST_RETRY = backoffPolicy(initialDelay=0.05, maxDelay=0.2, jitter=lambda: 0.0)
_names = itertools.count()


# ------------------------------------------------------------------ replies

def test_extension_replies_decode():
    assert success_reply("flush-tube") == "FLUSHED <count>"
    reply = decode_reply("flush-tube", b"FLUSHED 7")
    assert reply.ok and decode_body("flush-tube", reply) == 7
    assert not decode_reply("flush-tube", b"NOT_FOUND").ok
    assert isinstance(decode_reply("flush-tube", b"INTERNAL_ERROR").error(), Exception)
    reply = decode_reply("list-jobs", b"OK 12")
    assert reply.ok and reply.body_length == 12
    assert decode_body("list-jobs", reply, b"---\n- 3\n- 12\n") == [3, 12]
    assert decode_body("list-jobs", decode_reply("list-jobs", b"OK 4"), b"---\n") == []
    caps = decode_body("capabilities", decode_reply("capabilities", b"OK 44"),
                       b"---\n- list-jobs\n- flush-tube\n- capabilities\n")
    assert caps == ["list-jobs", "flush-tube", "capabilities"]
    assert isinstance(decode_reply("capabilities", b"UNKNOWN_COMMAND").error(), UnknownCommand)
    for line in (b"FLUSHED", b"FLUSHED x", b"OK 1 2"):
        with pytest.raises(ReplyOutOfStep):
            decode_reply("flush-tube" if line.startswith(b"F") else "list-jobs", line)
    with pytest.raises(ReplyOutOfStep):
        decode_reply("put", b"FLUSHED 3")  # stock decoding unchanged


def test_extension_table_is_not_the_stock_table():
    from twisted_stalk.protocol import BY_NAME
    assert not set(EXTENSION_BY_NAME) & set(BY_NAME)
    assert EXTENSION_BY_NAME["flush-tube"].usage == "flush-tube <tube> [state]"
    assert validate_extension_args("flush-tube", ["t"]) is None
    assert validate_extension_args("flush-tube", ["t", "buried"]) is None
    assert "ready, delayed" in validate_extension_args("flush-tube", ["t", "gone"])
    assert "takes 1 or 2" in validate_extension_args("flush-tube", [])
    assert "takes 3" in validate_extension_args("list-jobs", ["t", "ready"])
    assert "whole number" in validate_extension_args("list-jobs", ["t", "ready", "4294967296"])
    assert validate_extension_args("capabilities", ["x"])


# ----------------------------------------------------------------- in memory

def memory(extensions):
    server = MemoryBeanstalk()
    if extensions:
        admin.enable(server.factory)
    return server, server.client()


def fill(server, client, tube, ready=3, delayed=2, buried=1):
    t = client.tube(tube)
    ids = {"ready": [], "delayed": [], "buried": []}
    for i in range(ready):
        ids["ready"].append(server.result(t.put(b"r", priority=10 - i)))
    for i in range(delayed):
        ids["delayed"].append(server.result(t.put(b"d", delay=100 + i)))
    for i in range(buried):
        job = server.result(client.reserve_job(server.result(t.put(b"b"))))
        server.result(job.bury())
        ids["buried"].append(job.id)
    return ids


def test_capabilities_are_asked_once_per_connection():
    server, client = memory(True)
    counts = server.factory.extensions.counts
    both = [client.capabilities(), client.capabilities()]
    assert [server.result(d) for d in both] == [ALL, ALL]
    assert server.result(client.capabilities()) == ALL
    assert counts["capabilities"] == 1
    assert client.protocol.known_capabilities == ALL
    server.drop_connections()          # a reconnect may reach another server
    server.advance(2)
    assert server.result(client.capabilities()) == ALL
    assert counts["capabilities"] == 2


def test_unknown_command_means_no_extensions():
    server, client = memory(False)
    assert server.result(client.capabilities()) == frozenset()
    assert client.protocol.known_capabilities == frozenset()


def test_verbs_are_used_when_advertised():
    server, client = memory(True)
    ids = fill(server, client, "work")
    counts = server.factory.extensions.counts
    assert server.result(client.list_jobs("work", "ready", 10)) == ids["ready"][::-1]
    assert server.result(client.tube("work").list_jobs("delayed", 1)) == ids["delayed"][:1]
    assert server.result(client.flush_tube("work", "delayed")) == 2
    assert server.result(client.tube("work").flush()) == 4
    assert counts["list-jobs"] == 2 and counts["flush-tube"] == 2
    assert server.stats()["cmd-peek-ready"] == 0


def test_fallback_flush_is_bounded_by_the_count_at_the_start():
    """Jobs put while the fallback runs are left alone."""
    server, client = memory(False)
    fill(server, client, "busy", ready=3, delayed=0, buried=0)
    producer = server.client().tube("busy")
    proto = client.protocol
    counted = proto.stats_tube

    def stats_tube(tube):
        # as soon as the fallback has counted, a producer puts more urgent jobs
        # (which its peeks then see first)
        return counted(tube).addCallback(
            lambda st: [producer.put(b"late", priority=0) for _ in range(5)] and st)

    proto.stats_tube = stats_tube
    assert server.result(client.flush_tube("busy", "ready")) == 3
    assert server.stats_tube("busy")["current-jobs-ready"] == 5


def test_bad_arguments_are_caught_before_sending():
    server, client = memory(True)
    for d in (client.list_jobs("work", "gone", 1), client.list_jobs("-bad", "ready", 1),
              client.list_jobs("work", "ready", -1), client.flush_tube("work", "all")):
        with pytest.raises(InvalidArgument):
            server.result(d)


# ------------------------------------------------------ over real sockets

def inline(f):
    def run(self):
        return defer.ensureDeferred(f(self))
    run.__name__ = f.__name__
    return run


async def expect_error(d, error):
    try:
        await d
    except error:
        return
    raise AssertionError(f"no {error.__name__}")


class _Suite:
    kind = "ours"
    args: tuple = ()
    extended = False
    timeout = 20

    @classmethod
    def setUpClass(cls):
        cls.server = start_server(cls.kind, *cls.args)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def setUp(self):
        self.tube = f"x{os.getpid()}-{next(_names)}"
        self.client = BeanstalkClient(f"tcp:127.0.0.1:{self.server.port}", reactor=reactor,
                                      retry_policy=FAST_RETRY)
        self.addCleanup(self.client.close)
        return self.client.connect()

    async def fill(self):
        c = self.client
        t = c.tube(self.tube)
        ids = {}
        ids["ready"] = [await t.put(b"r", priority=p) for p in (5, 1, 3)]
        ids["delayed"] = [await t.put(b"d", delay=100), await t.put(b"d", delay=50)]
        job = await c.reserve_job(await t.put(b"b"))
        await job.bury()
        ids["buried"] = [job.id]
        held = await c.reserve_job(await t.put(b"held"))
        ids["reserved"] = [held.id]
        return ids, held

    @inline
    async def test_capabilities(self):
        caps = await self.client.capabilities()
        assert caps == (ALL if self.extended else frozenset())

    @inline
    async def test_list_jobs(self):
        c = self.client
        ids, held = await self.fill()
        ready = [ids["ready"][1], ids["ready"][2], ids["ready"][0]]   # by priority
        got = await c.list_jobs(self.tube, "ready", 10)
        # the fallback (peek-ready) shows the first job only
        assert got == (ready if self.extended else ready[:1])
        assert await c.list_jobs(self.tube, "ready", 0) == []
        delayed = await c.tube(self.tube).list_jobs("delayed", 5)
        assert delayed == ([ids["delayed"][1], ids["delayed"][0]] if self.extended
                           else [ids["delayed"][1]])
        assert await c.list_jobs(self.tube, "buried", 5) == ids["buried"]
        if self.extended:
            assert await c.list_jobs(self.tube, "reserved", 5) == ids["reserved"]
        else:
            await expect_error(c.list_jobs(self.tube, "reserved", 5), UnknownCommand)
        await expect_error(c.list_jobs(self.tube + "-none", "ready", 5), NotFound)
        stats = await c.stats_job(ready[0])
        assert stats["reserves"] == 0 and stats["state"] == "ready"
        await held.release()

    @inline
    async def test_flush_tube(self):
        c = self.client
        ids, held = await self.fill()
        other = await c.tube(self.tube + "-keep").put(b"other tube")
        assert await c.flush_tube(self.tube, "delayed") == 2
        assert await c.tube(self.tube).flush() == 4          # 3 ready + 1 buried
        stats = await c.stats_tube(self.tube)
        assert (stats["current-jobs-ready"], stats["current-jobs-delayed"],
                stats["current-jobs-buried"], stats["current-jobs-reserved"]) == (0, 0, 0, 1)
        assert await c.flush_tube(self.tube, "ready") == 0
        if self.extended:
            assert await c.flush_tube(self.tube, "reserved") == 1
            await expect_error(held.delete(), NotFound)
        else:
            await expect_error(c.flush_tube(self.tube, "reserved"), UnknownCommand)
            await held.delete()
        await expect_error(c.flush_tube(self.tube + "-none"), NotFound)
        assert (await c.peek(other)).body == b"other tube"
        await c.delete(other)


class ExtensionsOn(_Suite, unittest.TestCase):
    args = ("--extensions",)
    extended = True


class ExtensionsOff(_Suite, unittest.TestCase):
    pass


class ReferenceFallback(_Suite, unittest.TestCase):
    kind = "reference"
    if not REFERENCE:
        skip = "Debian's beanstalkd is not installed"
