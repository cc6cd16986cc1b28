"""``stalk`` and the extension verbs: flush and move use flush-tube / list-jobs
when the server advertises them (``capabilities``) and peek job by job when it
does not; the shell sends the verbs interactively, with help and completion,
only when advertised; ``--cert``/``--key`` for mutual TLS."""
import io
import json
import os
import subprocess
import sys

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from servers import REFERENCE, start_server
from test_shell_cli import Probe as CliProbe
from test_shell_units import reply
from twisted_stalk_cli.shell.conn import Connection
from twisted_stalk_cli.shell.help import help_text
from twisted_stalk_cli.shell.output import Output
from twisted_stalk_cli.shell.render import plain, render_reply, reply_data
from twisted_stalk_cli.shell.repl import Shell
from twisted_stalk_cli.shell.request import InputError, build_request, hint_for
from twisted_stalk_cli.shell.target import Target, parse_target
from twisted_stalk_cli.shell.tools import TOOLS
from twisted_stalk_cli.shell.tracked import TrackedConnection
from twisted_stalk_cli.shell.ui import Known, StalkCompleter, StalkValidator, syntax_help

KINDS = ["extended", "ours"] + (["reference"] if REFERENCE else [])
STALK = [sys.executable, "-m", "twisted_stalk_cli.shell"]


@pytest.fixture(scope="module")
def servers():
    running = {}
    yield running
    for server in running.values():
        server.stop()


@pytest.fixture(params=KINDS)
def server(request, servers):
    """Our server with --extensions, without, and beanstalkd; one process of
    each per module (each test uses its own tubes)."""
    kind = request.param
    if kind not in servers:
        servers[kind] = (start_server("ours", "--extensions") if kind == "extended"
                         else start_server(kind))
    server = servers[kind]
    server.extended = kind == "extended"
    return server


_tubes = iter(range(10**6))


def fresh(name):
    return f"{name}-{os.getpid()}-{next(_tubes)}"


class Probe(CliProbe):
    """The CLI tests' probe, plus helpers to fill a tube."""

    def put(self, tube, body, pri=1024, delay=0, ttr=60):
        self(f"use {tube}")
        reply = self(f"put {pri} {delay} {ttr} {len(body)}", body.encode())
        assert reply.word == "INSERTED", reply
        return reply.job_id

    def fill(self, tube):
        """3 ready, 1 delayed, 1 buried, and 1 reserved by this probe."""
        ready = [self.put(tube, f"r{i}", pri=10 + i) for i in range(3)]
        delayed = self.put(tube, "d", delay=300)
        buried = self.put(tube, "b", pri=3)
        assert self(f"reserve-job {buried}").word == "RESERVED"
        assert self(f"bury {buried} 3").word == "BURIED"
        held = self.put(tube, "held")
        assert self(f"reserve-job {held}").word == "RESERVED"
        return ready, delayed, buried, held


def run_tool(server, name, *argv):
    """A tool in-process, recording the bytes it sends."""
    conn = Connection(parse_target(f"127.0.0.1:{server.port}"), reply_timeout=5)
    sent = []
    conn.wire = lambda direction, data: sent.append(data) if direction == "send" else None
    conn.connect()
    out = Output("json", stream=io.StringIO(), err=io.StringIO(), color=False)
    try:
        status = TOOLS[name](conn, list(argv), out)
    finally:
        conn.close()
    return status, out.err.getvalue(), out.stream.getvalue(), b"".join(sent)


# ------------------------------------------------------------------ tools

def test_flush_uses_flush_tube_when_advertised(server):
    q = Probe(server)
    tube = fresh("flush")
    ready, delayed, buried, held = q.fill(tube)
    status, err, stdout, sent = run_tool(server, "flush", tube, "--yes")
    assert status == 0, err
    assert "deleted 3 ready, 1 delayed, 1 buried" in err
    assert json.loads(stdout) == {"tube": tube, "deleted": {"ready": 3, "delayed": 1, "buried": 1}}
    assert b"capabilities\r\n" in sent
    if server.extended:
        assert "with flush-tube" in err
        assert b"flush-tube %s ready\r\n" % tube.encode() in sent
        assert b"peek-" not in sent and b"delete " not in sent
    else:
        assert b"flush-tube" not in sent and b"peek-ready\r\n" in sent
    st = q.stats(f"stats-tube {tube}")
    assert (st["current-jobs-ready"], st["current-jobs-delayed"], st["current-jobs-buried"],
            st["current-jobs-reserved"]) == (0, 0, 0, 1)
    assert q(f"delete {held}").word == "DELETED"   # the reserved job was left alone


def test_flush_of_one_state_and_a_tube_that_goes_away(server):
    q = Probe(server)
    tube = fresh("gone")
    q.put(tube, "only ready")
    q("use default")   # nobody uses the tube: empty, it disappears
    status, err, _, _ = run_tool(server, "flush", tube, "--state", "ready,buried", "--yes")
    assert status == 0 and "deleted 1 ready, 0 buried" in err, err


def test_move_uses_list_jobs_when_advertised(server, tmp_path):
    q = Probe(server)
    src, dst = fresh("src"), fresh("dst")
    ready, delayed, buried, held = q.fill(src)
    status, err, stdout, sent = run_tool(server, "move", src, dst, "--yes", "--journal",
                                         str(tmp_path / "journal"))
    assert status == 0, err
    assert "moved 3 ready, 1 delayed, 1 buried" in err
    if server.extended:
        assert b"list-jobs %s ready 3\r\n" % src.encode() in sent
        assert b"peek-" not in sent   # no bodies fetched twice
    else:
        assert b"list-jobs" not in sent and b"peek-ready\r\n" in sent
    st = q.stats(f"stats-tube {dst}")
    assert (st["current-jobs-ready"], st["current-jobs-delayed"], st["current-jobs-buried"]) == (3, 1, 1)
    q(f"use {dst}")
    moved = q("peek-buried")
    assert moved.body == b"b" and q.stats(f"stats-job {moved.job_id}")["pri"] == 3
    assert q(f"delete {held}").word == "DELETED"


def test_move_with_max_stops_in_the_middle_of_a_list(server, tmp_path):
    q = Probe(server)
    src, dst = fresh("msrc"), fresh("mdst")
    for i in range(4):
        q.put(src, f"j{i}")
    status, err, _, sent = run_tool(server, "move", src, dst, "--yes", "--max", "2",
                                    "--journal", str(tmp_path / "journal"))
    assert status == 0 and "moved 2 ready" in err, err
    if server.extended:
        assert b"list-jobs %s ready 2\r\n" % src.encode() in sent
    assert q.stats(f"stats-tube {src}")["current-jobs-ready"] == 2
    assert q.stats(f"stats-tube {dst}")["current-jobs-ready"] == 2


# ------------------------------------------------------------------ the REPL

class Recorder:
    def __init__(self):
        self.chunks = []

    def __call__(self, fragments):
        self.chunks.append(plain(fragments))

    @property
    def text(self):
        return "".join(self.chunks)


def shell_for(server, inp):
    out = Recorder()
    session = TrackedConnection(parse_target(f"127.0.0.1:{server.port}"), reply_timeout=5)
    shell = Shell(session, input=inp, output=DummyOutput(), write=out, history=InMemoryHistory())
    return shell, out


def completions(shell, text):
    completer = shell.prompt.completer
    doc = Document(text, len(text))
    return [c.text for c in completer.get_completions(doc, CompleteEvent(completion_requested=True))]


def test_repl_sends_the_verbs_when_advertised(server):
    q = Probe(server)
    tube = fresh("repl")
    ready, delayed, buried, held = q.fill(tube)
    with create_pipe_input() as inp:
        shell, out = shell_for(server, inp)
        shell.set_wire(True)
        assert shell.ensure_connected()
        assert ">> capabilities" not in out.text     # asked quietly on connect
        caps = shell.session.capabilities
        if server.extended:
            assert caps == {"list-jobs", "flush-tube", "capabilities"}
        else:
            assert caps == frozenset()
        shell.set_wire(False)
        shell.handle("capabilities")                  # always allowed: it is how to ask
        if server.extended:
            assert "OK 44\n- list-jobs\n- flush-tube\n- capabilities\n" in out.text
        else:
            assert "UNKNOWN_COMMAND  (this server does not serve this extension verb" in out.text
        before = len(out.chunks)
        shell.handle(f"list-jobs {tube} ready 10")
        shell.handle(f"flush-tube {tube} delayed")
        text = "".join(out.chunks[before:])
        if server.extended:
            assert "- %d\n- %d\n- %d\n" % tuple(ready) in text
            assert "FLUSHED 1\n" in text
            assert list(shell.known.jobs)[:3] == ready   # learned for completion
            assert completions(shell, "fl") == ["flush-tube", "flush"]  # (flush: the tool)
            assert completions(shell, f"list-jobs {tube} re") == ["ready", "reserved"]
            completions(shell, "flush-tube ")          # starts a lookup in the background
            shell.lookup.wait(5)
            assert tube in completions(shell, "flush-tube ")
            assert "Extension commands (this server serves them):" in plain(help_text("", caps))
            assert "this server serves it" in plain(help_text("flush-tube", caps))
            assert plain(syntax_help("flush-tube x ", caps)).startswith(" flush-tube <tube> [state]")
        else:
            assert "does not advertise (see capabilities)" in text   # nothing sent
            assert q.stats(f"stats-tube {tube}")["current-jobs-delayed"] == 1
            assert completions(shell, "fl") == ["flush"] and completions(shell, "flush-tube x ") == []
            assert "Extension commands" not in plain(help_text("", caps))
            assert "does not advertise it" in plain(help_text("flush-tube", caps))
            shell.handle(f"!flush-tube {tube}")      # raw lines are still sent
            assert out.chunks[-1].startswith("UNKNOWN_COMMAND")
        shell.session.conn.close()
    q(f"delete {held}")


def test_extension_input_rules():
    caps = frozenset(["list-jobs", "flush-tube", "capabilities"])
    req = build_request("flush-tube emails", extensions=caps)
    assert req.line == b"flush-tube emails" and not req.blocks
    assert build_request("list-jobs emails buried 5", extensions=caps).line == b"list-jobs emails buried 5"
    assert build_request("flush-tube emails")  # command-line mode: the server decides
    for text, fragment in (("flush-tube", "takes 1 or 2"), ("flush-tube -x", "<tube>"),
                           ("list-jobs a all 5", "one of ready"), ("capabilities now", "takes no arguments"),
                           ("list-jobs a ready -1", "whole number"),
                           ("flush-tube a\nbody", "does not take a body")):
        with pytest.raises(InputError, match=fragment):
            build_request(text, extensions=caps)
    with pytest.raises(InputError, match="does not advertise"):
        build_request("list-jobs a ready 1", extensions=frozenset())
    assert hint_for("flush-tube ") == "<tube> [state]"
    validator = StalkValidator(lambda: ())
    with pytest.raises(Exception, match="does not advertise"):
        validator.validate(Document("flush-tube a"))
    StalkValidator(lambda: caps).validate(Document("flush-tube a"))
    completer = StalkCompleter(Known(), extensions=lambda: caps)
    got = [c.text for c in completer.get_completions(Document("help fl"), CompleteEvent())]
    assert got == ["flush-tube", "flush"]  # (flush: the tool, a shell command)
    # replies: FLUSHED is success only for flush-tube; machine-readable forms
    assert reply("flush-tube", b"FLUSHED 4").ok and not reply("put", b"FLUSHED 4").ok
    assert reply_data(reply("flush-tube", b"FLUSHED 4"))["count"] == 4
    assert reply_data(reply("list-jobs", b"OK 12", b"---\n- 7\n- 9\n"))["ids"] == [7, 9]
    assert "(not a reply" in plain(render_reply(reply("flush-tube", b"DELETED")))


def test_command_line_mode_sends_the_verbs(servers, tmp_path):
    if "extended" not in servers:
        servers["extended"] = start_server("ours", "--extensions")
    server = servers["extended"]
    q = Probe(server)
    tube = fresh("cli")
    ids = [q.put(tube, "x"), q.put(tube, "y")]
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path),
               XDG_STATE_HOME=str(tmp_path))
    env.pop("STALK_ADDRESS", None)
    env.pop("STALK_CONFIG", None)
    p = subprocess.run(STALK + ["-a", f"127.0.0.1:{server.port}", "--json", "list-jobs", tube,
                                "ready", "5"], capture_output=True, env=env, timeout=20)
    assert p.returncode == 0 and json.loads(p.stdout)["ids"] == ids, p.stderr
    p = subprocess.run(STALK + ["-a", f"127.0.0.1:{server.port}", "list-jobs", tube, "all", "5"],
                       capture_output=True, env=env, timeout=20)
    assert p.returncode == 2 and b"one of ready" in p.stderr


# ------------------------------------------------------------------ mutual TLS

@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    helpers = pytest.importorskip("test_ops_helpers")
    if helpers.x509 is None:
        pytest.skip("cryptography is needed to make certificates")
    pytest.importorskip("OpenSSL")
    return helpers.make_pki(str(tmp_path_factory.mktemp("pki")))


def test_cert_and_key_for_mutual_tls(pki, tmp_path):
    from test_ops_helpers import start_stalkd
    server = start_stalkd(tmp_path, "--tls-cert", pki.server_cert, "--tls-key", pki.server_key,
                          "--tls-ca", pki.ca, "--extensions")
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path),
               XDG_STATE_HOME=str(tmp_path))
    env.pop("STALK_ADDRESS", None)
    env.pop("STALK_CONFIG", None)
    url = ["--url", f"tls:localhost:{server.port}", "--cafile", pki.ca]

    def stalk(*args):
        p = subprocess.run(STALK + list(args), capture_output=True, env=env, timeout=20)
        assert b"Traceback" not in p.stderr, p.stderr
        return p

    try:
        p = stalk(*url, "--cert", pki.client_cert, "--key", pki.client_key, "stats-tube", "default")
        assert p.returncode == 0 and b"name: " in p.stdout, p.stderr
        p = stalk(*url, "--cert", pki.client_cert, "--key", pki.client_key, "capabilities")
        assert p.returncode == 0 and b"- flush-tube" in p.stdout
        assert stalk(*url, "stats").returncode == 3                  # no certificate
        assert stalk(*url, "--cert", pki.rogue_cert, "--key", pki.rogue_key,
                     "stats").returncode == 3                        # an untrusted one
        p = stalk("-a", f"127.0.0.1:{server.port}", "--cert", pki.client_cert, "stats")
        assert p.returncode == 2 and b"--url tls:" in p.stderr
        p = stalk(*url, "--key", pki.client_key, "stats")
        assert p.returncode == 2 and b"--key needs --cert" in p.stderr
        p = stalk(*url, "--cert", str(tmp_path / "missing.pem"), "stats")
        assert p.returncode == 2 and b"no such certificate file" in p.stderr
        # in the shell: \connect to another tls: address keeps the certificate
        target = Target("tls", "localhost", server.port, cafile=pki.ca,
                        cert=pki.client_cert, key=pki.client_key)
        with create_pipe_input() as inp:
            out = Recorder()
            shell = Shell(TrackedConnection(target, reply_timeout=5), input=inp, output=DummyOutput(),
                          write=out, history=InMemoryHistory())
            assert shell.ensure_connected()
            assert shell.session.capabilities == {"list-jobs", "flush-tube", "capabilities"}
            shell.handle(f"\\connect tls:127.0.0.1:{server.port}")
            assert f"connected to tls:127.0.0.1:{server.port}" in out.text, out.text
            assert shell.session.target.cert == pki.client_cert
            shell.handle("list-tube-used")
            assert out.chunks[-1] == "USING default\n"
            shell.session.conn.close()
    finally:
        server.stop()
