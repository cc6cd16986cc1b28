# -*- test-case-name: tests.test_shell_repl -*-
"""The interactive shell: a prompt_toolkit REPL over one beanstalk connection."""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Callable, Collection, List, Optional, Sequence, Tuple

from prompt_toolkit import PromptSession, print_formatted_text
from prompt_toolkit.application import run_in_terminal
from prompt_toolkit.application.current import get_app
from prompt_toolkit.auto_suggest import AutoSuggestFromHistory
from prompt_toolkit.data_structures import Size
from prompt_toolkit.document import Document
from prompt_toolkit.enums import EditingMode
from prompt_toolkit.filters import Condition, completion_is_selected
from prompt_toolkit.formatted_text import FormattedText
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings

from twisted_stalk.protocol.replies import Reply

from .conn import Connection
from .errors import ConnectionBroken, InterruptedRequest, StalkError, ToolError
from .fit import continuation, cut, fit_prompt, prompt_variants
from .help import help_text
from .known import Known
from .lookup import TubeLookup
from .output import Output
from .pager import Pager
from .paths import data_home
from .render import Fragments, render_reply, render_wire
from .request import DEFAULT_PUT, Editor, InputError, Request, build_request, needs_more_input
from .target import parse_target
from .tracked import TrackedConnection
from .ui import (
    STYLE,
    ArgHintProcessor,
    StalkCompleter,
    StalkLexer,
    StalkValidator,
    complete_now,
    jobs_toolbar,
    syntax_help,
)

Writer = Callable[[Fragments], None]


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
    input and DummyOutput); ``write`` receives everything the shell prints.

    ``session`` is the :class:`~.tracked.TrackedConnection` it works on."""

    def __init__(self, session: TrackedConnection, *, input=None, output=None,
                 write: Optional[Writer] = None, history: Optional[History] = None,
                 editor: Optional[Editor] = None, vi: bool = False,
                 put_defaults: Tuple[int, int, int] = DEFAULT_PUT, pretty_json: bool = True,
                 body_limit: int = 16384, wire: bool = False,
                 clock: Callable[[], float] = time.monotonic,
                 pager: Optional[Pager] = None) -> None:
        self.session = session
        self.known = Known()
        self.output = output
        self.write = write or self._print
        self.editor = editor
        self.put_defaults = put_defaults
        self.pretty_json = pretty_json
        self.body_limit = body_limit
        self.clock = clock
        #: Long output goes through ``pager`` while ``paging`` (``\pager``).
        self.pager = pager
        self.paging = pager is not None
        #: Where the tools run at the prompt (``top``, ``tail`` ...) write: the terminal.
        self.tool_stream = sys.stdout
        self.wire = False
        self.set_wire(wire)
        self.lookup = self._new_lookup()
        #: The line as it was when a Tab on a tube name started a lookup.
        self._tab_waiting: Optional[Document] = None
        self.prompt = PromptSession(
            message=self.prompt_message,
            history=history or InMemoryHistory(),
            auto_suggest=AutoSuggestFromHistory(),
            completer=StalkCompleter(self.known, self.refresh_tubes, self.extensions,
                                     refresh_jobs=self.refresh_jobs),
            complete_while_typing=True,
            validator=StalkValidator(self.extensions, self._waiting_for, self.columns),
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

    def show(self, fragments: Fragments) -> None:
        """Output that may be long (a reply, help): through the pager when it
        is taller than the window, else written as any other."""
        if self.paging and self.pager is not None:
            size = self.size()
            if self.pager.wanted(fragments, size, spare=3) and self.pager.show(fragments, STYLE, size):
                return
        self.write(fragments)

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

    def _waiting_for(self) -> str:
        """What the server waits for, in a few words ("" when nothing)."""
        return self.session.conn.framing.short() if self.session.connected else ""

    def extensions(self) -> Collection[str]:
        """The extension verbs the server advertised on this connection."""
        return self.session.capabilities

    # ------------------------------------------------------------------
    # Prompt pieces

    def state_text(self) -> str:
        return f"use={self.session.use} watch={','.join(self.session.watch)}"

    def size(self) -> Size:
        """The window's size (80 x 24 when it cannot be known)."""
        try:
            return self.prompt.output.get_size()
        except Exception:
            return Size(rows=24, columns=80)

    def columns(self) -> int:
        return self.size().columns

    def prompt_message(self) -> FormattedText:
        """The server and tube state, shortened to fit (:mod:`.fit`)."""
        session = self.session
        variants = prompt_variants(str(session.target), session.use, session.watch,
                                   session.connected)
        return FormattedText(fit_prompt(variants, self.columns()))

    def continuation(self, width: int, line_number: int, wrap_count: int) -> FormattedText:
        return FormattedText(continuation(width, self.columns(), line_number, wrap_count))

    def toolbar(self) -> FormattedText:
        try:
            buffer = self.prompt.default_buffer
            text, error = buffer.text, buffer.validation_error
        except Exception:
            text, error = "", None
        columns = self.columns()
        validator = self.prompt.validator
        if error is not None and isinstance(validator, StalkValidator):
            # The explanation is on the line above: here only what did not
            # fit there (it used to be said twice, the first time cut short).
            frags = [("class:toolbar.help", validator.rest)] if validator.rest else []
        else:
            frags = list(syntax_help(text, self.session.capabilities, columns))
        status: List[tuple] = []
        if self.wire:
            status.append(("class:toolbar.wire", " WIRE "))
        down = self.session.ever_connected and self.session.poll_closed()
        if down:
            status.append(("class:toolbar.soon", " disconnected: Enter reconnects "))
            self._report_loss_soon()
        elif self.session.conn.framing.waiting:
            status.append(("class:toolbar.soon",
                           f" the server waits for {self.session.conn.framing.short()}: "
                           "send it with !, or \\reconnect "))
        now = self.clock()
        for jid, job in list(self.session.reserved.items()):
            if job.deadline is not None and now - job.deadline > 10:
                # the server released it when its TTR ran out
                del self.session.reserved[jid]
        if not down:  # (the server returns the jobs of a lost connection)
            status += jobs_toolbar(self.session.reserved, now)
        frags = cut(frags, columns)
        if status:
            frags.append(("", "\n"))
            frags += cut(status, columns)
        return FormattedText(frags)

    def _bindings(self) -> KeyBindings:
        kb = KeyBindings()

        @Condition
        def body_pending() -> bool:
            return needs_more_input(get_app().current_buffer.text)

        @kb.add("enter", filter=body_pending)
        def _(event) -> None:
            event.current_buffer.newline(copy_margin=False)

        @kb.add("tab", filter=~completion_is_selected)
        def _(event) -> None:
            buffer = event.current_buffer
            completer = self.prompt.completer
            state = buffer.complete_state
            # (A menu without completions yet is the completion-while-typing
            # still loading, from the last lookup's list: under load a Tab
            # typed right after the text finds it.)
            if (isinstance(completer, StalkCompleter)
                    and (((state is None or not state.completions)
                          and completer.completes_tube(buffer.document))
                         # (job ids: also with a menu that typing opened, which
                         # may offer jobs deleted since)
                         or ((state is None or state.current_completion is None)
                             and completer.completes_job_id(buffer.document)
                             and bool(self.known.jobs)))
                    and self.lookup.refresh_now(self._job_ids(buffer.document))):
                # Complete from the server's answer, not from the last lookup's
                # list (or from job ids deleted since): _lookup_done does it
                # when the answer arrives (or fails).
                self._tab_waiting = buffer.document
                return
            complete_now(buffer)

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
        """For completion: take the tube names a background lookup found and
        start another if it is time (never waits: :mod:`.lookup`)."""
        names = self.lookup.take()
        if names is not None:
            self.known.set_tubes(names)
        self.lookup.request()

    def _job_ids(self, document: Document) -> List[int]:
        """The known job ids to check, when the cursor is on a job id."""
        completer = self.prompt.completer
        if isinstance(completer, StalkCompleter) and completer.completes_job_id(document):
            return list(self.known.jobs)
        return []

    def refresh_jobs(self) -> None:
        """For completion: forget the jobs a background check found gone
        (deleted by anyone since the shell saw them) and start another check
        if it is time (never waits: :mod:`.lookup`)."""
        for job_id in self.lookup.take_gone():
            self.known.forget_job(job_id)
        self.lookup.request(list(self.known.jobs))

    def _new_lookup(self) -> TubeLookup:
        return TubeLookup(self.session.target, on_done=self._lookup_done)

    def _lookup_done(self) -> None:
        """A lookup ended (in its thread): complete the line a Tab is waiting
        on, or refresh an open completion menu that nothing is selected in,
        with the names found."""
        app = self.prompt.app
        loop = getattr(app, "loop", None)
        if not app.is_running or loop is None:
            return

        def refresh() -> None:
            buffer = app.current_buffer
            waiting, self._tab_waiting = self._tab_waiting, None
            if waiting is not None and buffer.document == waiting:
                state = buffer.complete_state
                if state is not None and state.current_completion is None:
                    buffer.complete_state = None  # a menu from before the answer
                complete_now(buffer)  # the Tab pressed while the lookup ran
                app.invalidate()
                return
            state = buffer.complete_state
            if state is not None and state.current_completion is None:
                buffer.complete_state = None
                buffer.start_completion(select_first=False)
            app.invalidate()

        loop.call_soon_threadsafe(refresh)

    # ------------------------------------------------------------------
    # Connecting

    def _report_loss_soon(self) -> None:
        """Say, above the prompt, that the server closed the connection (it
        was noticed while drawing the toolbar, where nothing can be printed)."""
        if self.session.conn.lost is not None and self.prompt.app.is_running:
            try:
                run_in_terminal(lambda: self.report_loss("; Enter reconnects"))
            except Exception:
                pass

    def report_loss(self, then: str = "") -> None:
        """Say that the connection was lost outside a request, if it was, and
        which reserved jobs the server returned to ready (``then``: what
        comes next)."""
        loss = self.session.take_loss()
        if loss is not None:
            why, returned = loss
            self.error(why)
            self.info(self._returned(returned) + then)

    def ensure_connected(self) -> bool:
        if self.session.connected:
            return True
        self.report_loss()
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
        """What became of the jobs reserved on a connection that closed."""
        self.known.returned(returned)
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
        self.lookup.close()
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
        try:
            replies = self.session.request(
                req.wire(),
                on_wait=lambda: self.info(
                    f"{req.name or 'reserve'}: waiting for a job (Ctrl-C to give up)..."))
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
        except ConnectionBroken as e:
            returned = self.session.drop()
            self.error(str(e))
            self.warn(f"no reply to {req.name or 'the request'}: it may or may not have taken effect")
            self.reconnect(returned)
            return True
        for i, reply in enumerate(replies):
            if i:
                self.info("(another reply to the same bytes:)")
            # (the first reply may finish a command sent before: a put's body)
            self._after(req.args if i == 0 and reply.command == req.name else [], reply)
        if req.raw:
            try:
                for extra in self.session.conn.drain():
                    self.info("(another reply to the same bytes:)")
                    self._after([], extra)
            except ConnectionBroken as e:
                self.error(str(e))
                self.reconnect(self.session.drop())
                return True
        waiting = self.session.waiting
        if waiting:
            self.warn(waiting)
            self.info("send the rest with ! (raw), or \\reconnect to drop it")
        return True

    def _after(self, args: List[str], reply: Reply) -> None:
        self.session.track(args, reply)
        self.known.learn(args, reply)
        self.show(render_reply(reply, pretty_json=self.pretty_json, body_limit=self.body_limit,
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
            self.show(help_text(arg, self.session.capabilities, self.columns()))
        elif name in ("\\wire", "\\json", "\\pager"):
            current = {"\\wire": self.wire, "\\json": self.pretty_json, "\\pager": self.paging}[name]
            if arg in ("on", "off", ""):
                value = (not current) if not arg else arg == "on"
            else:
                self.error(f"{name} takes on or off")
                return True
            if name == "\\wire":
                self.set_wire(value)
                self.info(f"wire display {'on: bytes sent (>>) and received (<<)' if value else 'off'}")
            elif name == "\\pager":
                if value and self.pager is None:
                    self.error("no pager: $PAGER is not set and less is not installed, or the pager "
                               "setting names a program that is not (see docs/shell.md)")
                    return True
                self.paging = value
                self.info(f"pager {' '.join(self.pager.command) if value and self.pager else 'off'}"
                          + (" for output taller than the window" if value else ""))
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
            self.session = TrackedConnection(target, connect_timeout=old.conn.connect_timeout,
                                   reply_timeout=old.conn.reply_timeout, clock=old.clock)
            self.set_wire(self.wire)
            self.lookup.close()
            self.lookup = self._new_lookup()
            self.ensure_connected()
        elif name in ("\\vi", "\\emacs"):
            self.prompt.editing_mode = EditingMode.VI if name == "\\vi" else EditingMode.EMACS
            self.info(f"{name[1:]} key bindings")
        elif name == "\\raw":
            self.error("usage: \\raw <text>")
        elif name in ("top", "tail", "flush", "move"):
            self.run_tool(name, req.args)
        return True

    def run_tool(self, name: str, args: List[str]) -> None:
        """``top``, ``tail``, ``flush`` or ``move`` typed at the prompt: the
        tool of ``stalk NAME``, in this terminal, against this server
        (``tail`` without a tube: the one in use), on a connection of its own
        so the session's use, watch list and reservations stay as they are;
        ``q`` (``top``, ``tail``) or Ctrl-C comes back to the prompt."""
        from .tools import TOOLS
        if name == "tail" and (not args or args[0].startswith("-")):
            args = [self.session.use] + args
        old = self.session.conn
        conn = Connection(self.session.target, connect_timeout=old.connect_timeout,
                          reply_timeout=old.reply_timeout)
        out = Output("pretty", stream=self.tool_stream, color=not os.environ.get("NO_COLOR"))
        try:
            conn.connect()
            TOOLS[name](conn, args, out)
        except ToolError as e:
            self.error(str(e))
        except StalkError as e:
            self.error(f"{name}: {e}")
        except SystemExit:  # --help: argparse printed the tool's help
            pass
        except KeyboardInterrupt:  # (before the tool took over Ctrl-C)
            pass
        finally:
            conn.close()
