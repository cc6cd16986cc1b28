"""Producers and workers that keep a queue busy across faults, and count what happened.

Used by the PostgreSQL engine's fault tests (tests/test_pg_faults.py).  Each
client is a thread with a blocking socket; it talks to one node and moves to
the next one of ``addresses`` when its connection breaks.

* A producer puts jobs with unique bodies; a body is *acknowledged* once
  ``INSERTED`` came back.  A put answered ``INTERNAL_ERROR`` or cut off may or
  may not have been stored: the same body is put again (at-least-once).
* A worker reserves, then deletes.  ``delivered`` counts per body the
  ``RESERVED`` replies that reached a worker (a job a worker got is not
  lost, even if its node died before the delete was answered).  A delete answered ``NOT_FOUND`` on a connection that stayed open,
  for a job whose earlier delete got no answer, is fine; any other
  ``NOT_FOUND`` means the job was taken from a worker that still held it:
  ``stolen`` (handed to two workers at once).

:meth:`Load.verdict` drains what is left through a fresh connection and
returns the figures: acknowledged, delivered, lost (acknowledged, never
delivered), duplicates, stolen.
"""
from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from typing import Dict, List, Optional, Set, Tuple

Address = Tuple[str, int]


class Conn:
    """A blocking beanstalk connection that reads whole replies."""

    def __init__(self, address: Address, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        self.buf += chunk

    def ask(self, data: bytes) -> Tuple[bytes, Optional[bytes]]:
        """Send ``data``; the reply line and the body, if it has one."""
        self.sock.sendall(data)
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        words = line.split()
        if words and words[0] in (b"RESERVED", b"FOUND", b"OK"):
            n = int(words[-1]) + 2
            while len(self.buf) < n:
                self._fill()
            body, self.buf = self.buf[:n - 2], self.buf[n:]
            return line, body
        return line, None

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Load:
    """Producers and workers against ``addresses`` (see the module docstring)."""

    def __init__(self, addresses: List[Address], producers: int = 2, workers: int = 4,
                 ttr: int = 300, rate: float = 0.0) -> None:
        self.addresses = addresses
        self.ttr = ttr
        #: Seconds between a producer's puts (0: as fast as it goes).
        self.rate = rate
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acknowledged: Set[bytes] = set()
        self.delivered: Counter = Counter()
        self.stolen: List[bytes] = []
        self.stolen_at: List[Tuple[float, int, bytes]] = []
        self.errors: Counter = Counter()
        self.reconnects = 0
        self.lost: Set[bytes] = set()
        self.threads = [threading.Thread(target=self._produce, args=(i,), daemon=True)
                        for i in range(producers)]
        self.threads += [threading.Thread(target=self._work, args=(i,), daemon=True)
                         for i in range(workers)]

    def start(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)

    def _connect(self, start: int) -> Tuple[Conn, int]:
        i = start
        while not self.stop.is_set():
            address = self.addresses[i % len(self.addresses)]
            try:
                return Conn(address), i
            except OSError:
                i += 1
                time.sleep(0.05)
        raise ConnectionError("stopped")

    def _produce(self, n: int) -> None:
        seq = 0
        conn, at = self._connect(n)
        pending: Optional[bytes] = None
        while not self.stop.is_set():
            body = pending or b"p%d-%d" % (n, seq)
            try:
                line, _ = conn.ask(b"put 0 0 %d %d\r\n%s\r\n" % (self.ttr, len(body), body))
            except (OSError, ConnectionError):
                conn.close()
                self.reconnects += 1
                pending = body
                try:
                    conn, at = self._connect(at + 1)
                except ConnectionError:
                    return
                continue
            if line.startswith(b"INSERTED"):
                with self.lock:
                    self.acknowledged.add(body)
                pending = None
                seq += 1
            else:
                self.errors[line] += 1
                pending = body
                time.sleep(0.01)
            if self.rate:
                time.sleep(self.rate)
        conn.close()

    def _work(self, n: int) -> None:
        conn, at = self._connect(n)
        unsure: Set[int] = set()
        while not self.stop.is_set():
            try:
                line, body = conn.ask(b"reserve-with-timeout 1\r\n")
                if not line.startswith(b"RESERVED"):
                    if line != b"TIMED_OUT":
                        self.errors[line] += 1
                        time.sleep(0.01)
                    continue
                job_id = int(line.split()[1])
                with self.lock:
                    self.delivered[body] += 1
                while True:
                    line, _ = conn.ask(b"delete %d\r\n" % job_id)
                    if line == b"DELETED":
                        break
                    if line == b"NOT_FOUND":
                        if job_id not in unsure:  # else the unanswered delete took it
                            with self.lock:
                                self.stolen.append(body)
                                self.stolen_at.append((time.time(), job_id, body))
                        break
                    self.errors[line] += 1
                    unsure.add(job_id)
                    time.sleep(0.05)
            except (OSError, ConnectionError):
                conn.close()
                self.reconnects += 1
                unsure.clear()
                try:
                    conn, at = self._connect(at + 1)
                except ConnectionError:
                    return
        conn.close()

    def verdict(self, address: Optional[Address] = None, quiet: float = 2.0,
                wait: float = 60.0) -> Dict[str, int]:
        """Stop, drain the queue through a fresh connection, and count.

        Draining goes on until the server's stats show no job left (a
        reservation of a node that died comes back only after the other
        nodes give it up) or ``wait`` seconds pass."""
        self.finish()
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                conn = Conn(address or self.addresses[0])
                last = time.monotonic()
                while time.monotonic() - last < quiet:
                    line, body = conn.ask(b"reserve-with-timeout 1\r\n")
                    if line.startswith(b"RESERVED"):
                        self.delivered[body] += 1
                        conn.ask(b"delete %d\r\n" % int(line.split()[1]))
                        last = time.monotonic()
                left = self.jobs_left(conn)
                conn.close()
                if not left:
                    break
            except (OSError, ConnectionError):
                time.sleep(0.2)
        self.lost = self.acknowledged - set(self.delivered)
        return {
            "acknowledged": len(self.acknowledged),
            "delivered": sum(1 for b in self.acknowledged if b in self.delivered),
            "lost": len(self.lost),
            "duplicates": sum(n - 1 for n in self.delivered.values() if n > 1),
            "stolen": len(self.stolen),
            "reconnects": self.reconnects,
            "errors": sum(self.errors.values()),
        }

    @staticmethod
    def jobs_left(conn: Conn) -> int:
        """Jobs the server still holds in any state."""
        _, body = conn.ask(b"stats\r\n")
        total = 0
        for line in (body or b"").decode().splitlines():
            key, _, value = line.partition(": ")
            if key in ("current-jobs-ready", "current-jobs-reserved", "current-jobs-delayed",
                       "current-jobs-buried"):
                total += int(value)
        return total


__all__ = ["Conn", "Load"]
