"""The command table: the facts other code derives from it match beanstalkd."""
from __future__ import annotations

import pytest

from twisted_stalk.protocol.commands import (
    BY_NAME,
    COMMANDS,
    COUNTED_COMMANDS,
    EXTENSION_BY_NAME,
    CommandError,
    identify,
    identify_extension,
    parse_args,
)

# beanstalkd 1.12 prot.c: which_cmd()'s order, and the op_names order of the
# cmd-* stats counters.
WHICH_CMD_ORDER = (
    "put", "peek", "peek-ready", "peek-delayed", "peek-buried",
    "reserve-with-timeout", "reserve-job", "reserve", "delete", "release", "bury",
    "kick", "kick-job", "touch", "stats-job", "stats-tube", "stats", "use", "watch",
    "ignore", "list-tubes-watched", "list-tube-used", "list-tubes", "quit", "pause-tube",
)
STATS_ORDER = (
    "put", "peek", "peek-ready", "peek-delayed", "peek-buried", "reserve",
    "reserve-with-timeout", "delete", "release", "use", "watch", "ignore", "bury",
    "kick", "touch", "stats", "stats-job", "stats-tube", "list-tubes",
    "list-tube-used", "list-tubes-watched", "pause-tube",
)


def which_cmd(line: bytes):
    """beanstalkd's lookup, word by word in its own order."""
    for name in WHICH_CMD_ORDER:
        if line.startswith(BY_NAME[name].match):
            return BY_NAME[name]
    return None


def test_counted_commands_in_stats_order():
    assert COUNTED_COMMANDS == STATS_ORDER


def test_every_stock_command_is_in_the_reference_order():
    assert sorted(WHICH_CMD_ORDER) == sorted(c.name for c in COMMANDS)


@pytest.mark.parametrize("suffix", [b"", b" ", b"x", b" 1", b"-ready", b"-job 1", b"s",
                                    b"-with-timeout 1", b"-tube x", b"-watched", b"-used"])
def test_longest_match_first_finds_what_which_cmd_finds(suffix):
    for spec in COMMANDS:
        for stem in {spec.match, spec.name.encode(), spec.match.rstrip(b" ")}:
            line = stem + suffix
            found, _ = identify(line)
            assert found is which_cmd(line), line


def test_extension_verbs_parse_through_the_table():
    spec, text = identify_extension(b"list-jobs tube ready 5")
    assert spec is EXTENSION_BY_NAME["list-jobs"]
    assert parse_args(spec, text) == (b"tube", b"ready", 5)
    spec, text = identify_extension(b"flush-tube tube")
    assert parse_args(spec, text) == (b"tube",)
    for bad in (b"list-jobs tube ready", b"list-jobs tube sleeping 5", b"flush-tube",
                b"flush-tube -bad", b"capabilities x", b"capabilities ",
                b"list-jobs tube ready 4294967296", b"flush-tube  tube"):
        spec, text = identify_extension(bad)
        with pytest.raises(CommandError):
            parse_args(spec, text)
    assert identify_extension(b"list-jobsx a b c") == (None, b"")


def test_what_the_table_says_of_each_command_agrees_with_its_replies():
    """``reserves``: a success hands out a job (RESERVED); ``blocks`` only for
    such commands; ``read_only`` commands take no body, hand out nothing and
    do not wait; every stock command has a ``help`` group."""
    from twisted_stalk.protocol.commands import COMMANDS
    for spec in COMMANDS:
        assert spec.reserves == ("RESERVED <id> <bytes>" in spec.replies), spec.name
        assert not spec.blocks or spec.reserves, spec.name
        if spec.read_only:
            assert not (spec.has_body or spec.reserves or spec.blocks), spec.name
        assert spec.help_group, spec.name


def _job_in(kind: str, holder, other) -> int:
    """A new job in state ``kind``; ``holder`` reserves it for the reserved ones."""
    delay = b"100" if kind == "delayed" else b"0"
    job_id = int(holder.ask(b"put 0 " + delay + b" 60 1\r\nx\r\n").split()[1])
    if kind in ("buried", "reserved"):
        assert holder.ask(b"reserve-job %d\r\n" % job_id).startswith(b"RESERVED")
    if kind == "buried":
        assert holder.ask(b"bury %d 0\r\n" % job_id) == b"BURIED\r\n"
    return job_id


def test_gone_if_not_found_is_true_where_not_found_never_answers_for_a_job_that_exists(
        any_server):
    """``gone_if_not_found``, against the server (ours and beanstalkd): each
    command on a job id, sent for an existing job in every state (and when
    reserved, by the holder and by another connection), answers NOT_FOUND
    in some case unless the table says NOT_FOUND means the job is gone."""
    from wire import Wire
    holder, other = Wire(any_server.connect()), Wire(any_server.connect())
    on_ids = [spec for spec in COMMANDS if spec.args and spec.args[0].name == "id"]
    assert {spec.name for spec in on_ids} == {
        "peek", "reserve-job", "delete", "release", "bury", "kick-job", "touch", "stats-job"}
    for spec in on_ids:
        words = set()
        for kind in ("ready", "delayed", "buried", "reserved"):
            for sender in ((holder, other) if kind == "reserved" else (other,)):
                job_id = _job_in(kind, holder, other)
                line = b" ".join([spec.name.encode(), b"%d" % job_id]
                                 + [b"0"] * (len(spec.args) - 1))
                words.add(sender.ask(line + b"\r\n").split()[0])
                holder.ask(b"delete %d\r\n" % job_id)  # (or it was moved on: NOT_FOUND)
                other.ask(b"delete %d\r\n" % job_id)
        assert spec.gone_if_not_found == (b"NOT_FOUND" not in words), (spec.name, words)
    for spec in COMMANDS + tuple(EXTENSION_BY_NAME.values()):
        if spec.gone_if_not_found:
            assert spec in on_ids and "NOT_FOUND" in spec.replies, spec.name
