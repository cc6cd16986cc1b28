"""``--stats-yaml 1.12``: the stats bodies in beanstalkd 1.12's shape (string
values bare), pinned against Debian's beanstalkd 1.12, for clients that split
lines on ": " and keep the quotes 1.13 added (Pheanstalk 4 among them)."""
from __future__ import annotations

import subprocess

import pytest

from servers import REFERENCE, start_server
from wire import Wire

COMMANDS = (b"use t1\r\n", b"put 0 0 10 1\r\nx\r\n", b"stats-job 1\r\n",
            b"stats-tube t1\r\n", b"stats\r\n")


def reference_version() -> str:
    if not REFERENCE:
        return ""
    out = subprocess.run([REFERENCE, "-v"], capture_output=True, text=True).stdout
    return out.split()[-1] if out else ""


needs_112 = pytest.mark.skipif(not reference_version().startswith("1.12"),
                               reason="needs Debian's beanstalkd 1.12")


def shapes(server) -> dict:
    """{(command, key): value quoted?} over the stats replies of ``server``."""
    w = Wire(server.connect())
    out = {}
    for command in COMMANDS:
        reply = w.ask(command)
        for line in reply.split(b"\r\n", 1)[1].decode().splitlines() if reply.startswith(b"OK") else []:
            key, sep, value = line.partition(": ")
            if sep:
                out[(command.split()[0].decode(), key)] = value
    w.close()
    return out


def quoting(values: dict) -> dict:
    """Which string values are quoted (numbers and booleans left out)."""
    return {k: v.startswith('"') for k, v in values.items()
            if not v.replace(".", "").isdigit() and v not in ("true", "false")}


@needs_112
@pytest.mark.parametrize("flag", [("--stats-yaml", "1.12"), ("--stats-yaml=1.12",)])
def test_stats_yaml_1_12_quotes_as_beanstalkd_1_12(flag):
    ours = start_server("ours", *flag)
    reference = start_server("reference")
    try:
        mine, theirs = quoting(shapes(ours)), quoting(shapes(reference))
    finally:
        ours.stop()
        reference.stop()
    common = set(mine) & set(theirs)
    assert {("stats-tube", "name"), ("stats-job", "tube"), ("stats", "hostname"),
            ("stats", "os"), ("stats", "platform")} <= common
    differ = {k: (mine[k], theirs[k]) for k in common if mine[k] != theirs[k]}
    assert differ == {}


@needs_112
def test_stats_yaml_1_12_quotes_the_version():
    ours = start_server("ours", "--stats-yaml", "1.12")
    try:
        assert shapes(ours)[("stats", "version")].startswith('"')
    finally:
        ours.stop()


def test_default_stats_yaml_quotes_names_as_1_13():
    ours = start_server("ours")
    try:
        values = shapes(ours)
    finally:
        ours.stop()
    assert values[("stats-tube", "name")] == '"t1"' and values[("stats-job", "tube")] == '"t1"'


def test_stats_yaml_rejects_other_shapes():
    from servers import free_port, ours_command
    result = subprocess.run(ours_command(free_port(), "--stats-yaml", "2"), capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 5 and "--stats-yaml must be 1.12 or 1.13" in result.stderr
