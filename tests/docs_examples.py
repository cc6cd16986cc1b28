"""Run the examples of a documentation page as a reader would type them.

The convention the pages follow (docs/index.md's tutorial and how-to guides,
docs/ha.md):

- A ```` ```console ```` block is run. Each line starting ``$ `` is a command,
  run from the checkout's top directory by ``bash``; the lines after it, up to
  the next command, are what it prints (stdout and stderr together), where
  ``...`` stands for any text (as in doctest's ELLIPSIS). A command ending in
  `` &`` is started in the background and stopped (SIGTERM to its process
  group) when the page is done (its output is not compared); if it names ports
  to listen on (``-p N``, ``tcp:N``), the next command waits until they
  accept. A command that follows a background one may see it half way: it is
  repeated until it prints what the page shows, for up to 30 seconds (a loaded
  machine). ``kill $! && wait $!`` stops the last background command and waits
  for its end, which must be clean (status 0, or the SIGTERM itself for a
  program that does not catch it); elsewhere ``$!`` is that command's process
  id. ``cd DIR`` changes the directory of the page's later commands (each page
  starts in the checkout); a line ending in ``\\`` goes on on the next.
  ``pip install`` lines are not run (the test runs in the environment that
  ``pip install -e '.[test]'`` made); :func:`pip_extras` checks the extras they
  name exist.
- A ```` ```python ```` block is run as a script; a ```` ```text ```` block right
  after it is what it prints.
- Other blocks (``sh``, ``yaml``, ...) are shown, not run: they hold
  placeholders (your database's host, your certificate).

Ports, paths and connection strings on the page are the reader's; the test
maps them to its own (a free port for 11300, a temporary directory, a
throwaway PostgreSQL cluster) with ``substitutions``.
"""
from __future__ import annotations

import configparser
import doctest
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from servers import free_port

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
DOCS = os.path.join(ROOT, "docs")

FENCE = re.compile(r"^(`{3,})\s*([\w-]*)[^\n]*\n(.*?)^\1\s*$", re.M | re.S)


@dataclass
class Block:
    language: str
    text: str
    line: int
    output: Optional[str] = None     # a python block's expected output


@dataclass
class Command:
    line: str
    expected: str
    background: bool = False


def blocks(path: str) -> List[Block]:
    """The fenced code blocks of a Markdown page, in order."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    found: List[Block] = []
    last_end = None
    for m in FENCE.finditer(source):
        block = Block(m.group(2), m.group(3), source.count("\n", 0, m.start()) + 1)
        if (block.language == "text" and found and found[-1].language == "python"
                and found[-1].output is None and last_end is not None
                and source[last_end:m.start()].strip() == ""):
            found[-1].output = block.text
        else:
            found.append(block)
        last_end = m.end()
    return found


def commands(block: Block) -> List[Command]:
    """The ``$ `` commands of a console block with the output shown after each."""
    out: List[Command] = []
    continued = False
    for line in block.text.splitlines():
        if continued:
            out[-1].line += "\n" + line
        elif line.startswith("$ "):
            out.append(Command(line[2:].strip(), ""))
        elif out:
            out[-1].expected += line + "\n"
        continued = bool(out) and line.endswith("\\") and out[-1].expected == ""
    for command in out:
        if command.line.endswith(" &"):
            command.line, command.background = command.line[:-2].rstrip(), True
    return out


def pip_extras(line: str) -> List[str]:
    """The extras a ``pip install '.[a,b]'`` line names (empty for other lines)."""
    m = re.search(r"\.\[([\w,-]+)\]", line)
    return m.group(1).split(",") if m else []


def declared_extras() -> List[str]:
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, "setup.cfg"))
    return list(parser["options.extras_require"].keys())


def matches(expected: str, got: str) -> bool:
    checker = doctest.OutputChecker()
    return checker.check_output(expected, got, doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)


def substitute(text: str, substitutions: Dict[str, str]) -> str:
    for old in sorted(substitutions, key=len, reverse=True):
        text = text.replace(old, substitutions[old])
    return text


def _ports_of(command: str) -> List[int]:
    return [int(p) for p in re.findall(r"(?:-p\s+|--port[ =]|tcp:)(\d+)(?![\d.])", command)]


def wait_for_port(port: int, proc: subprocess.Popen, log: str, wait: float = 60.0) -> None:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"background command exited {proc.returncode}:\n{_read(log)}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port} after {wait} s:\n{_read(log)}")


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-4000:]
    except OSError:
        return ""


@dataclass
class Session:
    """One page's run: its environment, and what it left in the background."""

    env: Dict[str, str]
    substitutions: Dict[str, str]
    logs: str
    background: List[Tuple[subprocess.Popen, str]] = field(default_factory=list)
    ran: List[str] = field(default_factory=list)
    cwd: str = ROOT

    def run_page(self, page: str) -> None:
        path = os.path.join(DOCS, page)
        self.cwd = ROOT
        for block in blocks(path):
            where = f"{page}:{block.line}"
            if block.language == "console":
                for command in commands(block):
                    self.run_command(command, where)
            elif block.language == "python":
                self.run_python(block, where)

    def run_command(self, command: Command, where: str) -> None:
        line = substitute(command.line, self.substitutions)
        if line.startswith("pip install"):
            missing = [e for e in pip_extras(line) if e not in declared_extras()]
            assert not missing, f"{where}: {line}: no such extra {missing}"
            return
        self.ran.append(line)
        if re.fullmatch(r"kill \$!( && wait \$!)?", line):
            self.stop_last(where)
            return
        if self.background:
            line = line.replace("$!", str(self.background[-1][0].pid))
        if re.fullmatch(r"cd \S+", line):
            self.cwd = os.path.join(self.cwd, line[3:])
            return
        if command.background:
            self._start(command, line)
            return
        expected = substitute(command.expected, self.substitutions)
        deadline = time.monotonic() + (30 if self.background else 0)
        while True:
            done = subprocess.run(["bash", "-c", line], cwd=self.cwd, env=self.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=60)
            got = done.stdout.decode("utf-8", "replace")
            # a beanstalk error reply (TIMED_OUT, NOT_FOUND) is stalk's exit status 1
            status_ok = done.returncode == 0 or (
                done.returncode == 1 and re.match(r"[A-Z_]+\b", expected or ""))
            if status_ok and (matches(expected, got) if expected else True):
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{where}: $ {line}\nexit status {done.returncode}\n"
                    f"expected:\n{expected}got:\n{got}" + self._background_logs())
            time.sleep(0.1)

    def _start(self, command: Command, line: str, attempts: int = 3) -> None:
        """Start a background command and wait for the ports it names.  The
        test's ports were free when the session began; if another test took
        one since (``Address already in use``), the page's ports in this
        line get fresh ones, for this command and the page's later ones."""
        for attempt in range(attempts):
            log = os.path.join(self.logs, f"bg{len(self.background)}.log")
            with open(log, "wb") as out:
                proc = subprocess.Popen(["bash", "-c", "exec " + line], cwd=self.cwd,
                                        env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
            self.background.append((proc, log))
            try:
                for port in _ports_of(line):
                    wait_for_port(port, proc, log)
                return
            except AssertionError:
                if (attempt == attempts - 1 or proc.poll() is None
                        or "Address already in use" not in _read(log)):
                    raise
            self.background.pop()
            self._move_ports(_ports_of(line))
            line = substitute(command.line, self.substitutions)

    def _move_ports(self, taken: List[int]) -> None:
        """Fresh test ports for the page's ports mapped to ``taken`` (in the
        substitutions and the environment made from them)."""
        for page_port, ours in list(self.substitutions.items()):
            if ours.isdigit() and int(ours) in taken:
                fresh = str(free_port())
                self.substitutions[page_port] = fresh
                self.env = {k: v[:-len(ours)] + fresh if v.endswith(":" + ours) else v
                            for k, v in self.env.items()}  # STALK_ADDRESS

    def run_python(self, block: Block, where: str) -> None:
        code = substitute(block.text, self.substitutions)
        self.ran.append(code)
        done = subprocess.run([sys.executable, "-c", code], cwd=self.cwd, env=self.env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, timeout=60)
        got = done.stdout.decode("utf-8", "replace")
        expected = substitute(block.output or "", self.substitutions)
        assert done.returncode == 0 and (not expected or matches(expected, got)), (
            f"{where}: python block, exit status {done.returncode}\n"
            f"expected:\n{expected}got:\n{got}" + self._background_logs())

    def stop_last(self, where: str) -> None:
        """``kill $! && wait $!``: stop the last background command, wait for its end."""
        assert self.background, f"{where}: kill $! with nothing in the background"
        proc, log = self.background.pop()
        stop_group(proc)
        # 0, or ended by the signal (beanstalkd does not catch SIGTERM)
        assert proc.returncode in (0, -signal.SIGTERM), (
            f"{where}: the background command ended with status {proc.returncode}:\n"
            f"{_read(log)}")

    def _background_logs(self) -> str:
        return "".join(f"\n--- background {shlex.join(p.args)}:\n{_read(log)}"
                       for p, log in self.background)

    def close(self) -> None:
        while self.background:
            stop_group(self.background.pop()[0])


def stop_group(proc: subprocess.Popen, wait: float = 15.0) -> None:
    """SIGTERM to a background command's process group; SIGKILL after ``wait`` s."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        proc.wait(wait)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
