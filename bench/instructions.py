"""User-space instructions per job of a server, counted by valgrind (callgrind).

On this shared 2-core machine CPU-time ratios move by +-10-20 % between runs;
instruction counts do not move at all, so small changes to the hot path can be
judged here first and confirmed with bench/compare/run_compare.sh.  Kernel
work (syscalls, TCP) is not counted: the figure is the interpreter's share.

    python bench/instructions.py                       # put-seq, mixed-50c, wake-20
    python bench/instructions.py --mode put --conns 1 --ops 3000
    python bench/instructions.py --server 'beanstalkd -l 127.0.0.1 -p {port}'
    python bench/instructions.py --keep /tmp/cg && callgrind_annotate /tmp/cg/wait-wake-20-*

The server runs under ``valgrind --tool=callgrind --instr-atstart=no``; after a
warm-up of 500 jobs instrumentation is switched on for the measured jobs only
(``callgrind_control -i on/off``).  Needs valgrind and the load generator
(``bench/compare/bstalk_load``, built by run_compare.sh on first use).
"""
from __future__ import annotations

import argparse
import glob
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.environ.get("BSTALK_LOAD") or os.path.join(HERE, "compare", "bstalk_load")
OURS = f"{sys.executable} -m twisted_stalk_cli.stalkd -l 127.0.0.1 -p {{port}}"
#: name -> (generator mode, connections, extra generator arguments), as the
#: side-by-side driver's rows (bench/compare).  The default run takes the three round-trip rows.
SCENARIOS = {
    "put-seq": ("put", 1, ()),
    "mixed-50c": ("mixed", 50, ()),
    "wake-20": ("wait-wake", 20, ()),
    "put-pipe": ("put", 50, ("--pipeline", "16")),
    "prd": ("put-reserve-delete", 10, ("--pipeline", "16")),
    "mixed-4k": ("mixed", 4, ("--pipeline", "8", "--size", "4096")),
}
DEFAULT_SCENARIOS = ("put-seq", "mixed-50c", "wake-20")


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"server did not listen on {port} in {timeout:.0f}s")


def load(port: int, mode: str, conns: int, ops: int, *extra: str) -> None:
    pipeline = () if "--pipeline" in extra else ("--pipeline", "1")
    subprocess.run([GEN, "--addr", f"127.0.0.1:{port}", "--mode", mode, "--conns",
                    str(conns), *pipeline, "--ops", str(ops), "--timeout", "600",
                    "--quiet", *extra], check=True, stdout=subprocess.DEVNULL)


def instructions_per_job(server: str, port: int, mode: str, conns: int, ops: int,
                         keep: str = "", extra=()) -> float:
    outdir = tempfile.mkdtemp(prefix="stalk-ir-")
    argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={outdir}/cg.%p"] + shlex.split(server.format(port=port))
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, proc)
        load(port, mode, conns, 500, *extra)  # warm-up: imports done, code specialised
        subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True,
                       stdout=subprocess.DEVNULL)
        load(port, mode, conns, ops, "--no-cleanup", *extra)
        for command in (["-i", "off"], ["-d"]):
            subprocess.run(["callgrind_control", *command, str(proc.pid)], check=True,
                           stdout=subprocess.DEVNULL)
        time.sleep(1)
    finally:
        proc.terminate()
        proc.wait()
    total = 0
    for path in glob.glob(os.path.join(outdir, "cg.*")):
        with open(path) as f:
            for line in f:
                if line.startswith("totals:"):
                    total += int(line.split()[1])
    if keep:  # for callgrind_annotate: where the instructions go
        os.makedirs(keep, exist_ok=True)
        for path in glob.glob(os.path.join(outdir, "cg.*")):
            shutil.move(path, os.path.join(keep, f"{mode}-{conns}-{os.path.basename(path)}"))
    shutil.rmtree(outdir, ignore_errors=True)
    return total / ops


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=OURS, help="command with {port} [ours]")
    parser.add_argument("--port", type=int, default=11419)
    parser.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS),
                        help=f"comma list of {', '.join(SCENARIOS)}")
    parser.add_argument("--mode", help="generator mode instead of --scenarios")
    parser.add_argument("--conns", type=int, default=1)
    parser.add_argument("--ops", type=int, default=3000)
    parser.add_argument("--keep", default="", metavar="DIR",
                        help="keep the callgrind files here (callgrind_annotate)")
    args = parser.parse_args()
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found (apt-get install -y valgrind)")
    if not os.access(GEN, os.X_OK):
        raise SystemExit(f"{GEN} not found: run bench/compare/run_compare.sh once, "
                         "or set BSTALK_LOAD")
    rows = ([(args.mode, args.mode, args.conns, ())] if args.mode else
            [(name, *SCENARIOS[name]) for name in args.scenarios.split(",")])
    for name, mode, conns, extra in rows:
        per_job = instructions_per_job(args.server, args.port, mode, conns, args.ops,
                                       args.keep, extra)
        print(f"{name:10s} {per_job:10,.0f} instructions/job (user space, {args.ops} jobs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
