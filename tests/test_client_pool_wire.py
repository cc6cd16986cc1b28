"""BeanstalkPool over three real servers on loopback: ours (one with a binlog)
and Debian's beanstalkd when installed (else ours again).

Short runs with small job counts (the figures for many jobs are in
docs/performance.md, measured by bench/pool_bench.py); each test prints what
it measured (``pytest -s`` shows it).
"""
import itertools
import os
import signal
import statistics
import tempfile
import time

from twisted.internet import defer, reactor
from twisted.trial import unittest

from servers import REFERENCE, start_server
from test_client_wire import FAST_RETRY, inline, sleep
from twisted_stalk.client import BeanstalkClient, BeanstalkPool, Worker, connect

_names = itertools.count()


async def until(check, timeout=5.0, every=0.01):
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {check}")
        await sleep(every)


class PoolWireTests(unittest.TestCase):
    timeout = 30

    @classmethod
    def setUpClass(cls):
        cls.binlog = tempfile.TemporaryDirectory()
        cls.servers = [start_server("ours", "-b", cls.binlog.name),
                       start_server("reference" if REFERENCE else "ours"),
                       start_server("ours")]

    @classmethod
    def tearDownClass(cls):
        for s in cls.servers:
            s.stop()
        cls.binlog.cleanup()

    def setUp(self):
        self.tube = f"p{os.getpid()}-{next(_names)}"
        self.pool = self.make_pool()
        return self.pool.connect()

    def make_pool(self, **settings):
        settings.setdefault("retry_policy", FAST_RETRY)
        settings.setdefault("use", self.tube)
        settings.setdefault("watch", [self.tube])
        pool = BeanstalkPool([f"tcp:127.0.0.1:{s.port}" for s in self.servers],
                             reactor=reactor, **settings)
        self.addCleanup(pool.close)
        return pool

    async def tube_counts(self, key):
        stats = await self.pool.stats_tube(self.tube)
        return [stats.servers.get(name, {}).get(key, 0) for name in self.names]

    @property
    def names(self):
        return [s.name for s in self.pool.servers()]

    @inline
    async def test_reserve_timeout_waits_as_asked(self):
        # A pool reserve(timeout=1) on empty tubes asks each server with
        # reserve-with-timeout 0, then races them for what is left of the
        # second: that rest was truncated to 0 s, so it answered TimedOut
        # at once.  Now it is rounded up.
        from twisted_stalk.client import TimedOut
        start = time.monotonic()
        try:
            await self.pool.reserve(timeout=1)
            raise AssertionError("no TimedOut")
        except TimedOut:
            waited = time.monotonic() - start
        assert 0.95 <= waited < 2.5, waited

    @inline
    async def test_round_robin_spread(self):
        await defer.gatherResults([self.pool.put(b"x") for _ in range(600)])
        counts = await self.tube_counts("total-jobs")
        print(f"\n600 puts over 3 servers: {counts}")
        assert sum(counts) == 600 and all(abs(c - 200) <= 10 for c in counts), counts

    @inline
    async def test_worker_drains_all_three_with_at_most_4_in_hand(self):
        handled = []
        peak = []

        async def handler(job):
            handled.append(job.server)
            await sleep(0.002)
        for i, s in enumerate(self.servers):
            c = BeanstalkClient(f"tcp:127.0.0.1:{s.port}", reactor=reactor, use=self.tube)
            self.addCleanup(c.close)
            await defer.gatherResults([c.put(b"%d" % i) for _ in range(40)])
        worker = Worker(self.pool, handler, concurrency=4)
        worker.start()
        while len(handled) < 120:
            peak.append(sum(await self.tube_counts("current-jobs-reserved")))
        await worker.stop()
        print(f"\nreserved jobs sampled {len(peak)} times while draining: max {max(peak)}")
        assert max(peak) <= 4
        assert sorted(handled.count(n) for n in self.names) == [40, 40, 40]
        assert sum(await self.tube_counts("current-jobs-ready")) == 0

    @inline
    async def test_no_starvation_of_a_quiet_server(self):
        """Server 0 gets a steady stream; 20 jobs go to server 2 only: all are
        picked up, and their waits are printed."""
        first = BeanstalkClient(f"tcp:127.0.0.1:{self.servers[0].port}", reactor=reactor,
                                use=self.tube)
        third = BeanstalkClient(f"tcp:127.0.0.1:{self.servers[2].port}", reactor=reactor,
                                use=self.tube)
        self.addCleanup(first.close)
        self.addCleanup(third.close)
        waits = []

        async def handler(job):
            if job.body.startswith(b"q "):
                waits.append(time.monotonic() - float(job.body[2:]))
            await sleep(0.001)
        worker = Worker(self.pool, handler, concurrency=2)
        worker.start()
        streaming = True

        async def stream():
            while streaming:
                await defer.gatherResults([first.put(b"s") for _ in range(20)])
                await sleep(0.01)
        producer = defer.ensureDeferred(stream())
        await sleep(0.2)
        for _ in range(20):
            await third.put(b"q %f" % time.monotonic())
            await sleep(0.02)
        await until(lambda: len(waits) == 20)
        streaming = False
        await producer
        await worker.stop()
        backlog = (await first.stats_tube(self.tube))["current-jobs-ready"]
        print(f"\n20 jobs on a quiet server while another streams (its backlog "
              f"{backlog}): waits median {statistics.median(waits) * 1000:.1f} ms, "
              f"max {max(waits) * 1000:.1f} ms")
        assert max(waits) < 2.0

    @inline
    async def test_killed_server_loses_nothing_and_comes_back(self):
        """SIGKILL the binlogged server mid-run: every job acknowledged on the
        others is handled, the pool carries on, and after a restart on the
        same port the server's jobs (kept by its binlog) are handled too."""
        changes = []
        pool = self.make_pool(on_server_change=lambda i: changes.append((i.name, i.state)))
        await pool.connect()
        handled = set()

        async def handler(job):
            handled.add((job.server, job.id))
            await sleep(0.001)
        ids = list(await defer.gatherResults([pool.put(b"x") for _ in range(150)]))
        worker = Worker(pool, handler, concurrency=4)
        worker.start()
        await until(lambda: len(handled) >= 30)
        victim = self.servers[0]
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        await until(lambda: pool.servers()[0].state == "down")
        more = await defer.gatherResults([pool.put(b"y") for _ in range(60)])  # carries on
        ids += more
        assert all(i.server != self.names[0] for i in more)
        others = {(i.server, int(i)) for i in ids if i.server != self.names[0]}
        await until(lambda: others <= handled)
        self.servers[0] = start_server("ours", "-b", self.binlog.name, port=victim.port)
        await until(lambda: pool.servers()[0].state == "up")
        back = await defer.gatherResults([pool.put(b"z") for _ in range(30)])
        assert sum(1 for i in back if i.server == self.names[0]) == 10
        everything = {(i.server, int(i)) for i in ids + list(back)}
        await until(lambda: everything <= handled)
        await worker.stop()
        print(f"\nkilled and restarted: {len(everything)} acknowledged jobs, all handled "
              f"({len(handled)} handled in all); changes {[c[1] for c in changes]}")
        assert ("down" in [c[1] for c in changes]) and changes[-1][1] == "up"

    @inline
    async def test_a_job_given_back_keeps_its_place(self):
        """What the pool relies on (docs/client.md): a job given back by closing
        its connection, or released with its priority, is not sent behind the
        other jobs of its priority (both servers order by priority, then id)."""
        for s in self.servers:
            c = BeanstalkClient(f"tcp:127.0.0.1:{s.port}", reactor=reactor, use=self.tube)
            self.addCleanup(c.close)
            first, _, _ = await defer.gatherResults([c.put(b"%d" % i, 7) for i in range(3)])
            for give_back in ("close", "release"):
                proto = await connect(f"tcp:127.0.0.1:{s.port}", reactor=reactor)
                job = await proto.reserve(0, watching=[self.tube])
                assert job.id == first
                if give_back == "close":
                    await proto.close()
                    await sleep(0.05)  # the server notices the close
                else:
                    await job.release(7)
                    await proto.close()
                assert (await c.tube(self.tube).peek_ready()).id == first, (s.kind, give_back)
            stats = await c.stats_job(first)
            assert stats["releases"] == 1 and stats["reserves"] == 2
