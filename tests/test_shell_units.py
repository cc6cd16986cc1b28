"""Unit tests of the shell's pieces: completer, validator, hints, lexer,
input rules, renderers.  No server, no terminal: prompt_toolkit Documents."""
import io
import json

import pytest
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from prompt_toolkit.layout.controls import BufferControl
from prompt_toolkit.layout.processors import TransformationInput
from prompt_toolkit.validation import ValidationError

from twisted_stalk.protocol import COMMANDS
from twisted_stalk.protocol.reader import ReplyReader
from twisted_stalk_cli.shell.request import (
    InputError,
    build_request,
    decode_escapes,
    hint_for,
    needs_more_input,
    usage,
)
from twisted_stalk_cli.shell.render import (
    classify_body,
    escape_text,
    plain,
    raw_bytes,
    render_body,
    render_reply,
    render_table,
    reply_data,
)
from twisted_stalk_cli.shell.script import ScriptReader
from twisted_stalk_cli.shell.target import Target, parse_target
from twisted_stalk_cli.shell.tracked import Reserved
from twisted_stalk_cli.shell.known import Known
from twisted_stalk_cli.shell.ui import (ArgHintProcessor, StalkCompleter, StalkLexer,
                                        StalkValidator, jobs_toolbar, syntax_help)


def reply(command, line, body=None):
    """A reply as the shell's connection reads it: decoded once, by the shared
    reader, as a reply to ``command`` (None: raw bytes, by its shape)."""
    reader = ReplyReader(lenient=True)
    reader.expect(command)
    (decoded,) = reader.feed(line + b"\r\n" + (b"" if body is None else body + b"\r\n"))
    return decoded


def complete(text, known=None, cursor=None):
    completer = StalkCompleter(known or Known())
    doc = Document(text, len(text) if cursor is None else cursor)
    return [c.text for c in completer.get_completions(doc, CompleteEvent(completion_requested=True))]


# --------------------------------------------------------------------------
# Completer

def test_completes_command_names_from_the_table():
    assert complete("pe") == ["peek", "peek-ready", "peek-delayed", "peek-buried"]
    assert complete("reserve-") == ["reserve-with-timeout", "reserve-job"]
    everything = complete("")
    assert [c.name for c in COMMANDS] == everything[:len(COMMANDS)]
    assert "\\wire" in everything and "help" in everything


def test_completes_meta_commands_and_help_topics():
    assert complete("\\w") == ["\\wire"]
    assert complete("\\wire o") == ["on", "off"]
    assert "stats-tube" in complete("help stats-")
    assert complete("help kick") == ["kick", "kick-job"]


def test_completes_tube_names_learned_from_replies():
    known = Known()
    known.learn(["emails"], reply("use", b"USING emails"))
    known.learn(["images"], reply("watch", b"WATCHING 2"))
    known.learn([], reply("list-tubes", b"OK 24", b"---\n- default\n- reports\n"))
    # list-tubes is authoritative: tubes it does not list any more are dropped
    assert complete("watch ", known) == ["reports", "default"]
    known.learn(["emails"], reply("use", b"USING emails"))
    assert complete("watch ", known) == ["emails", "reports", "default"]
    assert complete("stats-tube rep", known) == ["reports"]
    assert complete("pause-tube def", known) == ["default"]
    # only tube arguments complete tubes
    assert complete("peek def", known) == []


def test_completes_job_ids_most_recent_first_with_notes():
    known = Known()
    known.learn(["1", "0", "60", "5"], reply("put", b"INSERTED 7"))
    known.learn([], reply("reserve", b"RESERVED 12 3", b"abc"))
    known.learn([], reply("peek-buried", b"FOUND 15 1", b"x"))
    completer = StalkCompleter(known)
    doc = Document("delete ")
    got = list(completer.get_completions(doc, CompleteEvent()))
    assert [c.text for c in got] == ["15", "12", "7"]
    assert [c.display_meta_text for c in got] == ["peek-buried", "reserved", "inserted"]
    assert complete("release 1", known) == ["15", "12"]
    # deleted jobs are forgotten
    known.learn(["12"], reply("delete", b"DELETED"))
    assert complete("touch ", known) == ["15", "7"]
    # the second argument of release is a priority: no ids
    assert complete("release 15 ", known) == []


def test_not_found_forgets_a_job_only_where_it_means_the_job_is_gone():
    """NOT_FOUND to peek or stats-job: the job does not exist, forgotten.  To
    the commands that also answer it for a job that exists (reserved by
    another connection, not reserved by this one, not kickable), the id is
    still offered, noted with the answer; ``touch`` and ``release`` alike."""
    known = Known()
    for job_id in range(1, 10):
        known.learn(["0", "0", "60", "1"], reply("put", b"INSERTED %d" % job_id))
    known.learn(["1"], reply("peek", b"NOT_FOUND"))
    known.learn(["2"], reply("stats-job", b"NOT_FOUND"))
    for job_id, command, args in ((3, "delete", []), (4, "kick-job", []), (5, "touch", []),
                                  (6, "release", ["0", "0"]), (7, "bury", ["0"]),
                                  (8, "reserve-job", [])):
        known.learn([str(job_id)] + args, reply(command, b"NOT_FOUND"))
    known.learn(["9"], reply("stats-tube", b"NOT_FOUND"))  # a tube named 9, not a job
    assert complete("peek ", known) == ["9", "8", "7", "6", "5", "4", "3"]
    assert known.jobs[5] == "touch: NOT_FOUND" and known.jobs[6] == "release: NOT_FOUND"
    assert known.jobs[9] == "inserted"


def test_completes_files_after_at_sign(tmp_path):
    (tmp_path / "body.json").write_text("{}")
    got = complete(f"put @{tmp_path}/bo")
    assert got == ["dy.json"]


def test_no_completion_inside_a_body():
    assert complete("put\nde") == []


def test_tube_completion_refreshes_through_callback():
    known = Known()
    calls = []

    def refresh():
        calls.append(1)
        known.learn([], reply("list-tubes", b"OK 12", b"---\n- fresh\n"))

    completer = StalkCompleter(known, refresh)
    got = [c.text for c in completer.get_completions(Document("use "), CompleteEvent())]
    assert got == ["fresh"] and calls == [1]
    # (how often the server is asked is the lookup's business: test_shell_repl)
    list(completer.get_completions(Document("stats"), CompleteEvent()))
    assert calls == [1]


# --------------------------------------------------------------------------
# Validator

def validate(text):
    StalkValidator().validate(Document(text, len(text)))


def test_validator_accepts_good_commands():
    for text in ["stats", "use emails", "put", "put 1 2 3", "release 5 100 0", "pause-tube x 10",
                 "reserve-with-timeout -1", "!anything at all", "help", "help put", "\\wire on",
                 "put\nbody text\n", "", "# comment"]:
        validate(text)


@pytest.mark.parametrize("text,fragment", [
    ("frob 1", "unknown command 'frob'"),
    ("delet 5", "did you mean delete"),
    ("delete", "delete takes 1 argument: delete <id>"),
    ("delete x", "<id> must be a non-negative whole number"),
    ("use -bad", "<tube>"),
    ("put 1 2", "put takes <pri> <delay> <ttr>"),
    ("put 99999999999 0 0", "at most 4294967295"),
    ("stats extra", "stats takes no arguments"),
    ("stats\nbody", "does not take a body"),
    ("put @/no/such/file", "no such file"),
])
def test_validator_explains_bad_commands(text, fragment):
    with pytest.raises(ValidationError) as e:
        validate(text)
    assert fragment in e.value.message
    assert "!" in e.value.message or "usage" in e.value.message or fragment in e.value.message


def test_validator_puts_the_cursor_at_the_end_of_the_line():
    with pytest.raises(ValidationError) as e:
        validate("frob 1")
    assert e.value.cursor_position == len("frob 1")


# --------------------------------------------------------------------------
# Hints, toolbar, lexer

def test_argument_hints():
    assert hint_for("put") == " <pri> <delay> <ttr> [bytes]"
    assert hint_for("put ") == "<pri> <delay> <ttr> [bytes]"
    assert hint_for("put 1") == " <delay> <ttr> [bytes]"
    assert hint_for("put 1 0 60 ") == "[bytes]"
    assert hint_for("put 1 0 60 5") == ""
    assert hint_for("release 5 ") == "<pri> <delay>"
    assert hint_for("stats") == ""
    assert hint_for("frob ") == ""
    assert hint_for("put\nbody") == ""
    assert usage(next(c for c in COMMANDS if c.name == "put")) == "put <pri> <delay> <ttr> [bytes]"


def _transform(text):
    buf = Buffer(document=Document(text, len(text)))
    control = BufferControl(buffer=buf)
    ti = TransformationInput(control, buf.document, 0, lambda i: i, [("", text)], 80, 1)
    return ArgHintProcessor().apply_transformation(ti).fragments


def test_hint_processor_appends_grey_hint():
    frags = _transform("bury 5")
    assert frags[-1] == ("class:arg-hint", " <pri>")
    assert _transform("stats") == [("", "stats")]


def test_toolbar_shows_syntax_and_argument_meaning():
    assert "put <pri> <delay> <ttr> [bytes]" in plain(syntax_help("put"))
    assert "<delay>: seconds to wait" in plain(syntax_help("put 1 "))
    assert "unknown command 'frob'" in plain(syntax_help("frob"))
    assert "Tab" in plain(syntax_help(""))
    assert "empty line" in plain(syntax_help("put\nabc"))
    assert "\\wire [on|off]" in plain(syntax_help("\\wire"))


def test_toolbar_counts_down_and_warns_inside_the_last_second():
    now = 100.0
    jobs = {5: Reserved(5, deadline=now + 12.4), 7: Reserved(7, deadline=now + 0.6),
            9: Reserved(9, deadline=now - 1), 11: Reserved(11)}
    frags = jobs_toolbar(jobs, now)
    text = plain(frags)
    assert "#5 12s" in text
    assert "#7 0.6s DEADLINE_SOON" in text
    assert "#9 TTR expired" in text
    assert "#11" in text
    soon = [f for f in frags if "#7" in f[1]][0]
    assert soon[0] == "class:toolbar.soon"
    assert jobs_toolbar({}, now) == []


def test_lexer_colours_command_words():
    lexer = StalkLexer()
    line = lexer.lex_document(Document("use emails"))(0)
    assert line[0] == ("class:command", "use") and line[-1] == ("class:tube", "emails")
    assert lexer.lex_document(Document("frob"))(0)[0][0] == "class:unknown"
    assert lexer.lex_document(Document("\\wire"))(0)[0][0] == "class:meta-command"
    assert lexer.lex_document(Document("put 1 2 3"))(0)[2] == ("class:number", "1")


# --------------------------------------------------------------------------
# Input rules

def test_put_counts_the_body_bytes_from_the_next_lines():
    req = build_request("put\nhello\nworld\n", put_defaults=(10, 0, 30))
    assert req.wire() == b"put 10 0 30 11\r\nhello\nworld\r\n"
    req = build_request("put 1 2 3\nh\u00e9\n")
    assert req.wire() == "put 1 2 3 3\r\nh\u00e9\r\n".encode()
    assert not req.raw


def test_put_with_explicit_bytes_sends_exactly_what_was_typed():
    req = build_request("put 0 0 60 3\nabcdef")
    assert req.wire() == b"put 0 0 60 3\r\nabcdef\r\n"
    assert req.raw  # mismatch: the extra replies will be drained
    assert not build_request("put 0 0 60 3\nabc").raw


def test_put_from_a_file_and_from_the_editor(tmp_path):
    f = tmp_path / "b.bin"
    f.write_bytes(b"\x00\x01\r\n")
    assert build_request(f"put @{f}").wire() == b"put 2147483648 0 120 4\r\n\x00\x01\r\n\r\n"
    assert build_request(f"put 5 6 7 @{f}").line == b"put 5 6 7 4"
    req = build_request("put $EDITOR", editor=lambda initial: b"from editor")
    assert req.wire() == b"put 2147483648 0 120 11\r\nfrom editor\r\n"
    with pytest.raises(InputError, match="cannot read"):
        build_request(f"put @{tmp_path}/missing")


def test_raw_lines_are_sent_unchecked_with_escapes():
    req = build_request("!frob 1 2")
    assert req.raw and req.wire() == b"frob 1 2\r\n"
    assert build_request("!put 0 0 60 3\\r\\nabc").wire() == b"put 0 0 60 3\r\nabc\r\n"
    assert build_request("!stats\\c").wire() == b"stats"
    assert build_request("\\raw use x ").wire() == b"use x \r\n"
    assert decode_escapes("a\\x00\\x41\\\\\\t") == b"a\x00A\\\t"


def test_enter_continues_a_put_body():
    assert needs_more_input("put")
    assert needs_more_input("put 1 2 3")
    assert needs_more_input("put\nline one")
    assert not needs_more_input("put\nline one\n")
    assert needs_more_input("put 0 0 60 5\nabc")
    assert not needs_more_input("put 0 0 60 5\nabcde")
    assert not needs_more_input("put @file")
    assert not needs_more_input("put 1 2")  # malformed: let the validator explain
    assert not needs_more_input("stats")
    assert needs_more_input("!put 0 0 1 1")


def test_script_reader_reads_bodies():
    data = (b"use t\n# comment\n\nput\nline 1\nline 2\n\n"
            b"put 0 0 60 4\r\na\nb\n\r\npeek-ready\nput 1 2 3\nlast")
    entries = list(ScriptReader(io.BytesIO(data)))
    assert entries == [
        (1, "use t", None),
        (4, "put", b"line 1\nline 2"),
        (8, "put 0 0 60 4", b"a\nb\n"),
        (12, "peek-ready", None),
        (13, "put 1 2 3", b"last"),
    ]


def test_meta_commands_are_recognised():
    req = build_request("\\wire on")
    assert req.meta and req.name == "\\wire" and req.text == "on"
    assert build_request("?").name == "help"
    assert build_request("\\q").name == "exit"


# --------------------------------------------------------------------------
# Renderers

def test_binary_bodies_are_escaped_with_their_length():
    frags = render_body(b"\x00\xff\x1b[31mred\n")
    text = plain(frags)
    assert "(11 bytes, binary, escaped)" in text
    assert "\\x00\\xff\\x1b[31mred\\n" in text
    assert "\x1b" not in text


def test_text_bodies_have_control_characters_escaped():
    kind, _ = classify_body("caf\u00e9 \x1b]0;title\x07 ok".encode())
    assert kind == "text"
    text = plain(render_body("caf\u00e9 \x1b]0;title\x07 ok".encode()))
    assert "\x1b" not in text and "\\x1b" in text and "caf\u00e9" in text
    assert escape_text("a\u202eb") == "a\\u202eb"


def test_json_bodies_are_pretty_printed():
    frags = render_body(b'{"to":"a@b","n":[1,2],"ok":true}')
    text = plain(frags)
    assert "(32 bytes, JSON)" in text
    assert '  "to": "a@b",' in text
    assert ("class:json.key", '"to"') in frags
    assert plain(render_body(b'{"a":1}', pretty_json=False)).endswith('{"a":1}\n')
    assert "(empty body)" in plain(render_body(b""))


def test_long_bodies_are_cut():
    text = plain(render_body(b"x" * 100, limit=10))
    assert "x" * 10 + "\n" in text and "90 more bytes" in text


def test_stats_are_an_aligned_table():
    body = b'---\nname: "emails"\ncurrent-jobs-ready: 12\ntotal-jobs: 3\ndraining: false\n'
    text = plain(render_reply(reply("stats-tube", b"OK %d" % len(body), body)))
    lines = text.splitlines()
    assert lines[0] == "OK %d" % len(body)
    assert lines[1:] == [
        "name                emails",
        "current-jobs-ready  12",
        "total-jobs          3",  # one column, one alignment: numbers and words alike
        "draining            false",
    ]
    assert "(empty)" in plain(render_table({}))


def test_lists_mark_the_used_and_watched_tubes():
    text = plain(render_reply(reply("list-tubes", b"OK 18", b"---\n- default\n- a\n"), use="a",
                              watch=["default"]))
    assert "- default  (watching)" in text and "- a  (using)" in text


def test_error_replies_are_explained():
    text = plain(render_reply(reply("put", b"JOB_TOO_BIG")))
    assert "JOB_TOO_BIG  (the body is larger" in text
    assert "out of memory" in plain(render_reply(reply("put", b"BURIED 5")))
    assert "meaning" not in plain(render_reply(reply("bury", b"BURIED")))
    assert render_reply(reply("bury", b"BURIED"))[0][0] == "class:reply.ok"
    assert render_reply(reply("put", b"BURIED 5"))[0][0] == "class:reply.error"


def test_success_depends_on_the_command():
    assert reply("bury", b"BURIED").ok
    assert not reply("put", b"BURIED 4").ok
    assert reply("kick", b"KICKED 3").ok
    assert not reply("reserve", b"TIMED_OUT").ok
    assert reply(None, b"WHATEVER").ok
    assert not reply(None, b"NOT_FOUND").ok


def test_machine_readable_forms():
    found = reply("peek", b"FOUND 3 2", b"\xff\x00")
    data = reply_data(found)
    assert data["id"] == 3 and data["body_base64"] == "/wA=" and data["ok"]
    assert json.loads(json.dumps(data))
    assert reply_data(reply("peek", b"FOUND 3 2", b"hi"))["body"] == "hi"
    assert reply_data(reply("list-tubes", b"OK 12", b"---\n- a\n- b\n"))["tubes"] == ["a", "b"]
    assert reply_data(reply("stats-job", b"OK 10", b"---\nid: 3\n"))["stats"] == {"id": 3}
    assert raw_bytes(found) == b"FOUND 3 2\n\xff\x00\n"
    assert raw_bytes(found, body_only=True) == b"\xff\x00"
    assert raw_bytes(reply("stats", b"OK 8", b"---\na: 1")) == b"---\na: 1\n"
    assert raw_bytes(reply("delete", b"DELETED")) == b"DELETED\n"
    # --raw: exactly the bytes the server sent
    assert raw_bytes(found, exact=True) == b"FOUND 3 2\r\n\xff\x00\r\n"
    assert raw_bytes(reply("stats", b"OK 8", b"---\na: 1"), exact=True) == b"OK 8\r\n---\na: 1\r\n"
    assert raw_bytes(reply("delete", b"DELETED"), exact=True) == b"DELETED\r\n"
    assert raw_bytes(found, body_only=True, exact=True) == b"\xff\x00"


# --------------------------------------------------------------------------
# Addresses

@pytest.mark.parametrize("text,expected", [
    ("127.0.0.1:11301", Target("tcp", "127.0.0.1", 11301)),
    ("example.org", Target("tcp", "example.org", 11300)),
    (":11400", Target("tcp", "127.0.0.1", 11400)),
    ("[::1]:11302", Target("tcp", "::1", 11302)),
    ("tcp://h:1", Target("tcp", "h", 1)),
    ("tcp:h:2", Target("tcp", "h", 2)),
    ("unix:/run/b.sock", Target("unix", path="/run/b.sock")),
    ("unix:///run/b.sock", Target("unix", path="/run/b.sock")),
    ("tls://h:3", Target("tls", "h", 3)),
])
def test_parse_target(text, expected):
    assert parse_target(text) == expected


def test_parse_target_rejects_nonsense():
    for bad in ("h:port", "h:0", "::1", "", "unix:"):
        with pytest.raises(ValueError):
            parse_target(bad)
    assert str(Target("tcp", "::1", 5)) == "[::1]:5"
    assert str(Target("unix", path="/s")) == "unix:/s"


def test_help_groups_every_stock_command_once():
    from twisted_stalk_cli.shell.help import GROUPS
    grouped = [name for _, names in GROUPS for name in names]
    assert sorted(grouped) == sorted(c.name for c in COMMANDS)


def test_request_bytes_are_encoded_from_the_table():
    assert build_request("release 5 10 0").wire() == b"release 5 10 0\r\n"
    assert build_request("put 1 0 60\nhi\n").wire() == b"put 1 0 60 2\r\nhi\r\n"
    assert build_request("flush-tube emails").wire() == b"flush-tube emails\r\n"
    raw = build_request("!put 1 0 60 5\\r\\nabc")   # raw bytes are sent as typed
    assert raw.raw and raw.wire() == b"put 1 0 60 5\r\nabc\r\n"


# --------------------------------------------------------------------------
# Fitting the window: prompt, continuation prefixes, toolbar

def test_prompt_is_shortened_to_fit_the_window():
    from twisted_stalk_cli.shell.fit import fit_prompt, prompt_budget, prompt_variants, width_of
    full = prompt_variants("127.0.0.1:11300", "default", ["default"], True)
    assert plain(fit_prompt(full, 80)) == "stalk 127.0.0.1:11300 [use=default watch=default]> "
    many = prompt_variants("127.0.0.1:11300", "default",
                           ["default", "aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc"], True)
    assert plain(fit_prompt(many, 80)) == "stalk 127.0.0.1:11300 [use=default watch=default+3]> "
    assert "cccccccccc" in plain(fit_prompt(many, 140))
    long = prompt_variants("127.0.0.1:11300", "t" * 200, ["t" * 200], True)
    for columns in (20, 40, 80, 140, 300):
        for variants in (full, many, long):
            assert width_of(fit_prompt(variants, columns)) <= prompt_budget(columns) < columns
    assert plain(fit_prompt(long, 80)) == "[use=tttttt…ttttt watch=tttttt…ttttt]> "
    assert plain(fit_prompt(long, 140)) == ("127.0.0.1:11300 [use=tttttttttttt…ttttttttttt "
                                            "watch=tttttttttttt…ttttttttttt]> ")
    down = prompt_variants("127.0.0.1:11300", "default", ["default"], False)
    assert plain(fit_prompt(down, 140)) == "stalk 127.0.0.1:11300 (disconnected: Enter retries)> "
    assert "disconnected" in plain(fit_prompt(down, 40))


def test_continuation_prefixes_never_exceed_the_window():
    from twisted_stalk_cli.shell.fit import continuation
    # aligned under a prompt that takes at most half the window
    assert plain(continuation(52, 140, 1, 0)) == " " * 46 + "body> "
    assert plain(continuation(52, 140, 1, 1)) == " " * 52  # the wrapped part of a body line
    assert plain(continuation(52, 140, 0, 1)) == " " * 52  # the wrapped part of the command
    # after a longer prompt: a short prefix, the rest of the width for the text
    assert plain(continuation(52, 80, 1, 0)) == "body> "
    assert plain(continuation(52, 80, 1, 2)) == " " * 6
    for columns in (4, 10, 80):
        assert len(plain(continuation(200, columns, 3, 0))) <= columns // 2


def test_toolbar_fits_the_window():
    from twisted_stalk_cli.shell.fit import cut, pick, width_of
    from twisted_stalk_cli.shell.ui import KEY_HINTS
    assert plain(syntax_help("", (), 200)).strip().endswith("Ctrl-D: quit")
    narrow = plain(syntax_help("", (), 60))
    assert len(narrow) < 60 and "help [cmd]" in narrow and "Ctrl-D: quit" in narrow
    assert "\\wire" not in narrow  # dropped first
    assert pick(KEY_HINTS, 5) == ""
    line = syntax_help("reserve-with-timeout ", ())
    assert width_of(cut(line, 40)) == 40 and plain(cut(line, 40)).endswith("…")
    assert cut(line, 500) == line


# --------------------------------------------------------------------------
# What the server makes of the bytes sent

def test_framing_counts_the_commands_the_bytes_complete():
    from twisted_stalk.protocol.framing import Sent, ServerFraming
    f = ServerFraming()
    assert f.feed(b"use fo") == [] and f.waiting and "'use fo'" in f.describe()
    assert f.feed(b"o\r\nstats\r\n") == [Sent("use"), Sent("stats")] and not f.waiting
    assert f.feed(b"put 0 0 60 8\r\nhi\r\n") == []
    assert f.describe() == ("the server waits for 6 more bytes of a put body "
                            "(8 announced, plus CRLF; 4 sent)")
    assert f.short() == "6 more put body bytes"
    assert f.feed(b"abcd\r\n") == [Sent("put")] and f.describe() == ""
    # a body longer than its count: the rest is read as a command
    assert f.feed(b"put 0 0 60 2\r\nhello\r\n") == [Sent("put"), Sent(None)]
    # a reserve that parses may wait; one that does not is answered at once
    assert f.feed(b"reserve\r\nreservex\r\nreserve-with-timeout 5\r\n") == [
        Sent("reserve", True), Sent("reserve"), Sent("reserve-with-timeout", True)]
    # a bad put line is answered at once, and its body is read as commands
    assert f.feed(b"put 0 0 60 2 x\r\nhi\r\n") == [Sent("put"), Sent(None)]
    assert f.feed(b"list-jobs a ready 1\r\n\r\n") == [Sent("list-jobs"), Sent(None)]
    # an over-long line is answered once its CRLF comes
    assert f.feed(b"x" * 300) == [] and "discarding" in f.describe()
    assert f.feed(b"\r") == [] and f.feed(b"\nstats\r\n") == [Sent(None), Sent("stats")]
    assert f.feed(b"quit\r\n") == [] and f.closing
    f.reset()
    assert not f.waiting and not f.closing


def test_validator_refuses_commands_while_the_server_waits():
    validator = StalkValidator(waiting=lambda: "6 more put body bytes")
    with pytest.raises(ValidationError) as e:
        validator.validate(Document("stats", 5))
    assert e.value.message == ("the server waits for 6 more put body bytes and would read this "
                               "command as part of it: send the rest with !, or \\reconnect")
    for text in ("!abcd", "\\raw abcd", "\\reconnect", "help"):
        validator.validate(Document(text, len(text)))


# --------------------------------------------------------------------------
# The pager

def test_pager_setting(monkeypatch):
    from twisted_stalk_cli.shell.pager import Pager
    monkeypatch.delenv("PAGER", raising=False)
    monkeypatch.delenv("LESS", raising=False)
    for off in ("off", "no", "OFF"):
        assert Pager.from_setting(off) is None
    assert Pager.from_setting("no-such-pager-program -x") is None
    monkeypatch.setenv("PAGER", "cat -v")
    assert Pager.from_setting("").command == ["cat", "-v"]
    assert Pager.from_setting("more").command == ["more"]
    less = Pager(["less"])
    assert less.env["LESS"] == "-SRXF"  # plain less gets pgcli's flags


def test_pager_runs_for_output_taller_than_the_window(tmp_path):
    from prompt_toolkit.data_structures import Size
    from twisted_stalk_cli.shell.pager import Pager, rows
    from twisted_stalk_cli.shell.ui import STYLE
    assert rows("a\n" + "b" * 25 + "\n", 10) == 1 + 3
    pager = Pager(["sh", "-c", f"cat > {tmp_path / 'paged'}"])
    short = [("class:reply.ok", "OK\n")]
    tall = [("class:table.key", "key"), ("", " value\n")] * 30
    assert not pager.wanted(short, Size(rows=24, columns=80))
    assert pager.wanted(tall, Size(rows=24, columns=80))
    assert not pager.wanted(tall, Size(rows=40, columns=80), spare=3)
    assert pager.show(tall, STYLE, Size(rows=24, columns=80))
    paged = (tmp_path / "paged").read_text()
    assert paged.count("value") == 30 and "\x1b[" in paged  # coloured, for less -R
    assert pager.show(tall, None, Size(rows=24, columns=80))
    assert "\x1b[" not in (tmp_path / "paged").read_text()
    assert not Pager(["/nonexistent/pager"]).show(tall, None, Size(rows=24, columns=80))


def test_one_rule_for_the_final_newline_of_bodies(tmp_path):
    from twisted_stalk_cli.shell.request import drop_final_newline
    assert drop_final_newline(b"hi\n") == b"hi"
    assert drop_final_newline(b"hi\r\n") == b"hi"
    assert drop_final_newline(b"hi\n\n") == b"hi\n"
    assert drop_final_newline(b"hi") == b"hi" and drop_final_newline(b"") == b""
    assert drop_final_newline(b"\x00bin\n") == b"\x00bin\n"  # binary: never changed
    assert drop_final_newline(b"\xff\n") == b"\xff\n"
    f = tmp_path / "t.txt"
    f.write_bytes(b"from a file\n")
    assert build_request(f"put @{f}").body == b"from a file"
    assert build_request("put $EDITOR", editor=lambda _: b"edited\r\n").body == b"edited"


def test_split_words_ends_the_first_line_at_a_space():
    from twisted_stalk_cli.shell.fit import split_words
    assert split_words("short enough", 20) == ("short enough", "")
    assert split_words("one two three four", 10) == ("one two", "three four")
    assert split_words("abcdefghijkl mn", 5) == ("abcde", "fghijkl mn")  # no space: cut
    assert split_words("anything at all", 0) == ("anything at all", "")


def test_a_cut_body_says_how_much_is_left_in_the_right_number():
    assert "... 1 more byte not shown\n" in plain(render_body(b"abcdef", limit=5))  # was "1 more bytes"
    assert "... 2 more bytes not shown\n" in plain(render_body(b"abcdefg", limit=5))
    assert plain(render_body(b"x")).startswith("(1 byte, text)")
