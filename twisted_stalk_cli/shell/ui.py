# -*- test-case-name: tests.test_shell_units -*-
"""prompt_toolkit pieces of the shell: completion, hints, validation, colours.

All of them read the shared command table (through :mod:`.request`), so
a command's completion, grey hint, toolbar text, validation and help come
from one place.
"""
from __future__ import annotations

from typing import Callable, Collection, Dict, Iterable, List, Optional

from prompt_toolkit.buffer import Buffer
from prompt_toolkit.completion import CompleteEvent, Completer, Completion, PathCompleter
from prompt_toolkit.completion.base import get_common_complete_suffix
from prompt_toolkit.document import Document
from prompt_toolkit.layout.processors import Processor, Transformation, TransformationInput
from prompt_toolkit.lexers import Lexer
from prompt_toolkit.styles import Style
from prompt_toolkit.validation import ValidationError, Validator

from twisted_stalk.protocol import BY_NAME, COMMANDS
from twisted_stalk.protocol.commands import command_spec
from twisted_stalk.protocol.constants import JOB_STATES

from .fit import pick, split_words
from .known import Known
from .request import (
    META_BY_NAME,
    META_COMMANDS,
    Extensions,
    InputError,
    build_request,
    current_arg,
    hint_for,
    needs_more_input,
    offered_extensions,
    unknown_command,
    usage,
)

#: A callable giving the extension verbs the server advertises.
ExtensionSource = Callable[[], Collection[str]]


def _no_extensions() -> Collection[str]:
    return ()


STYLE = Style.from_dict({
    "prompt.name": "ansicyan bold",
    "prompt.server": "ansicyan",
    "prompt.state": "ansigreen",
    "prompt.down": "ansired bold",
    "arg-hint": "#888888",
    "auto-suggestion": "#888888",
    "command": "ansicyan bold",
    "meta-command": "ansimagenta bold",
    "unknown": "ansired",
    "number": "ansiyellow",
    "tube": "ansigreen",
    "body": "",
    "raw": "ansimagenta",
    "reply.ok": "ansigreen bold",
    "reply.error": "ansired bold",
    "reply.meaning": "#888888",
    "body.header": "#888888 italic",
    "body.binary": "ansiyellow",
    "json.key": "ansiblue bold",
    "json.string": "ansigreen",
    "json.number": "ansiyellow",
    "json.literal": "ansimagenta",
    "table.key": "ansicyan",
    "table.title": "bold",
    "wire.send": "#888888",
    "wire.recv": "#888888",
    "info": "#888888",
    "warning": "ansiyellow bold",
    "error": "ansired bold",
    "bottom-toolbar": "noreverse bg:#303030 #d0d0d0",
    "toolbar.syntax": "bold #ffffff",
    "toolbar.help": "#b0b0b0",
    "toolbar.job": "#87d787",
    "toolbar.soon": "bg:ansired #ffffff bold",
    "toolbar.wire": "bg:ansiyellow #000000",
})


class StalkCompleter(Completer):
    """Commands, meta commands, tube names, job ids and @file paths; the
    extension verbs (and their states) when the server advertises them."""

    def __init__(self, known: Known, refresh_tubes: Optional[Callable[[], None]] = None,
                 extensions: ExtensionSource = _no_extensions,
                 refresh_jobs: Optional[Callable[[], None]] = None) -> None:
        self.known = known
        self.refresh_tubes = refresh_tubes
        #: Called before job ids are offered: forgets the jobs found gone.
        self.refresh_jobs = refresh_jobs
        self.extensions = extensions
        self.paths = PathCompleter(expanduser=True)

    def completes_tube(self, document: Document) -> bool:
        """True when the word under the cursor is a tube name argument."""
        return self._arg_kind(document) == "tube"

    def completes_job_id(self, document: Document) -> bool:
        """True when the word under the cursor is a job id argument."""
        return self._arg_kind(document) == "id"

    @staticmethod
    def _arg_kind(document: Document) -> Optional[str]:
        """``tube``, ``id`` (a job id) or the kind of the argument under the cursor."""
        text = document.text_before_cursor
        if "\n" in text or not text.strip() or text.split()[0] in META_BY_NAME:
            return None
        spec, index = current_arg(text)
        if spec is None or index is None:
            return None
        arg = spec.args[index]
        return "id" if arg.kind == "u64" and arg.name == "id" else arg.kind

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterable[Completion]:
        text = document.text_before_cursor
        if "\n" in text:
            return
        word = document.get_word_before_cursor(WORD=True)
        tokens = text.split()
        at_first = not tokens or (len(tokens) == 1 and not text[-1:].isspace())
        extensions = offered_extensions(self.extensions())
        if at_first:
            lead = text.lstrip()
            for cand in list(COMMANDS) + extensions:
                if cand.name.startswith(lead):
                    yield Completion(cand.name, -len(lead), display_meta=cand.summary)
            for meta in META_COMMANDS:
                names = (meta.name,) + (meta.aliases if lead else ())
                for name in names:
                    if name.startswith(lead):
                        yield Completion(name, -len(lead), display_meta=meta.summary)
            return
        first = tokens[0]
        if first in META_BY_NAME:
            meta = META_BY_NAME[first]
            if meta.name == "help" and len(tokens) <= 2:
                for cand in list(COMMANDS) + extensions:
                    if cand.name.startswith(word):
                        yield Completion(cand.name, -len(word), display_meta=cand.summary)
                for m in META_COMMANDS:
                    if m.name.startswith(word) and m.name != "help":
                        yield Completion(m.name, -len(word), display_meta=m.summary)
            elif meta.name in ("\\wire", "\\json", "\\pager") and len(tokens) <= 2:
                for opt in ("on", "off"):
                    if opt.startswith(word):
                        yield Completion(opt, -len(word))
            return
        spec, index = current_arg(text)
        if spec is None or index is None:
            return
        if spec.name not in BY_NAME and spec not in extensions:
            return  # an extension verb this server does not serve
        arg = spec.args[index]
        if spec.name == "put" and word.startswith("@"):
            sub = Document(word[1:], len(word) - 1)
            for c in self.paths.get_completions(sub, complete_event):
                yield Completion(c.text, c.start_position, display=c.display)
            return
        if spec.name == "put" and index in (0, 3) and word.startswith("$"):
            for opt in ("$EDITOR",):
                if opt.startswith(word):
                    yield Completion(opt, -len(word), display_meta="write the body in your editor")
            return
        if arg.kind == "tube":
            if self.refresh_tubes is not None:
                try:
                    self.refresh_tubes()  # never waits: the lookup runs in the background
                except Exception:  # completion must never break the prompt
                    pass
            for name in self.known.tubes:
                if name.startswith(word):
                    yield Completion(name, -len(word), display_meta="tube")
        elif arg.kind == "state":
            for state in JOB_STATES:
                if state.startswith(word):
                    yield Completion(state, -len(word), display_meta="job state")
        elif arg.kind == "u64" and arg.name == "id":
            if self.refresh_jobs is not None:
                try:
                    self.refresh_jobs()  # never waits: the check runs in the background
                except Exception:  # completion must never break the prompt
                    pass
            for jid, note in list(self.known.jobs.items()):
                s = str(jid)
                if s.startswith(word):
                    yield Completion(s, -len(word), display_meta=note)


def complete_now(buffer: Buffer) -> None:
    """Tab: complete at once, from the completer (which never waits).

    prompt_toolkit completes in a background task, one at a time; a Tab that
    arrives in the same burst as the text (a paste then Tab, a laggy SSH
    link) found the completion-while-typing task still running and was
    dropped.  Here a single completion is inserted with a space after it,
    several insert their common start (or open the menu), and an open menu
    moves on."""
    state = buffer.complete_state
    if state is not None and state.completions:
        buffer.complete_next()
        return
    completer = buffer.completer
    if completer is None:
        return
    document = buffer.document
    completions = list(completer.get_completions(document, CompleteEvent(completion_requested=True)))
    if len(completions) == 1:
        buffer.apply_completion(completions[0])
        if not completions[0].text.endswith("/") and not buffer.document.current_char.strip():
            buffer.insert_text(" ")  # a whole word: on to the next, as a shell does
        return
    common = get_common_complete_suffix(document, completions) if completions else ""
    if common:
        buffer.insert_text(common)
    elif completions:
        buffer.start_completion(select_first=False)


class StalkValidator(Validator):
    """Explains a malformed command before it is sent (the same rules as
    :func:`build_request`).

    The explanation shows on one line under the prompt, cut at the window's
    edge: one longer than ``columns()`` is ended at a space there, and the
    rest is kept in :attr:`rest`, for the toolbar to show right under it."""

    def __init__(self, extensions: ExtensionSource = _no_extensions,
                 waiting: Callable[[], str] = str,
                 columns: Callable[[], int] = int) -> None:
        self.extensions = extensions
        #: What the server waits for before it can answer, in a few words
        #: ("" when nothing).
        self.waiting = waiting
        #: The window's width (0: unknown, nothing is split).
        self.columns = columns
        #: What did not fit on the line of the last explanation.
        self.rest = ""

    def validate(self, document: Document) -> None:
        self.rest = ""
        try:
            self._check(document)
        except ValidationError as e:
            head, self.rest = split_words(e.message, max(0, self.columns() - 1))
            raise ValidationError(cursor_position=e.cursor_position, message=head)

    def _check(self, document: Document) -> None:
        text = document.text
        if needs_more_input(text):
            return
        try:
            req = build_request(text, check_only=True, extensions=self.extensions())
        except InputError as e:
            pos = e.position if e.position is not None else len(text.split("\n", 1)[0])
            raise ValidationError(cursor_position=min(pos, len(text)), message=e.message)
        waiting = self.waiting()
        if req is not None and not (req.meta or req.raw) and waiting:
            raise ValidationError(
                cursor_position=len(text),
                message=f"the server waits for {waiting} and would read this command as part "
                        "of it: send the rest with !, or \\reconnect")


class StalkLexer(Lexer):
    """Colours the command word (known, meta, raw or unknown) and arguments."""

    def lex_document(self, document: Document):
        lines = document.lines

        def get_line(lineno: int):
            line = lines[lineno]
            if lineno > 0:
                return [("class:body", line)]
            stripped = line.lstrip()
            if stripped.startswith("!"):
                return [("class:raw", line)]
            frags = []
            pos = 0
            first = True
            spec = None
            for part in _split_keep(line):
                if part.isspace():
                    frags.append(("", part))
                    continue
                if first:
                    first = False
                    spec = command_spec(part)
                    if spec is not None:
                        style = "class:command"
                    elif part in META_BY_NAME:
                        style = "class:meta-command"
                    else:
                        style = "class:unknown"
                elif part.isdigit():
                    style = "class:number"
                elif spec is not None and any(a.kind == "tube" for a in spec.args):
                    style = "class:tube"
                else:
                    style = ""
                frags.append((style, part))
                pos += len(part)
            return frags

        return get_line


def _split_keep(line: str) -> List[str]:
    out: List[str] = []
    cur = ""
    for ch in line:
        if cur and (ch.isspace() != cur[-1].isspace()):
            out.append(cur)
            cur = ""
        cur += ch
    if cur:
        out.append(cur)
    return out


class ArgHintProcessor(Processor):
    """Grey ``<delay> <ttr> [bytes]`` after what has been typed (unless a
    history suggestion is showing)."""

    def apply_transformation(self, ti: TransformationInput) -> Transformation:
        document = ti.document
        if ti.lineno != 0 or document.line_count != 1 or not document.is_cursor_at_the_end:
            return Transformation(ti.fragments)
        buffer = ti.buffer_control.buffer
        if buffer.suggestion and buffer.suggestion.text:
            return Transformation(ti.fragments)
        hint = hint_for(document.text)
        if not hint:
            return Transformation(ti.fragments)
        return Transformation(list(ti.fragments) + [("class:arg-hint", hint)])


#: The toolbar's key hints on an empty line: (rank, text), shown in this
#: order; the lowest ranks are kept when the window is too narrow for all.
KEY_HINTS = ((1, "Tab: complete"), (4, "Up/Ctrl-R: history"), (0, "help [cmd]"), (5, "\\wire"),
             (6, "!raw"), (3, "Ctrl-C: cancel"), (2, "Ctrl-D: quit"))


def syntax_help(text: str, extensions: Extensions = (), width: int = 200) -> List[tuple]:
    """The toolbar's first line: the syntax and meaning of what is being typed
    (``extensions``: the extension verbs the server advertises), for a
    window ``width`` columns wide (the caller cuts what is still too long)."""
    first = text.split("\n", 1)[0]
    tokens = first.split()
    if not tokens:
        return [("class:toolbar.help", " " + pick(KEY_HINTS, width - 1))]
    if tokens[0].startswith("!"):
        return [("class:toolbar.syntax", " !<text>"),
                ("class:toolbar.help", "  sent as raw bytes, unchecked (escapes \\r \\n \\t \\0 \\xNN; end with \\c for no CRLF)")]
    if tokens[0] in META_BY_NAME:
        meta = META_BY_NAME[tokens[0]]
        return [("class:toolbar.syntax", " " + meta.usage), ("class:toolbar.help", "  " + meta.summary)]
    spec = command_spec(tokens[0])
    if spec is None:
        names = [c.name for c in list(COMMANDS) + offered_extensions(extensions)]
        matches = [n for n in names if n.startswith(tokens[0])]
        if matches and len(tokens) == 1:
            return [("class:toolbar.help", " " + "  ".join(matches))]
        return [("class:toolbar.help", f" {unknown_command(tokens[0])}: type help for the list")]
    out = [("class:toolbar.syntax", " " + usage(spec)), ("class:toolbar.help", "  " + spec.summary)]
    if "\n" in text:
        if spec.name == "put":
            out.append(("class:toolbar.help", "  | body: end with an empty line (Alt-Enter sends now)"))
        return out
    _, index = current_arg(text)
    if index is not None:
        arg = spec.args[index]
        out = [("class:toolbar.syntax", " " + usage(spec)),
               ("class:toolbar.help", f"  <{arg.name}>: {arg.help}")]
    elif spec.name == "put":
        out.append(("class:toolbar.help", "  (or put [pri delay ttr] @FILE / $EDITOR)"))
    return out


def jobs_toolbar(reserved: Dict[int, object], now: float) -> List[tuple]:
    """The toolbar's reserved-jobs part: ``#5 12s``, red inside the last second."""
    if not reserved:
        return []
    out: List[tuple] = [("class:toolbar.help", " reserved:")]
    for jid, job in sorted(reserved.items()):
        deadline = getattr(job, "deadline", None)
        if deadline is None:
            out.append(("class:toolbar.job", f" #{jid}"))
            continue
        left = deadline - now
        if left <= 0:
            out.append(("class:toolbar.soon", f" #{jid} TTR expired: back to ready "))
        elif left <= 1.0:
            out.append(("class:toolbar.soon", f" #{jid} {left:.1f}s DEADLINE_SOON "))
        else:
            out.append(("class:toolbar.job", f" #{jid} {int(left)}s"))
    return out


__all__ = [
    "ArgHintProcessor", "Known", "STYLE", "StalkCompleter", "StalkLexer", "StalkValidator",
    "complete_now", "jobs_toolbar", "syntax_help",
]
