"""Client throughput: pipelined puts with 100-byte bodies over one connection.

    beanstalkd -l 127.0.0.1 -p 11420 &
    python bench/client_bench.py --port 11420

Prints puts/s over the wire (one process, one connection, ``--window`` puts in
flight) and the client's own CPU cost per call, measured without a network:
the time to issue a put (validate, encode, queue a Deferred, write) and the
time to decode its ``INSERTED <id>`` reply and fire the Deferred.
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from typing import List

from twisted.internet import defer, task
from twisted.internet.testing import StringTransport

from twisted_stalk.client import BeanstalkClient, BeanstalkProtocol


def per_call_overhead(n: int, repeat: int = 3) -> dict:
    """CPU µs per put spent in the client, with an in-memory transport (best of
    ``repeat``; CPU time, so that other processes on the machine matter less)."""
    runs = [_overhead_once(n) for _ in range(repeat)]
    return {"issue_us": min(r["issue_us"] for r in runs),
            "reply_us": min(r["reply_us"] for r in runs)}


def _overhead_once(n: int) -> dict:
    proto = BeanstalkProtocol(task.Clock(), timeout=None)
    transport = StringTransport()
    proto.makeConnection(transport)
    body = b"x" * 100
    gc.disable()
    try:
        t0 = time.process_time()
        for _ in range(n):
            proto.put(body, 1024, 0, 60)
        t1 = time.process_time()
        replies = b"".join(b"INSERTED %d\r\n" % i for i in range(1, n + 1))
        chunk = 64 * 1024
        t2 = time.process_time()
        for i in range(0, len(replies), chunk):
            proto.dataReceived(replies[i:i + chunk])
        t3 = time.process_time()
    finally:
        gc.enable()
    assert proto.pending == 0
    return {"issue_us": (t1 - t0) / n * 1e6, "reply_us": (t3 - t2) / n * 1e6}


async def wire(reactor, host: str, port: int, count: int, window: int,
               rounds: int) -> List[float]:
    client = BeanstalkClient(f"tcp:{host}:{port}", reactor=reactor, timeout=60)
    await client.connect()
    tube = client.tube("client-bench")
    body = b"x" * 100
    rates = []
    cpu: List[float] = []
    ids: List[int] = []
    for _ in range(rounds):
        c0 = time.process_time()
        t0 = time.perf_counter()
        sent = 0
        while sent < count:
            batch = min(window, count - sent)
            ids.extend(await defer.gatherResults(
                [tube.put(body, 1024, 0, 60) for _ in range(batch)]))
            sent += batch
        rates.append(count / (time.perf_counter() - t0))
        cpu.append((time.process_time() - c0) / count * 1e6)
    # leave the server as we found it
    for i in range(0, len(ids), window):
        await defer.DeferredList([client.delete(j) for j in ids[i:i + window]],
                                 consumeErrors=True)
    await client.close()
    return rates, cpu


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--count", type=int, default=100_000, help="puts per round")
    p.add_argument("--window", type=int, default=1000, help="puts in flight")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)

    over = per_call_overhead(100_000)
    print(f"client CPU per put: issue {over['issue_us']:.2f} us, "
          f"reply {over['reply_us']:.2f} us, total {over['issue_us'] + over['reply_us']:.2f} us"
          f" (bound {1e6 / (over['issue_us'] + over['reply_us']):,.0f} puts/s)")

    def run(reactor):
        return defer.ensureDeferred(wire(reactor, args.host, args.port, args.count,
                                         args.window, args.rounds)).addCallback(report)

    def report(result) -> None:
        rates, cpu = result
        rates_txt = ", ".join(f"{r:,.0f}" for r in rates)
        print(f"pipelined puts over one connection (100-byte bodies, window {args.window}): "
              f"best {max(rates):,.0f} puts/s, median {sorted(rates)[len(rates) // 2]:,.0f} "
              f"puts/s  [{rates_txt}]")
        print(f"client process CPU per put over the wire: {min(cpu):.1f} us "
              f"(all of it: reactor, syscalls, gatherResults)")
        print(f"python {sys.version.split()[0]}, reactor {type(reactor_ref[0]).__name__}")

    from twisted.internet import reactor
    reactor_ref = [reactor]
    task.react(run)


if __name__ == "__main__":
    main()
