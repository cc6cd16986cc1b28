# -*- test-case-name: tests.test_shell_terminal_more -*-
"""Keys read while a live tool (``top``, ``tail``) runs on a terminal: ``q``
quits, as Ctrl-C does, and nothing typed meanwhile is echoed over the screen
or left behind for the shell's prompt.

:func:`quit_keys` puts the terminal in cbreak mode (no line editing, no
echo; Ctrl-C still interrupts) and gives the tool a ``wait(seconds)`` to call
between refreshes instead of ``time.sleep``: it returns True as soon as
``q`` is pressed.  On leaving, the terminal's settings come back and what
was typed but not read is discarded.  When stdin is not a terminal (or the
process runs in the background), ``wait`` is ``time.sleep`` and never quits.
"""
from __future__ import annotations

import os
import select
import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterator

#: ``wait(seconds)``: wait up to ``seconds``; True when the person asked to quit.
Wait = Callable[[float], bool]

#: The keys that quit.
QUIT = b"qQ"


def _sleep(seconds: float) -> bool:
    time.sleep(max(0.0, seconds))
    return False


@contextmanager
def quit_keys(stdin=None, live: bool = True) -> Iterator[Wait]:
    """A ``wait`` that also watches the keyboard for ``q`` (see the module);
    with ``live`` False (output into a pipe, one frame) plain ``time.sleep``,
    so keys typed ahead for the next command are left alone."""
    stdin = stdin if stdin is not None else sys.stdin
    if not live:
        yield _sleep
        return
    try:
        fd = stdin.fileno()
        # (in the background, changing the terminal's mode would stop the
        # process: SIGTTOU)
        interactive = os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp()
    except (AttributeError, ValueError, OSError):
        interactive = False
    if not interactive:
        yield _sleep
        return
    import termios
    import tty
    try:
        saved = termios.tcgetattr(fd)
        tty.setcbreak(fd)
    except termios.error:
        yield _sleep
        return

    def wait(seconds: float) -> bool:
        deadline = time.monotonic() + max(0.0, seconds)
        while True:
            left = deadline - time.monotonic()
            try:
                ready = select.select([fd], [], [], max(0.0, left))[0]
            except InterruptedError:
                ready = []
            if ready:
                try:
                    typed = os.read(fd, 1024)
                except OSError:
                    typed = b""
                if any(k in QUIT for k in typed):
                    return True
                if not typed:  # the terminal hung up: wait out the time
                    time.sleep(max(0.0, deadline - time.monotonic()))
                    return False
            if left <= 0:
                return False

    try:
        yield wait
    finally:
        try:
            termios.tcsetattr(fd, termios.TCSAFLUSH, saved)  # (drops unread keys)
        except termios.error:
            pass


__all__ = ["QUIT", "Wait", "quit_keys"]
