"""Long crash test of the binlog: SIGKILL the server at random moments under load.

    python scripts/crash_soak.py [--cycles 300] [--clients 8] [--seed N]
                                 [--fsync "-f 0"] [--size 65536] [--dir DIR]

Each cycle starts ``stalkd -b DIR`` (on the directory the previous cycle left),
runs CLIENTS connections doing put / delete / reserve-job+release / bury /
kick-job for a random 0.05-0.4 s, kills the server with SIGKILL, restarts it and
checks against what the clients saw:

* every job whose INSERTED a client saw is there with its body, unless the
  client sent a delete for it;
* no job whose DELETED a client saw came back;
* every job there was put by some client (nothing invented), and the number
  of jobs the stats report equals the number found.

The same code runs a few dozen cycles in tests/test_binlog_server.py; the
figures of longer runs are in docs/persistence.md.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from test_binlog_server import crash_cycles  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=300)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--fsync", default="-f 0", help="fsync flags for stalkd [-f 0]")
    ap.add_argument("--size", default="65536", help="-s for stalkd (small: many rotations "
                                                   "and compactions) [65536]")
    ap.add_argument("--dir", help="binlog directory (default: a new temporary one)")
    args = ap.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="crash-soak-")
    os.makedirs(directory, exist_ok=True)
    print(f"crash soak: {args.cycles} cycles, {args.clients} clients, seed {args.seed}, "
          f"stalkd -b {directory} -s {args.size} {args.fsync}", flush=True)
    started = time.monotonic()

    def log(line: str) -> None:
        print(f"[{time.monotonic() - started:7.1f}s] {line}", flush=True)

    result = crash_cycles(directory, args.cycles, args.clients, args.seed,
                          flags=tuple(shlex.split(args.fsync)), size=args.size, log=log)
    files = [n for n in os.listdir(directory) if n.startswith("binlog.")]
    print(f"OK: {args.cycles} SIGKILLs, {result['acknowledged']} puts acknowledged, "
          f"{result['deleted']} deletes acknowledged, {result['checks']} checks, no loss, "
          f"nothing invented; {len(files)} binlog files at the end; "
          f"{time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
