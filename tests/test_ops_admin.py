"""Extension verbs (--extensions): list-jobs, flush-tube, capabilities.

Off, they answer UNKNOWN_COMMAND exactly as beanstalkd does; on, stock commands
answer exactly as before (a sample of the differential scripts runs against a
server with every operations option on).
"""
from __future__ import annotations

import socket

import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

import test_differential as diff
from test_ops_helpers import start_stalkd
from twisted_stalk.core import JournalError, NullJournal
from twisted_stalk.engines import open_engine
from twisted_stalk.server import BeanstalkServerFactory
from twisted_stalk.server import admin
from servers import start_server, stored_bytes
from wire import Wire

EXTENSION_LINES = [
    b"capabilities\r\n", b"list-jobs default ready 10\r\n", b"flush-tube default\r\n",
    b"flush-tube default buried\r\n", b"list-jobs\r\n", b"capabilities x\r\n",
]


def test_off_they_are_unknown_commands_like_beanstalkd(any_server):
    w = Wire(any_server.connect())
    assert w.ask(b"put 0 0 10 1\r\nx\r\n") == b"INSERTED 1\r\n"
    for line in EXTENSION_LINES:
        assert w.ask(line) == b"UNKNOWN_COMMAND\r\n", line
    assert w.ask(b"peek-ready\r\n") == b"FOUND 1 1\r\nx\r\n"
    w.close()


# ------------------------------------------------------------------ in-process

class Server:
    def __init__(self, extensions: bool = True) -> None:
        self.clock = Clock()
        self.factory = BeanstalkServerFactory(self.clock, open_engine("memory:", self.clock))
        if extensions:
            admin.enable(self.factory)

    def connect(self) -> "Client":
        return Client(self.factory)


class Client:
    def __init__(self, factory) -> None:
        self.proto = factory.buildProtocol(None)
        self.transport = StringTransport()
        self.proto.makeConnection(self.transport)

    def ask(self, data: bytes) -> bytes:
        self.proto.dataReceived(data)
        out = self.transport.value()
        self.transport.clear()
        return out


def ids(reply: bytes):
    head, _, body = reply.partition(b"\r\n")
    assert head == b"OK %d" % (len(body) - 2), reply
    assert body.startswith(b"---\n") and body.endswith(b"\n\r\n")
    return [int(line[2:]) for line in body[4:-2].splitlines()]


def populate(s: Server):
    c = s.connect()
    c.ask(b"use work\r\n")
    for pri in (5, 1, 5, 3):
        c.ask(b"put %d 0 60 1\r\nx\r\n" % pri)            # ids 1..4
    c.ask(b"put 0 30 60 1\r\nd\r\nput 0 10 60 1\r\nd\r\n")  # ids 5 (30 s), 6 (10 s)
    w = s.connect()
    w.ask(b"watch work\r\nignore default\r\n")
    assert w.ask(b"reserve\r\n").startswith(b"RESERVED 2 ")  # pri 1
    assert w.ask(b"bury 2 0\r\n") == b"BURIED\r\n"
    assert w.ask(b"reserve\r\n").startswith(b"RESERVED 4 ")  # pri 3
    return c, w


def test_capabilities_lists_the_verbs():
    c = Server().connect()
    reply = c.ask(b"capabilities\r\n")
    assert reply == b"OK 44\r\n---\n- list-jobs\n- flush-tube\n- capabilities\n\r\n"
    assert c.ask(b"capabilities now\r\n") == b"BAD_FORMAT\r\n"


def test_list_jobs_in_each_state_without_changing_anything():
    s = Server()
    c, w = populate(s)
    before = s.factory.engine.tube_stats(b"work")
    assert ids(c.ask(b"list-jobs work ready 10\r\n")) == [1, 3]
    assert ids(c.ask(b"list-jobs work ready 1\r\n")) == [1]
    assert ids(c.ask(b"list-jobs work delayed 10\r\n")) == [6, 5]  # by time left
    assert ids(c.ask(b"list-jobs work buried 10\r\n")) == [2]
    assert ids(c.ask(b"list-jobs work reserved 10\r\n")) == [4]
    assert ids(c.ask(b"list-jobs work ready 0\r\n")) == []
    assert ids(c.ask(b"list-jobs default ready 10\r\n")) == []
    assert s.factory.engine.tube_stats(b"work") == before
    assert c.ask(b"list-jobs nosuch ready 10\r\n") == b"NOT_FOUND\r\n"
    for bad in (b"list-jobs work ready\r\n", b"list-jobs work waiting 10\r\n",
                b"list-jobs work ready -1\r\n", b"list-jobs work ready 4294967296\r\n",
                b"list-jobs -bad ready 1\r\n", b"list-jobs work ready 1 \r\n",
                b"list-jobs  work ready 1\r\n"):
        assert c.ask(bad) == b"BAD_FORMAT\r\n", bad
    assert s.factory.extensions.counts["list-jobs"] == 15


def test_flush_tube_by_state_and_default():
    s = Server()
    c, w = populate(s)
    q = s.factory.engine
    assert c.ask(b"flush-tube work buried\r\n") == b"FLUSHED 1\r\n"
    assert c.ask(b"peek 2\r\n") == b"NOT_FOUND\r\n"
    # Without a state: ready and delayed (and buried), never the reserved job.
    assert c.ask(b"flush-tube work\r\n") == b"FLUSHED 4\r\n"
    assert [c.ask(b"peek %d\r\n" % i) for i in (1, 3, 5, 6)] == [b"NOT_FOUND\r\n"] * 4
    assert (q.ready_count, q.delayed_count, q.buried_count, q.reserved_count) == (0, 0, 0, 1)
    assert stored_bytes(q) == 3
    # The worker still owns its job.
    assert w.ask(b"delete 4\r\n") == b"DELETED\r\n"
    assert c.ask(b"flush-tube work\r\n") == b"FLUSHED 0\r\n"
    assert c.ask(b"flush-tube nosuch\r\n") == b"NOT_FOUND\r\n"
    assert c.ask(b"flush-tube\r\n") == b"BAD_FORMAT\r\n"
    assert c.ask(b"flush-tube work everything\r\n") == b"BAD_FORMAT\r\n"
    # The delayed jobs' timer entries are stale now: nothing fires.
    s.clock.advance(60)
    assert q.ready_count == 0


def test_flush_reserved_takes_jobs_from_their_worker():
    s = Server()
    c, w = populate(s)
    assert c.ask(b"flush-tube work reserved\r\n") == b"FLUSHED 1\r\n"
    assert w.ask(b"delete 4\r\n") == b"NOT_FOUND\r\n"
    assert s.factory.engine.reserved_count == 0
    s.clock.advance(120)  # the TTR entry is stale: no timeout, no crash
    assert s.factory.engine.job_timeouts == 0


def test_flush_drops_an_unused_tube():
    s = Server()
    c = s.connect()
    c.ask(b"use gone\r\nput 0 0 10 1\r\nx\r\nuse default\r\n")
    assert b"gone" in c.ask(b"list-tubes\r\n")
    assert c.ask(b"flush-tube gone\r\n") == b"FLUSHED 1\r\n"
    assert b"gone" not in c.ask(b"list-tubes\r\n")


class FailingJournal(NullJournal):
    def __init__(self, allow: int) -> None:
        self.allow = allow
        self.deleted = []

    def job_deleted(self, job) -> None:
        if len(self.deleted) >= self.allow:
            raise JournalError("disk full")
        self.deleted.append(job.id)


@pytest.mark.parametrize("allow,reply", [(0, b"INTERNAL_ERROR\r\n"), (2, b"FLUSHED 2\r\n")])
def test_flush_is_journaled_and_stops_on_a_journal_error(allow, reply):
    s = Server()
    c = s.connect()
    c.ask(b"put 0 0 10 1\r\na\r\nput 0 0 10 1\r\nb\r\nput 0 0 10 1\r\nc\r\n")
    journal = s.factory.engine.journal = FailingJournal(allow)
    c.proto._journal = journal
    assert c.ask(b"flush-tube default\r\n") == reply
    assert journal.deleted == [1, 2][:allow]
    assert len(s.factory.engine.jobs) == 3 - allow


def test_off_in_process_answers_unknown_command():
    c = Server(extensions=False).connect()
    for line in EXTENSION_LINES:
        assert c.ask(line) == b"UNKNOWN_COMMAND\r\n"


# ------------------------------------------------------------- real processes

def test_flush_tube_survives_a_restart_through_the_binlog(tmp_path):
    binlog = tmp_path / "binlog"
    binlog.mkdir()
    server = start_stalkd(tmp_path, "--extensions", "-b", str(binlog))
    try:
        w = Wire(socket.create_connection(server.address, timeout=5))
        assert w.ask(b"use t\r\n") == b"USING t\r\n"
        for i in range(3):
            assert w.ask(b"put 0 0 60 1\r\n%d\r\n" % i) == b"INSERTED %d\r\n" % (i + 1)
        assert w.ask(b"use keep\r\nput 0 0 60 4\r\nkeep\r\n") == b"USING keep\r\n"
        assert w.reply() == b"INSERTED 4\r\n"
        assert ids(w.ask(b"list-jobs t ready 100\r\n")) == [1, 2, 3]
        assert w.ask(b"flush-tube t\r\n") == b"FLUSHED 3\r\n"
        w.close()
    finally:
        assert server.stop() == 0
    again = start_stalkd(tmp_path, "-b", str(binlog))  # extensions off now
    try:
        w = Wire(socket.create_connection(again.address, timeout=5))
        assert [w.ask(b"peek %d\r\n" % i) for i in (1, 2, 3)] == [b"NOT_FOUND\r\n"] * 3
        assert w.ask(b"peek 4\r\n") == b"FOUND 4 4\r\nkeep\r\n"
        assert w.ask(b"list-jobs keep ready 1\r\n") == b"UNKNOWN_COMMAND\r\n"
        w.close()
    finally:
        assert again.stop() == 0


SAMPLE = ("lifecycle", "command-names", "put-framing", "counters-on-errors", "pipelined",
          "bodies", "long-lines", "buried")


@pytest.mark.parametrize("name", SAMPLE)
def test_stock_replies_unchanged_with_every_option_on(name):
    script = next(s for s in diff.SCRIPTS if s.name == name)
    server = start_server("ours", "--extensions", "--max-memory", "1000000000",
                          "--max-connections", "1000", "--shutdown-grace", "1")
    try:
        got = diff.record(server, script)  # as run_checked, without its shared cache
        norm = diff.normalised(got)
        assert diff.labelled(script, norm) == diff.labelled(script, diff.expected_view(script, norm))
        assert diff.framing_problems(got) == []
        assert diff.quoting_problems("ours", got) == []
    finally:
        server.stop()
