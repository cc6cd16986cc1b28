"""The interactive shell: a prompt_toolkit REPL over one beanstalk connection."""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable, Collection, List, Optional, Sequence, Tuple

from prompt_toolkit import PromptSession, print_formatted_text
from prompt_toolkit.application.current import get_app
from prompt_toolkit.auto_suggest import AutoSuggestFromHistory
from prompt_toolkit.enums import EditingMode
from prompt_toolkit.filters import Condition
from prompt_toolkit.formatted_text import FormattedText
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings

from twisted_stalk.protocol import BY_NAME, COMMANDS
from twisted_stalk.protocol.replies import EXTENSION_BY_NAME, command_spec

from .shell_conn import (
    ConnectionLost,
    InterruptedRequest,
    Session,
    StalkError,
    data_home,
    parse_target,
)
from .shell_input import (
    DEFAULT_PUT,
    arg_label,
    META_BY_NAME,
    META_COMMANDS,
    Editor,
    Extensions,
    InputError,
    Request,
    build_request,
    needs_more_input,
    offered_extensions,
    usage,
)
from .shell_render import Fragments, render_reply, render_wire
from .shell_ui import (
    STYLE,
    ArgHintProcessor,
    Known,
    StalkCompleter,
    StalkLexer,
    StalkValidator,
    jobs_toolbar,
    syntax_help,
)

Writer = Callable[[Fragments], None]

GROUPS = (
    ("Producer", ("put", "use")),
    ("Worker", ("reserve", "reserve-with-timeout", "reserve-job", "delete", "release", "bury",
                "touch", "watch", "ignore")),
    ("Inspect and manage", ("peek", "peek-ready", "peek-delayed", "peek-buried", "kick", "kick-job",
                            "stats-job", "stats-tube", "stats", "list-tubes", "list-tube-used",
                            "list-tubes-watched", "pause-tube", "quit")),
)


def history_path() -> str:
    return os.path.join(data_home(), "history")


def open_history(path: Optional[str]) -> Tuple[History, Optional[str]]:
    """A FileHistory at ``path`` (created), or in-memory with a warning."""
    if not path:
        return InMemoryHistory(), None
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "ab"):
            pass
        return FileHistory(path), None
    except OSError as e:
        return InMemoryHistory(), f"history not saved: cannot write {path}: {e.strerror or e}"


class Shell:
    """The REPL.  ``input``/``output`` go to prompt_toolkit (tests pass a pipe
    input and DummyOutput); ``write`` receives everything the shell prints."""

    def __init__(self, session: Session, *, input=None, output=None,
                 write: Optional[Writer] = None, history: Optional[History] = None,
                 editor: Optional[Editor] = None, vi: bool = False,
                 put_defaults: Tuple[int, int, int] = DEFAULT_PUT, pretty_json: bool = True,
                 body_limit: int = 16384, wire: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.session = session
        self.known = Known()
        self.output = output
        self.write = write or self._print
        self.editor = editor
        self.put_defaults = put_defaults
        self.pretty_json = pretty_json
        self.body_limit = body_limit
        self.clock = clock
        self.wire = False
        self.set_wire(wire)
        self.prompt = PromptSession(
            message=self.prompt_message,
            history=history or InMemoryHistory(),
            auto_suggest=AutoSuggestFromHistory(),
            completer=StalkCompleter(self.known, self.refresh_tubes, self.extensions),
            complete_while_typing=True,
            validator=StalkValidator(self.extensions),
            validate_while_typing=False,
            lexer=StalkLexer(),
            input_processors=[ArgHintProcessor()],
            bottom_toolbar=self.toolbar,
            refresh_interval=0.5,
            style=STYLE,
            include_default_pygments_style=False,
            key_bindings=self._bindings(),
            enable_open_in_editor=True,
            prompt_continuation=self.continuation,
            vi_mode=vi,
            input=input,
            output=output,
        )

    # ------------------------------------------------------------------
    # Output

    def _print(self, fragments: Fragments) -> None:
        print_formatted_text(FormattedText(fragments), end="", style=STYLE,
                             include_default_pygments_style=False, output=self.output)

    def info(self, text: str) -> None:
        self.write([("class:info", text + "\n")])

    def warn(self, text: str) -> None:
        self.write([("class:warning", text + "\n")])

    def error(self, text: str) -> None:
        self.write([("class:error", text + "\n")])

    def _on_wire(self, direction: str, data: bytes) -> None:
        self.write(render_wire(direction, data))

    def set_wire(self, on: bool) -> None:
        self.wire = on
        self.session.set_wire(self._on_wire if on else None)

    def extensions(self) -> Collection[str]:
        """The extension verbs the server advertised on this connection."""
        return self.session.capabilities

    # ------------------------------------------------------------------
    # Prompt pieces

    def state_text(self) -> str:
        return f"use={self.session.use} watch={','.join(self.session.watch)}"

    def prompt_message(self) -> FormattedText:
        frags = [("class:prompt.name", "stalk "), ("class:prompt.server", str(self.session.target))]
        if self.session.connected:
            frags.append(("class:prompt.state", f" [{self.state_text()}]"))
        else:
            frags.append(("class:prompt.down", " (disconnected: Enter retries)"))
        frags.append(("", "> "))
        return FormattedText(frags)

    def continuation(self, width: int, line_number: int, wrap_count: int) -> FormattedText:
        return FormattedText([("class:info", "body> ".rjust(width))])

    def toolbar(self) -> FormattedText:
        try:
            text = self.prompt.default_buffer.text
        except Exception:
            text = ""
        frags = list(syntax_help(text, self.session.capabilities))
        status: List[tuple] = []
        if self.wire:
            status.append(("class:toolbar.wire", " WIRE "))
        now = self.clock()
        for jid, job in list(self.session.reserved.items()):
            if job.deadline is not None and now - job.deadline > 10:
                # the server released it when its TTR ran out
                del self.session.reserved[jid]
        status += jobs_toolbar(self.session.reserved, now)
        if status:
            frags.append(("", "\n"))
            frags += status
        return FormattedText(frags)

    def _bindings(self) -> KeyBindings:
        kb = KeyBindings()

        @Condition
        def body_pending() -> bool:
            return needs_more_input(get_app().current_buffer.text)

        @kb.add("enter", filter=body_pending)
        def _(event) -> None:
            event.current_buffer.newline(copy_margin=False)

        @kb.add("escape", "enter")
        def _(event) -> None:
            event.current_buffer.validate_and_handle()

        @kb.add("f4")
        def _(event) -> None:
            app = event.app
            app.editing_mode = (EditingMode.EMACS if app.editing_mode == EditingMode.VI
                                else EditingMode.VI)

        return kb

    def refresh_tubes(self) -> None:
        """Learn the tube list for completion (quietly, at most every few s)."""
        if not self.session.connected:
            return
        hook = self.session.conn.wire
        self.session.conn.wire = None
        try:
            reply = self.session.internal("list-tubes")
            self.known.learn("list-tubes", [], reply)
        except StalkError:
            pass
        finally:
            self.session.conn.wire = hook

    # ------------------------------------------------------------------
    # Connecting

    def ensure_connected(self) -> bool:
        if self.session.connected:
            return True
        again = self.session.ever_connected
        try:
            replayed = self.session.connect()
        except StalkError as e:
            self.error(str(e))
            self.info("Press Enter to retry, \\connect ADDRESS for another server, Ctrl-D to quit.")
            return False
        if again:
            note = f"; restored {', '.join(replayed)}" if replayed else ""
            self.info(f"reconnected to {self.session.target}{note}")
        else:
            self.info(f"connected to {self.session.target}")
        return True

    def _returned(self, returned: Sequence[int]) -> str:
        if not returned:
            return "no jobs were reserved on it"
        ids = ", ".join(f"#{j}" for j in returned)
        return f"the server returned the jobs reserved on it to ready: {ids}"

    def reconnect(self, returned: Sequence[int] = ()) -> None:
        self.info(f"dropped the connection ({self._returned(returned)}); reconnecting...")
        self.ensure_connected()

    # ------------------------------------------------------------------
    # Running

    def run(self, banner: bool = True) -> int:
        if banner:
            self.info("stalk: type help for commands, Tab to complete, Ctrl-D to quit.")
        self.ensure_connected()
        while True:
            try:
                text = self.prompt.prompt()
            except KeyboardInterrupt:
                continue
            except EOFError:
                break
            try:
                if not self.handle(text):
                    break
            except KeyboardInterrupt:
                self.warn("interrupted")
                if self.session.ever_connected and not self.session.connected:
                    # Ctrl-C in the middle of one of the shell's own requests:
                    # that connection was closed to keep replies in step.
                    self.reconnect(self.session.drop())
            except Exception as e:  # never a traceback at the prompt
                if os.environ.get("STALK_DEBUG"):
                    raise
                self.error(f"internal error: {e.__class__.__name__}: {e}")
        self.session.conn.close()
        return 0

    def handle(self, text: str) -> bool:
        """Run one entry; False means leave the shell."""
        try:
            req = build_request(text, put_defaults=self.put_defaults, editor=self.editor,
                                extensions=self.session.capabilities)
        except InputError as e:
            self.error(e.message)
            return True
        if req is None:
            if not self.session.connected:
                self.ensure_connected()
            return True
        if req.meta:
            return self.meta(req)
        return self.send(req)

    def send(self, req: Request) -> bool:
        if not self.ensure_connected():
            return True
        if req.name == "quit" and not req.raw:
            try:
                self.session.conn.send(req.wire())
            except StalkError:
                pass
            returned = self.session.drop()
            if returned:
                self.info(self._returned(returned))
            return False
        blocking = req.blocks
        try:
            reply = self.session.request(
                req.wire(), blocking=blocking,
                on_wait=lambda: self.info(f"{req.name}: waiting for a job (Ctrl-C to give up)..."))
        except InterruptedRequest as e:
            what = req.name or "request"
            if e.returned:
                msg = f"{what} interrupted: dropped that connection; {self._returned(e.returned)}"
            else:
                msg = (f"{what} interrupted: dropped that connection "
                       "(the server returns anything reserved on it to ready)")
            self.warn(msg)
            if e.restored:
                self.info(f"reconnected to {self.session.target}; restored {self.state_text()}")
            else:
                self.error(e.error)
            return True
        except ConnectionLost as e:
            returned = self.session.drop()
            self.error(str(e))
            self.warn(f"no reply to {req.name or 'the request'}: it may or may not have taken effect")
            self.reconnect(returned)
            return True
        self._after(req.name, req.args, reply)
        if req.raw:
            try:
                for extra in self.session.conn.drain():
                    self.info("(another reply to the same bytes:)")
                    self._after(None, [], extra)
            except ConnectionLost as e:
                self.error(str(e))
                self.reconnect(self.session.drop())
        return True

    def _after(self, name: Optional[str], args: List[str], reply) -> None:
        self.session.track(name, args, reply)
        self.known.learn(name, args, reply)
        self.write(render_reply(name, reply, pretty_json=self.pretty_json, body_limit=self.body_limit,
                                use=self.session.use, watch=self.session.watch))
        jid = reply.job_id
        try:
            if reply.word == "RESERVED" and jid is not None:
                self.session.learn_deadline(jid)
            elif reply.word == "TOUCHED" and args:
                self.session.learn_deadline(int(args[0]))
        except (StalkError, ValueError):
            pass

    # ------------------------------------------------------------------
    # Shell commands

    def meta(self, req: Request) -> bool:
        name = req.name
        arg = req.text
        if name == "exit":
            return False
        if name == "help":
            self.write(help_text(arg, self.session.capabilities))
        elif name in ("\\wire", "\\json"):
            current = self.wire if name == "\\wire" else self.pretty_json
            if arg in ("on", "off", ""):
                value = (not current) if not arg else arg == "on"
            else:
                self.error(f"{name} takes on or off")
                return True
            if name == "\\wire":
                self.set_wire(value)
                self.info(f"wire display {'on: bytes sent (>>) and received (<<)' if value else 'off'}")
            else:
                self.pretty_json = value
                self.info(f"JSON pretty-printing {'on' if value else 'off'}")
        elif name == "\\jobs":
            reserved = self.session.reserved
            if not reserved:
                self.info("no jobs reserved on this connection")
            now = self.clock()
            for jid, job in sorted(reserved.items()):
                left = "unknown" if job.deadline is None else f"{max(0.0, job.deadline - now):.1f}s"
                self.write([("", f"#{jid}  TTR left {left}\n")])
        elif name == "\\reconnect":
            returned = self.session.drop()
            self.reconnect(returned)
        elif name == "\\connect":
            if not arg:
                self.error("usage: \\connect host:port | unix:PATH | tls:host:port")
                return True
            try:
                target = parse_target(arg)
            except ValueError as e:
                self.error(str(e))
                return True
            old_target = self.session.target
            if target.scheme == "tls" and old_target.scheme == "tls":
                # keep --cafile/--insecure/--cert/--key for the new server
                target = dataclasses.replace(
                    target, insecure=old_target.insecure, cafile=old_target.cafile,
                    cert=old_target.cert, key=old_target.key)
            returned = self.session.drop()
            if returned:
                self.info(self._returned(returned))
            old = self.session
            self.session = Session(target, connect_timeout=old.conn.connect_timeout,
                                   reply_timeout=old.conn.reply_timeout, clock=old.clock)
            self.set_wire(self.wire)
            self.known.tubes_fetched = 0.0
            self.ensure_connected()
        elif name in ("\\vi", "\\emacs"):
            self.prompt.editing_mode = EditingMode.VI if name == "\\vi" else EditingMode.EMACS
            self.info(f"{name[1:]} key bindings")
        elif name == "\\raw":
            self.error("usage: \\raw <text>")
        return True


def help_text(topic: str = "", extensions: Extensions = None) -> Fragments:
    """``help`` and ``help <command>``, from the shared table.

    ``extensions``: the extension verbs the server advertises (listed in
    their own group); None when not connected (command-line ``stalk help``:
    all of them, marked as needing ``--extensions``)."""
    topic = topic.strip()
    if not topic:
        out: Fragments = []
        for title, names in GROUPS:
            out.append(("class:table.title", f"{title} commands:\n"))
            width = 34
            for n in names:
                spec = BY_NAME[n]
                out.append(("class:command", "  " + usage(spec).ljust(width)))
                out.append(("", " " + spec.summary + "\n"))
        extra = offered_extensions(extensions)
        if extra:
            title = ("Extension commands (this server serves them):" if extensions is not None
                     else "Extension commands (twisted-stalk's server with --extensions):")
            out.append(("class:table.title", title + "\n"))
            for ext in extra:
                out.append(("class:command", "  " + usage(ext).ljust(34)))
                out.append(("", " " + ext.summary.replace(" (extension)", "") + "\n"))
        out.append(("class:table.title", "Shell commands:\n"))
        for m in META_COMMANDS:
            out.append(("class:meta-command", "  " + m.usage.ljust(34)))
            out.append(("", " " + m.summary + "\n"))
        out.append(("class:info", "put: give the body on the next line(s) and end it with an empty line; "
                    "or put [pri delay ttr] @FILE or $EDITOR.\n"
                    "Keys: Tab complete, Up/Down history, Ctrl-R search, Right accepts a grey suggestion,\n"
                    "Alt-Enter sends now, Ctrl-X Ctrl-E edits the line in $EDITOR, F4 toggles vi/emacs,\n"
                    "Ctrl-C cancels the line or a waiting reserve, Ctrl-D quits.\n"))
        return out
    spec = command_spec(topic)
    if spec is None:
        meta = META_BY_NAME.get(topic)
        if meta is None:
            names = [c.name for c in list(COMMANDS) + offered_extensions(extensions)]
            known = [n for n in names if n.startswith(topic)]
            more = f" (did you mean {', '.join(known)}?)" if known else ""
            return [("class:error", f"no command {topic!r}{more}\n")]
        return [("class:meta-command", meta.usage + "\n"), ("", "  " + meta.summary + "\n")]
    out = [("class:command", usage(spec) + "\n"), ("", "  " + spec.summary + "\n")]
    for i, a in enumerate(spec.args):
        label = arg_label(spec, i)
        out.append(("class:table.key", f"  {label:10}"))
        note = a.help
        if spec.name == "put" and a.kind == "bytes":
            note += "; leave it out and the shell counts the body's bytes"
        out.append(("", " " + note + "\n"))
    if spec.replies:
        out.append(("class:info", "  replies: " + ", ".join(spec.replies) + "\n"))
    if spec.name in EXTENSION_BY_NAME:
        if extensions is None:
            served = "twisted-stalk's server serves it when started with --extensions"
        elif spec.name in extensions:
            served = "this server serves it"
        else:
            served = ("this server does not advertise it (beanstalkd, or twisted-stalk "
                      "without --extensions)")
        out.append(("class:info", f"  an extension verb, not part of beanstalkd's protocol: "
                    f"{served}.\n"))
    if spec.name == "put":
        out.append(("class:info",
                    "  body: on the next line(s), ended by an empty line; or put [pri delay ttr] @FILE;\n"
                    "  or put [pri delay ttr] $EDITOR.  With <bytes> given, exactly what you type is sent.\n"))
    if spec.blocks:
        out.append(("class:info", "  Ctrl-C while it waits drops the connection and reconnects;\n"
                    "  the server returns jobs reserved on the old connection to ready.\n"))
    return out
