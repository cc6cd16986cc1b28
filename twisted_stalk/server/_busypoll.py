# -*- test-case-name: tests.test_reactor,tests.test_wire -*-
"""A speed trick, fenced: look for new input a little longer before sleeping.

Contract: with a window of W seconds (``--busy-poll USEC``; 0, the default,
turns it off), when the lean main loop (:mod:`.reactor`) is about to block in
``epoll_wait`` and nothing is due sooner than W, it first polls without
blocking (``epoll_wait`` with a zero timeout, giving the CPU to any other
runnable task between polls) for up to W.  Events found are dispatched
exactly as the blocking wait would have returned them; a timed call is never
made later (no spinning when one is due within W, and the blocking wait that
follows a spin is shortened by W).  An idle server spins at most W once and
then sleeps: idle CPU stays at zero.  It costs up to W of CPU for every gap
between a server's bursts of work that is shorter than W, in exchange for the
time the kernel takes to wake a sleeping process.

Why (docs/performance.md, "Waking up"): on a virtual machine (the 2-core one
docs/performance.md was measured on) a process that sleeps in ``epoll_wait``
takes tens of microseconds to run again when a client's bytes arrive, more
than the server's own work on a command.
A client that sends one command at a time (most producers) waits for that
wake-up on every command.  With a 50 us window the reply comes before the
server ever sleeps: a one-connection put round trip went from 90 to 26 us
(the same server without and with the option, back to back).
Kernel busy polling (``SO_BUSY_POLL``, ``net.core.busy_poll``) does the same
for network devices but not for loopback or unix sockets, and needs privileges.
"""
from __future__ import annotations

import os
from os import sched_yield
from time import perf_counter
from typing import Any, Callable, List, Tuple

#: ``TWISTED_STALK_BUSY_POLL=USEC`` in the environment: the window of every
#: server in the process that does not set ``--busy-poll`` itself.
ENV = "TWISTED_STALK_BUSY_POLL"

#: The largest window allowed, in microseconds: longer spins only burn CPU.
MAX_WINDOW_US = 1000

Events = List[Tuple[int, int]]


def window_from(usec: Any) -> float:
    """The window in seconds for ``--busy-poll`` (microseconds; None: the
    environment's, else 0).  ValueError (one line) for anything else."""
    if usec is None:
        usec = os.environ.get(ENV) or 0
    try:
        n = int(usec)
    except (TypeError, ValueError):
        raise ValueError(f"--busy-poll must be microseconds (0 to {MAX_WINDOW_US}), not {usec!r}")
    if not 0 <= n <= MAX_WINDOW_US:
        raise ValueError(f"--busy-poll must be 0 to {MAX_WINDOW_US} microseconds, not {n}")
    return n / 1e6


def spin(poll: Callable[[float, int], Events], window: float, maxevents: int) -> Events:
    """Poll without blocking until events come or ``window`` seconds pass;
    the events, or an empty list."""
    until = perf_counter() + window
    while True:
        events = poll(0, maxevents)
        if events or perf_counter() >= until:
            return events
        sched_yield()


__all__ = ["ENV", "MAX_WINDOW_US", "spin", "window_from"]
