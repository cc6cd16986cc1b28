"""The wire suites' server tests, on a node on the PostgreSQL engine.

A named subset of tests/test_wire.py and tests/test_wire_abuse.py, imported
here so that they run with this module's ``ours``/``server`` fixtures: a
``stalkd --engine`` node on a fresh schema of the session's cluster.  The
rest of those modules test the framing and the in-memory engine's timers
with a fake clock, which do not depend on the engine.
"""
from __future__ import annotations

import pytest

from servers import start_server
from test_wire import (  # noqa: F401  (collected here, with this module's fixtures)
    test_blocked_client_disconnect_is_noticed,
    test_blocked_reserve_buffers_input_and_serves_it_after,
    test_body_carries_any_bytes,
    test_disconnect_returns_reserved_jobs,
    test_drain_mode_on_sigusr1,
    test_expected_crlf,
    test_half_closed_waiting_client_gets_timed_out,
    test_job_too_big_body_is_discarded_not_parsed,
    test_max_size_body,
    test_pipelined_session_equals_byte_at_a_time,
    test_quit_returns_reserved_jobs,
    test_sigterm_exits_zero,
)
from test_wire_abuse import (  # noqa: F401
    test_a_stats_flood_does_not_slow_other_clients,
    test_unread_replies_do_not_grow_memory_or_stall_others,
)
from wire import Wire


@pytest.fixture
def ours(pg_engine):
    server = start_server("ours", "--engine", pg_engine)
    yield server
    server.stop()


@pytest.fixture
def server(ours):
    return ours


@pytest.fixture
def wire(ours):
    w = Wire(ours.connect())
    yield w
    w.close()


def test_a_connections_pipelined_puts_share_one_statement_replies_in_order(ours, pg_engine):
    """One read's puts run together (one batch statement, one transaction:
    one xmin), each answered in order; a command after them waits for their
    replies and sees their effects."""
    import psycopg

    from twisted_stalk.pg.config import parse
    w = Wire(ours.connect())
    try:
        puts = b"".join(b"put %d 0 60 2\r\np%d\r\n" % (i % 3, i % 10) for i in range(1, 41))
        w.send(puts + b"stats-tube default\r\nuse other\r\nput 0 0 60 1\r\nz\r\n"
               + b"put 1 0 60 1\r\na\r\nput 1 0 60 1\r\nb\r\n" + b"list-tube-used\r\n")
        for i in range(1, 41):
            assert w.reply() == b"INSERTED %d\r\n" % i
        stats = w.reply()
        assert b"current-jobs-ready: 40\n" in stats
        assert w.reply() == b"USING other\r\n"
        assert w.reply() == b"INSERTED 41\r\n"
        for i in (42, 43):
            assert w.reply() == b"INSERTED %d\r\n" % i
        assert w.reply() == b"USING other\r\n"
        assert w.ask(b"stats-job 42\r\n").count(b"tube: \"other\"") == 1
        config = parse(pg_engine)
        with psycopg.connect(config.conninfo, autocommit=True) as conn:
            xmins = conn.execute(f"SELECT count(DISTINCT xmin::text) FROM {config.schema}.jobs "
                                 "WHERE id <= 40").fetchone()[0]
        assert xmins == 1
    finally:
        w.close()


def test_a_tube_emptied_by_deletes_while_used_leaves_list_tubes_when_released(wire):
    """``delete_many`` does not look whether a used or watched tube keeps jobs;
    the node looks once the tube is released, so list-tubes stays beanstalkd's."""
    w = wire
    assert w.ask(b"use t\r\n") == b"USING t\r\n"
    assert w.ask(b"watch t\r\n") == b"WATCHING 2\r\n"
    assert w.ask(b"put 0 0 60 1\r\na\r\n") == b"INSERTED 1\r\n"
    assert w.ask(b"put 0 0 60 1\r\nb\r\n") == b"INSERTED 2\r\n"
    for job_id in (1, 2):
        assert w.ask(b"reserve-job %d\r\n" % job_id).startswith(b"RESERVED %d " % job_id)
    assert w.ask(b"delete 1\r\n") == b"DELETED\r\n"
    assert w.ask(b"put 0 0 60 1\r\nc\r\n") == b"INSERTED 3\r\n"
    assert w.ask(b"delete 2\r\n") == b"DELETED\r\n"
    assert w.ask(b"use default\r\n") == b"USING default\r\n"
    assert w.ask(b"ignore t\r\n") == b"WATCHING 1\r\n"
    assert b"- t\n" in w.ask(b"list-tubes\r\n")  # job 3 keeps it
    assert w.ask(b"delete 3\r\n") == b"DELETED\r\n"
    assert w.ask(b"list-tubes\r\n").endswith(b"---\n- default\n\r\n")
    assert w.ask(b"use t\r\n") == b"USING t\r\n"
    assert w.ask(b"put 0 0 60 1\r\nd\r\n") == b"INSERTED 4\r\n"
    assert w.ask(b"reserve-job 4\r\n").startswith(b"RESERVED 4 ")
    assert w.ask(b"delete 4\r\n") == b"DELETED\r\n"
    assert w.ask(b"use default\r\n") == b"USING default\r\n"
    assert w.ask(b"stats-tube t\r\n") == b"NOT_FOUND\r\n"
    assert w.ask(b"pause-tube t 0\r\n") == b"NOT_FOUND\r\n"
    assert w.ask(b"list-tubes\r\n").endswith(b"---\n- default\n\r\n")


def _reply_script(server) -> list:
    """Each connection's replies to a script whose answers do not depend on
    how commands fall into batches: a producer's pipelined puts, two workers'
    pipelined reserves, then their deletes (and a put, touch, release, bury)
    written alternately, a command at a time, without waiting, so batches
    answer while the next ones wait (replyhold.py)."""
    producer, w1, w2 = (Wire(server.connect()) for _ in range(3))
    try:
        seen = []
        puts = b"".join(b"put %d 0 60 3\r\nj%02d\r\n" % (100 - i, i) for i in range(40))
        producer.send(puts)
        seen.append(producer.replies(40))
        w1.send(b"reserve-with-timeout 0\r\n" * 20)
        got1 = w1.replies(20)
        w2.send(b"reserve-with-timeout 0\r\n" * 20)
        got2 = w2.replies(20)
        seen += [got1, got2]
        ids1 = [int(r.split()[1]) for r in got1]
        ids2 = [int(r.split()[1]) for r in got2]
        asked1, asked2 = [], []
        # After its delete of job n, w2 releases (or buries) its job n + 1
        # before deleting it: w1 leaves those alone, or whether its delete
        # came first would decide its reply.
        releases = {n for n in range(20) if n % 5 == 3}
        buries = {n for n in range(20) if n % 7 == 4}
        moved = {n + 1 for n in releases | buries}
        for n, (a, b) in enumerate(zip(ids1, ids2)):
            one = [b"delete %d\r\n" % a]
            if n not in moved:  # the other's job, held until the other deletes it
                one.append(b"delete %d\r\n" % b)
            two = [b"delete %d\r\n" % b]
            if n % 5 == 1:
                one.append(b"put 7 0 60 1\r\nx\r\n")
            if n % 5 == 2:
                two.append(b"touch %d\r\n" % ids2[n + 1])
            if n in releases:
                two.append(b"release %d 1 0\r\n" % ids2[n + 1])
            if n in buries:
                two.append(b"bury %d 1\r\n" % ids2[n + 1])
            for data in one:
                w1.send(data)
                asked1.append(data)
            for data in two:
                w2.send(data)
                asked2.append(data)
        seen.append(w1.replies(len(asked1)))
        seen.append(w2.replies(len(asked2)))
        seen.append(producer.ask(b"stats-tube default\r\n").split(b"\n")[1:8])
        return seen
    finally:
        for w in (producer, w1, w2):
            w.close()


def test_a_node_answers_the_same_bytes_with_and_without_the_reply_hold(pg_engine):
    """replyhold.py's contract: each connection gets the same replies, in the
    same order, whether a batch's replies wait for the next batch's
    statement or not (``TWISTED_STALK_REPLY_HOLD=0``); each node on a schema
    of its own."""
    schema = pg_engine.split("stalk_schema=")[1].split()[0]
    answers = []
    for name, env in ((schema, {}), (schema + "_off", {"TWISTED_STALK_REPLY_HOLD": "0"})):
        server = start_server("ours", "--engine", pg_engine.replace(
            "stalk_schema=" + schema, "stalk_schema=" + name), env=env)
        try:
            answers.append(_reply_script(server))
        finally:
            server.stop()
    held, plain = answers
    assert held == plain
    assert held[3].count(b"DELETED\r\n") == 20 and held[3].count(b"NOT_FOUND\r\n") == 14
    assert b"RELEASED\r\n" in held[4] and b"BURIED\r\n" in held[4] and b"TOUCHED\r\n" in held[4]
