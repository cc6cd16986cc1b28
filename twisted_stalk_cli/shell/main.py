# -*- test-case-name: tests.test_shell_cli -*-
"""``stalk``'s entry point: options, configuration, and which mode to run.

::

    stalk [-a HOST:PORT | --url tcp:...|unix:...|tls:...]      interactive shell
          [--cafile CA] [--cert FILE --key FILE]                 (TLS, mutual TLS)
    stalk [options] COMMAND [ARGS...]                           one protocol command
    stalk [options] -            (or a pipe on stdin)           commands from stdin
    stalk [options] top|tail|put|flush|move|kick|stats ...      tools

Exit status: 0 success, 1 an error reply (NOT_FOUND, TIMED_OUT ...),
2 bad usage or a malformed command, 3 the server could not be reached or the
connection broke, 130 interrupted (:mod:`.errors`).  See docs/shell.md.
"""
from __future__ import annotations

import argparse
import configparser
import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from .errors import EXIT_CONNECTION, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, UsageError

__version__ = "0.1.0"

EPILOG = """\
commands: any beanstalk command as on the wire (stalk peek-ready, stalk stats-tube emails),
          help [COMMAND], or a tool:
  top [TUBE...]            live per-tube table (counts, waiting workers, put/delete rates)
  tail TUBE                show jobs as they arrive, without reserving them
  put [BODY...]            put a job (--tube --pri --delay --ttr; -f FILE; --lines; stdin)
  flush TUBE               delete ready/delayed/buried jobs (--state, --yes, --dry-run);
                           one flush-tube per state when the server serves it
  move FROM TO             move jobs safely (--state, --yes, --dry-run, --max; resumable);
                           finds them with list-jobs when the server serves it
  kick TUBE [N]            kick buried (or delayed) jobs back to ready
  stats [TUBE]             server or tube statistics
run "stalk TOOL --help" for a tool's options.

exit status: 0 ok, 1 error reply, 2 bad usage/command, 3 connection failure, 130 interrupted.
config: $XDG_CONFIG_HOME/stalk/config (see docs/shell.md); history: $XDG_DATA_HOME/stalk/history.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="stalk", description="An interactive shell and command-line toolkit "
                "for beanstalkd-compatible work-queue servers.",
                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-a", "--address", help="server as HOST:PORT (default 127.0.0.1:11300, "
                   "or $STALK_ADDRESS, or the config file)")
    p.add_argument("--url", help="server as tcp:HOST:PORT, unix:PATH or tls:HOST:PORT")
    p.add_argument("--servers", metavar="A,B,...", help="several servers (HOST:PORT,...): top "
                   "shows each and the sums; stats and read-only commands run on each")
    p.add_argument("--insecure", action="store_true", help="tls: do not verify the certificate")
    p.add_argument("--cafile", help="tls: CA bundle to verify the server with")
    p.add_argument("--cert", metavar="FILE", help="tls: client certificate (PEM) for servers "
                   "that require one (mutual TLS); may also hold the key")
    p.add_argument("--key", metavar="FILE", help="tls: the client certificate's private key (PEM)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", dest="fmt", action="store_const", const="json",
                     help="print replies as JSON (one object per line)")
    fmt.add_argument("--yaml", dest="fmt", action="store_const", const="yaml", help="print replies as YAML")
    fmt.add_argument("--raw", dest="fmt", action="store_const", const="raw",
                     help="print replies exactly as the server sent them, CRLF and all (into a "
                     "pipe the default is the reply line, then the data block, LF line ends)")
    fmt.add_argument("--pretty", dest="fmt", action="store_const", const="pretty",
                     help="print replies for people (the default on a terminal)")
    p.add_argument("-b", "--body", action="store_true", help="print only job bodies, byte for byte")
    p.add_argument("-t", "--tube", help="use and watch TUBE (only it) before the command")
    p.add_argument("-r", "--repeat", type=int, default=1, metavar="N",
                   help="run the command N times (0: until Ctrl-C)")
    p.add_argument("-i", "--interval", type=float, default=1.0, metavar="SECONDS",
                   help="seconds between repeats (default 1)")
    p.add_argument("-k", "--keep-going", action="store_true",
                   help="with commands from stdin: do not stop at the first error")
    p.add_argument("--wire", action="store_true", help="show the bytes sent and received (on stderr "
                   "in command-line mode)")
    p.add_argument("--vi", action="store_true", help="vi key bindings in the shell")
    p.add_argument("--history", metavar="FILE", help="history file (default $XDG_DATA_HOME/stalk/history; "
                   "'off' for none)")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="connect and reply timeout (default 5 and 30)")
    p.add_argument("--no-color", action="store_true", help="no colours")
    p.add_argument("--no-pager", action="store_true", help="never page output taller than the "
                   "terminal (default: $PAGER or less -SRXF; the pager setting)")
    p.add_argument("-V", "--version", action="store_true", help="show the version")
    p.add_argument("command", nargs=argparse.REMAINDER, help="a protocol command, help, - or a tool")
    return p


# --------------------------------------------------------------------------
# Configuration

def load_config(path: Optional[str] = None) -> Dict[str, str]:
    """``[stalk]`` options from the config file (missing file: no options)."""
    from .paths import config_home
    path = path or os.environ.get("STALK_CONFIG") or os.path.join(config_home(), "config")
    cp = configparser.ConfigParser()
    try:
        cp.read(path, encoding="utf-8")
    except (configparser.Error, OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read config {path}: {e}")
    return dict(cp["stalk"]) if cp.has_section("stalk") else {}


def put_defaults(config: Dict[str, str]) -> Tuple[int, int, int]:
    from .request import DEFAULT_PUT
    out = []
    for key, default in zip(("put_pri", "put_delay", "put_ttr"), DEFAULT_PUT):
        value = config.get(key, str(default)).strip()
        if not value.isdigit():
            raise UsageError(f"config {key} must be a whole number, got {value!r}")
        out.append(int(value))
    return out[0], out[1], out[2]


# --------------------------------------------------------------------------
# Entry point

def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        status = _main(argv)
    except UsageError as e:
        sys.stderr.write(f"stalk: {e}\n(stalk --help for usage)\n")
        status = EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("stalk: interrupted\n")
        status = EXIT_INTERRUPTED
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        status = EXIT_OK
    except Exception as e:  # nothing ever shows a traceback
        if os.environ.get("STALK_DEBUG"):
            raise
        sys.stderr.write(f"stalk: internal error: {e.__class__.__name__}: {e}\n"
                         "(set STALK_DEBUG=1 for details)\n")
        status = 70
    return status


def _main(argv: List[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        print(f"stalk {__version__}")
        return EXIT_OK
    from .target import config_flag, resolve_target
    config = load_config()
    target = resolve_target(args, config)
    timeout = args.timeout
    connect_timeout = timeout or float(config.get("connect_timeout", 5))
    reply_timeout = timeout or float(config.get("reply_timeout", 30))
    command = args.command
    if command and command[0] == "--":
        command = command[1:]
    elif command and command[0] != "put":
        # output options are also accepted after the command: stalk stats --json
        for flag in ("--json", "--yaml", "--raw", "--pretty"):
            if flag in command[1:]:
                command = [c for c in command if c != flag]
                args.fmt = args.fmt or flag[2:]
    fmt = args.fmt or ("pretty" if sys.stdout.isatty() else "plain")
    color = not (args.no_color or os.environ.get("NO_COLOR") or config_flag(config.get("no_color", "no")))
    defaults = put_defaults(config)

    from .conn import Connection
    from .errors import ConnectionFailed, StalkError, ToolError
    from .output import Output
    from .run import run_one, run_script, select_tube, stderr_wire
    from .tools import TOOLS

    out = Output(fmt, body_only=args.body, color=color)
    if args.servers:
        from .servers import run_servers
        try:
            return run_servers(args, config, command, out, connect_timeout, reply_timeout)
        except ToolError as e:
            sys.stderr.write(f"stalk: {e}\n")
            return e.status
    if not command:
        if sys.stdin.isatty():
            return interactive(args, config, target, connect_timeout, reply_timeout, defaults)
        command = ["-"]
    one_reply = command[0] == "stats" or command[0] not in TOOLS and command[0] != "-"
    if one_reply and args.repeat == 1 and fmt == "pretty" and sys.stdout.isatty():
        out.pager = pager_for(args, config)  # one reply or help: paged if long
    if command[0] in ("help", "?"):
        from .help import help_text
        out.fragments(help_text(" ".join(command[1:]), width=out.size().columns))
        return EXIT_OK
    if command[0] != "-" and command[0] not in TOOLS:
        # Validate before connecting: a malformed command is explained locally.
        from .request import InputError, build_request
        try:
            build_request(" ".join(command), put_defaults=defaults, check_only=True)
        except InputError as e:
            raise UsageError(e.message)
    if command[0] in TOOLS and ({"-h", "--help"} & set(command[1:])):
        return TOOLS[command[0]](None, command[1:], out)  # prints the help, exits 0
    conn = Connection(target, connect_timeout=connect_timeout, reply_timeout=reply_timeout)
    if args.wire:
        conn.wire = stderr_wire
    try:
        conn.connect()
    except ConnectionFailed as e:
        sys.stderr.write(f"stalk: {e}\n")
        return EXIT_CONNECTION
    try:
        if args.tube:
            select_tube(conn, args.tube)
        if command[0] == "-":
            if command[1:]:
                raise UsageError("- takes no arguments: it reads commands from stdin")
            return run_script(conn, out, args.keep_going, defaults)
        if command[0] in TOOLS:
            return TOOLS[command[0]](conn, command[1:], out)
        return run_one(conn, out, command, args.repeat, args.interval, defaults)
    except ToolError as e:
        sys.stderr.write(f"stalk: {e}\n")
        return e.status
    except StalkError as e:
        sys.stderr.write(f"stalk: {e}\n")
        return EXIT_CONNECTION
    finally:
        conn.close()


def pager_for(args, config: Dict[str, str]):
    """The pager for long output (None: ``--no-pager``, ``pager = off``, or
    none installed)."""
    from .pager import Pager
    return None if args.no_pager else Pager.from_setting(config.get("pager", ""))


def interactive(args, config: Dict[str, str], target, connect_timeout: float,
                reply_timeout: float, defaults: Tuple[int, int, int]) -> int:
    from .repl import Shell, history_path, open_history
    from .target import config_flag
    from .tracked import TrackedConnection
    hist_setting = args.history or config.get("history", "")
    if hist_setting == "off":
        path = None
    else:
        path = os.path.expanduser(hist_setting) if hist_setting else history_path()
    history, warning = open_history(path)
    session = TrackedConnection(target, connect_timeout=connect_timeout, reply_timeout=reply_timeout)
    vi = args.vi or config.get("editing_mode", "emacs").strip().lower() == "vi"
    try:
        body_limit = int(config.get("body_limit", 16384))
    except ValueError:
        raise UsageError("config body_limit must be a whole number")
    shell = Shell(session, history=history, vi=vi, put_defaults=defaults,
                  pretty_json=config_flag(config.get("pretty_json", "yes")),
                  body_limit=body_limit, wire=args.wire or config_flag(config.get("wire", "no")),
                  pager=pager_for(args, config))
    if args.tube:
        shell.session.use = args.tube
        shell.session.watch = [args.tube]
    if warning:
        shell.warn(warning)
    return shell.run()
