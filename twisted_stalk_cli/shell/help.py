# -*- test-case-name: tests.test_shell_units -*-
"""``help`` and ``help <command>``: the command list and each command's usage,
arguments and replies, from the shared command table."""
from __future__ import annotations

import textwrap

from twisted_stalk.protocol import BY_NAME, COMMANDS
from twisted_stalk.protocol.commands import command_spec

from .render import Fragments
from .request import META_BY_NAME, META_COMMANDS, Extensions, arg_label, offered_extensions, usage

#: The groups of ``help``, in its order; each command's is ``help_group`` in
#: the table (tests/test_shell_units.py checks that every command is in one).
GROUP_TITLES = ("Producer", "Worker", "Inspect and manage")
#: The stock commands by group, in the table's order.
GROUPS = tuple((title, tuple(c.name for c in COMMANDS if c.help_group == title))
               for title in GROUP_TITLES)


#: What ``help`` ends with, a paragraph each.
FOOTER = (
    "put: give the body on the lines that follow and end it with an empty line; "
    "or put [pri delay ttr] @FILE or $EDITOR.",
    "Keys: Tab complete, Up/Down history, Ctrl-R search, Right accepts a grey suggestion, "
    "Alt-Enter sends now, Ctrl-X Ctrl-E edits the line in $EDITOR, F4 toggles vi/emacs, "
    "Ctrl-C cancels the line or a waiting reserve, Ctrl-D quits.",
)

#: Width of the usage column of ``help``.
USAGE_WIDTH = 34


def _row(style: str, left: str, text: str, width: int) -> Fragments:
    """``  left   text``, the text wrapped to ``width`` columns under itself
    (under the usage, indented, when the window is narrow)."""
    indent = 2 + USAGE_WIDTH + 1
    if width - indent < 30:
        lines = textwrap.wrap(text, max(20, width - 4)) or [""]
        return [(style, "  " + left + "\n"), ("", "".join("    " + ln + "\n" for ln in lines))]
    lines = textwrap.wrap(text, width - indent) or [""]
    return [(style, "  " + left.ljust(USAGE_WIDTH)),
            ("", " " + ("\n" + " " * indent).join(lines) + "\n")]


def help_text(topic: str = "", extensions: Extensions = None, width: int = 100) -> Fragments:
    """``help`` and ``help <command>``, from the shared table, for a window
    ``width`` columns wide.

    ``extensions``: the extension verbs the server advertises (listed in
    their own group); None when not connected (command-line ``stalk help``:
    all of them, marked as needing ``--extensions``)."""
    topic = topic.strip()
    width = max(40, width - 1)
    if not topic:
        out: Fragments = []
        for title, names in GROUPS:
            out.append(("class:table.title", f"{title} commands:\n"))
            for n in names:
                spec = BY_NAME[n]
                out += _row("class:command", usage(spec), spec.summary, width)
        extra = offered_extensions(extensions)
        if extra:
            title = ("Extension commands (this server serves them):" if extensions is not None
                     else "Extension commands (twisted-stalk's server with --extensions):")
            out.append(("class:table.title", title + "\n"))
            for ext in extra:
                out += _row("class:command", usage(ext), ext.summary.replace(" (extension)", ""), width)
        out.append(("class:table.title", "Shell commands:\n"))
        for m in META_COMMANDS:
            out += _row("class:meta-command", m.usage, m.summary, width)
        for note in FOOTER:
            out.append(("class:info", "\n".join(textwrap.wrap(note, width)) + "\n"))
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
    if spec.extension:
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
                    "  body: on the lines that follow, ended by an empty line; or put [pri delay ttr] @FILE;\n"
                    "  or put [pri delay ttr] $EDITOR.  With <bytes> given, exactly what you type is sent.\n"))
    if spec.blocks:
        out.append(("class:info", "  Ctrl-C while it waits drops the connection and reconnects;\n"
                    "  the server returns jobs reserved on the old connection to ready.\n"))
    return out


__all__ = ["GROUPS", "help_text"]
