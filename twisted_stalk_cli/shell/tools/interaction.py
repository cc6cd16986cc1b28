# -*- test-case-name: tests.test_shell_cli -*-
"""How tools that change jobs talk to the person running them: confirmation,
a progress bar, and Ctrl-C taken between jobs."""
from __future__ import annotations

import signal
import sys
import time
from contextlib import contextmanager
from typing import Iterator, List

from ..errors import EXIT_USAGE, ToolError
from ..output import Output, isatty


@contextmanager
def deferred_interrupt() -> Iterator[List[bool]]:
    """Ctrl-C sets a flag checked between jobs; a second Ctrl-C interrupts."""
    flag = [False]
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum, frame):
        if flag[0]:
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        flag[0] = True

    try:
        signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread
        yield flag
        return
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


class Progress:
    """A one-line progress bar on stderr (only when stderr is a terminal)."""

    def __init__(self, label: str, total: int, stream=None) -> None:
        self.label = label
        self.total = max(total, 0)
        self.stream = stream or sys.stderr
        self.enabled = isatty(self.stream)
        self.done = 0
        self._last = 0.0

    def step(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and (now - self._last > 0.05 or self.done >= self.total):
            self._last = now
            total = max(self.total, self.done, 1)
            width = 30
            filled = int(width * self.done / total)
            self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                              f"{self.done}/{self.total}")
            self.stream.flush()

    def finish(self) -> None:
        if self.enabled and self._last:
            self.stream.write("\n")
            self.stream.flush()


def confirm(question: str, yes: bool, out: Output, stdin=None) -> bool:
    if yes:
        return True
    stdin = stdin or sys.stdin
    if not isatty(stdin):
        raise ToolError("refusing to change jobs without confirmation: stdin is not a terminal; "
                        "pass --yes (or --dry-run to see the plan)", EXIT_USAGE)
    out.err.write(question + " [y/N] ")
    out.err.flush()
    answer = stdin.readline().strip().lower()
    return answer in ("y", "yes")


__all__ = ["Progress", "confirm", "deferred_interrupt"]
