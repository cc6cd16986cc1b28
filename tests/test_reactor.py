"""The lean main loop (server/reactor.py) and its fallback to Twisted's own."""
from __future__ import annotations

import subprocess
import sys

from twisted.internet.epollreactor import EPollReactor

from twisted_stalk.server import reactor as lean


def test_upgrade_gives_a_fresh_epoll_reactor_the_lean_loop():
    r = EPollReactor()
    try:
        assert lean.upgrade(r)
        assert type(r) is lean.LeanEPollReactor
        assert not lean.upgrade(r)  # once only
    finally:
        r._poller.close()


def test_a_reactor_missing_what_the_loop_reads_is_left_alone(monkeypatch):
    r = EPollReactor()
    try:
        monkeypatch.setattr(lean, "_RELIES_ON", lean._RELIES_ON + ("_no_such_member",))
        assert not lean.compatible(r)
        assert not lean.upgrade(r)
        assert type(r) is EPollReactor
    finally:
        r._poller.close()


def test_install_falls_back_to_twisteds_reactor():
    code = ("from twisted_stalk.server import reactor as lean;"
            "lean._RELIES_ON += ('_no_such_member',);"
            "r = lean.install(); print(type(r).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["EPollReactor"]
    code = "from twisted_stalk.server import reactor as lean; print(type(lean.install()).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["LeanEPollReactor"]
