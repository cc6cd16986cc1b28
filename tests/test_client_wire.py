"""The client over real loopback sockets: our server and (when installed) beanstalkd.

These are ``twisted.trial`` test cases (pytest runs them): each test returns a
Deferred and trial spins the global reactor until it fires.  The same suite runs
against both servers; one server process per class, a fresh tube per test.
"""
import itertools
import os
import subprocess
import tempfile
import time
from functools import wraps

from twisted.internet import defer, reactor, task
from twisted.trial import unittest

from servers import REFERENCE, free_port, ours_command, reference_command, start_server
from twisted_stalk.client import (
    BeanstalkClient,
    ConnectionLost,
    JobTooBig,
    NotFound,
    NotIgnored,
    TimedOut,
    Worker,
    connect,
)
from twisted.application.internet import backoffPolicy

FAST_RETRY = backoffPolicy(initialDelay=0.05, maxDelay=0.2, jitter=lambda: 0.0)
_names = itertools.count()


def inline(f):
    """Run an ``async def`` test method as a Deferred."""
    @wraps(f)
    def run(self):
        return defer.ensureDeferred(f(self))
    return run


def sleep(seconds):
    return task.deferLater(reactor, seconds, lambda: None)


class _Suite:
    kind = "ours"
    timeout = 30

    @classmethod
    def setUpClass(cls):
        cls.server = start_server(cls.kind)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def setUp(self):
        self.tube = f"t{os.getpid()}-{next(_names)}"
        self.client = self.make_client()
        return self.client.connect()

    def make_client(self, port=None, **settings):
        settings.setdefault("retry_policy", FAST_RETRY)
        client = BeanstalkClient(f"tcp:127.0.0.1:{port or self.server.port}",
                                 reactor=reactor, **settings)
        self.addCleanup(client.close)
        return client

    @inline
    async def test_round_trip(self):
        c = self.client
        tube = c.tube(self.tube)
        job_id = await tube.put(b"hello", priority=10, ttr=30)
        assert isinstance(job_id, int)
        assert (await c.peek(job_id)).body == b"hello"
        assert (await tube.peek_ready()).id == job_id
        stats = await tube.stats()
        assert stats["name"] == self.tube and stats["current-jobs-ready"] == 1
        job = await c.watching(self.tube).reserve(timeout=1)
        assert job.id == job_id and job.body == b"hello"
        stats = await job.stats()
        assert stats["state"] == "reserved" and stats["pri"] == 10 and stats["ttr"] == 30
        await job.touch()
        await job.bury()
        assert (await tube.peek_buried()).id == job_id
        assert await tube.kick(5) == 1
        job = await c.reserve_job(job_id)
        await job.release(delay=60)
        assert (await tube.peek_delayed()).id == job_id
        await c.kick_job(job_id)
        await tube.pause(1)
        await c.delete(job_id)
        try:
            await c.delete(job_id)
            raise AssertionError("deleted twice")
        except NotFound:
            pass
        assert self.tube in await c.list_tubes()
        # what the server says: the per-call tube targets switched the main connection
        assert await c.list_tube_used() == self.tube and c.used == "default"
        assert await c.list_tubes_watched() == ["default"]
        server = await c.stats()
        assert isinstance(server["pid"], int) and isinstance(server["version"], str)

    @inline
    async def test_stats_are_typed_by_key(self):
        """beanstalkd 1.12 prints names bare: a tube named like a number stays a str."""
        c = self.client
        name = "%d%d" % (os.getpid(), next(_names))
        job_id = await c.tube(name).put(b"x")
        assert (await c.stats_tube(name))["name"] == name
        assert (await c.stats_job(job_id))["tube"] == name
        server = await c.stats()
        assert isinstance(server["id"], str) and isinstance(server["hostname"], str)
        assert isinstance(server["version"], str) and server["draining"] is False
        await c.delete(job_id)

    @inline
    async def test_reserve_timeout_waits_as_asked(self):
        # reserve(timeout=N) on an empty tube answers TimedOut after N
        # seconds, not N-1 (the wait for a reserve connection once truncated
        # 1-eps seconds to 0).  Both run at once, on two reserve connections.
        c = self.client

        async def waited(seconds):
            start = time.monotonic()
            try:
                await c.reserve(timeout=seconds, tubes=[self.tube])
                raise AssertionError("no TimedOut")
            except TimedOut:
                return time.monotonic() - start
        one, two = await defer.gatherResults([defer.ensureDeferred(waited(1)),
                                              defer.ensureDeferred(waited(2))])
        assert 0.95 <= one < 1.9, one
        assert 1.95 <= two < 2.9, two

    @inline
    async def test_errors(self):
        c = self.client
        try:
            await c.watching(self.tube).reserve(timeout=0)
            raise AssertionError("no TimedOut")
        except TimedOut:
            pass
        try:
            await c.ignore("default")
            raise AssertionError("no NotIgnored")
        except NotIgnored:
            pass
        big = self.make_client(max_job_size=None)
        try:
            await big.tube(self.tube).put(b"x" * 70000)
            raise AssertionError("no JobTooBig")
        except JobTooBig:
            pass
        assert await big.tube(self.tube).put(b"fine") > 0  # the connection survived

    @inline
    async def test_pipelining(self):
        tube = self.client.tube(self.tube)
        ids = await defer.gatherResults([tube.put(b"%d" % i) for i in range(2000)])
        assert ids == sorted(ids) and len(set(ids)) == 2000
        assert (await tube.stats())["current-jobs-ready"] == 2000
        await defer.gatherResults([self.client.delete(i) for i in ids])

    @inline
    async def test_blocking_reserve_runs_on_its_own_connection(self):
        c = self.client
        pending = c.watching(self.tube).reserve()
        await sleep(0.05)
        other = self.tube + "-other"
        job_id = await c.tube(other).put(b"not blocked")  # answers while reserve waits
        await c.delete(job_id)
        await c.tube(self.tube).put(b"wake")
        job = await pending
        assert job.body == b"wake"
        await job.delete()

    @inline
    async def test_cancelled_reserve_drops_only_its_connection(self):
        c = self.client
        d = c.watching(self.tube).reserve()
        await sleep(0.05)
        d.cancel()
        try:
            await d
        except defer.CancelledError:
            pass
        job_id = await c.tube(self.tube).put(b"x")
        job = await c.watching(self.tube).reserve(timeout=2)
        assert job.id == job_id
        await job.delete()

    @inline
    async def test_worker(self):
        c = self.client
        seen = []

        async def handler(job):
            await sleep(0.01)
            seen.append(job.body)
        worker = Worker(c, handler, tubes=[self.tube], concurrency=4)
        worker.start()
        await defer.gatherResults([c.tube(self.tube).put(b"%d" % i) for i in range(20)])
        for _ in range(200):
            if worker.stats.deleted == 20:
                break
            await sleep(0.02)
        await worker.stop()
        assert sorted(seen) == sorted(b"%d" % i for i in range(20))
        assert worker.stats.deleted == 20
        assert (await c.tube(self.tube).stats())["current-jobs-ready"] == 0

    @inline
    async def test_plain_connection(self):
        proto = await connect(f"tcp:127.0.0.1:{self.server.port}", reactor=reactor)
        assert await proto.put(b"x", tube=self.tube) > 0
        job = await proto.reserve(0, watching=[self.tube])
        await job.delete()
        await proto.quit()
        assert not proto.connected

    @inline
    async def test_reconnect_mid_stream(self):
        port = free_port()
        server = start_server(self.kind, port=port)
        self.addCleanup(lambda: server.stop())
        c = self.make_client(port=port, use="rc-out", watch=("rc-in",), connect_timeout=20)
        await c.connect()
        counts = {"ok": 0, "lost": 0}
        running = [True]

        async def produce():
            while running[0]:
                try:
                    await c.put(b"job")
                    counts["ok"] += 1
                except ConnectionLost:
                    counts["lost"] += 1
        producer = defer.ensureDeferred(produce())
        pipelined = []
        while counts["ok"] < 100:
            pipelined.append(c.put(b"pipelined"))
            await sleep(0.005)
        server.proc.kill()  # mid-stream: the producer has a put in flight
        server.proc.wait()
        results = await defer.DeferredList(pipelined, consumeErrors=True)
        assert all(f.check(ConnectionLost) for ok, f in results if not ok)
        while not counts["lost"]:  # replies already buffered are still read
            await sleep(0.005)
        before = counts["ok"]
        restarted = start_server(self.kind, port=port)
        self.addCleanup(lambda: restarted.stop())
        while counts["ok"] < before + 100:
            await sleep(0.01)
        running[0] = False
        await producer
        assert counts["lost"] >= 1
        proto = c.protocol
        assert proto is not None
        assert await proto.list_tube_used() == "rc-out"  # untargeted: the replayed state
        assert await proto.list_tubes_watched() == ["rc-in"]
        stats = await c.tube("rc-out").stats()
        assert stats["current-jobs-ready"] == counts["ok"] - before
        job = await c.reserve(timeout=1, tubes=["rc-out"])
        assert job.body == b"job"
        await job.delete()


class OursTests(_Suite, unittest.TestCase):
    kind = "ours"


class ReferenceTests(_Suite, unittest.TestCase):
    kind = "reference"
    if not REFERENCE:
        skip = "Debian's beanstalkd is not installed"

    @classmethod
    def setUpClass(cls):
        if REFERENCE:
            super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        if REFERENCE:
            super().tearDownClass()


class UnixSocketTests(unittest.TestCase):
    """``unix:PATH`` endpoints, against each server started with ``-l unix:PATH``."""

    def _start(self, kind):
        path = os.path.join(tempfile.mkdtemp(), "beanstalk.sock")
        cmd = ours_command(0) if kind == "ours" else reference_command(0)
        cmd = cmd[:cmd.index("-l")] + ["-l", f"unix:{path}"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: (proc.terminate(), proc.wait()))
        deadline = time.monotonic() + 10
        while not os.path.exists(path):
            assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        return path

    async def _round_trip(self, kind):
        path = self._start(kind)
        client = BeanstalkClient(f"unix:{path}", reactor=reactor, retry_policy=FAST_RETRY)
        self.addCleanup(client.close)
        job_id = await client.tube("unix").put(b"over a unix socket")
        job = await client.watching("unix").reserve(timeout=1)
        assert job.id == job_id and job.body == b"over a unix socket"
        await job.delete()

    def test_ours(self):
        return defer.ensureDeferred(self._round_trip("ours"))

    def test_reference(self):
        if not REFERENCE:
            raise unittest.SkipTest("Debian's beanstalkd is not installed")
        return defer.ensureDeferred(self._round_trip("reference"))
