# -*- test-case-name: tests.test_shell_cli -*-
"""Printing replies and records in command-line mode: pretty, raw, json or yaml."""
from __future__ import annotations

import os
import shutil
import sys
from typing import TYPE_CHECKING, Any, Optional

from twisted_stalk.protocol.replies import Reply

from .render import Fragments, dump_json, dump_yaml, raw_bytes, render_reply, reply_data

if TYPE_CHECKING:  # (prompt_toolkit is imported only when needed: start-up time)
    from prompt_toolkit.data_structures import Size

    from .pager import Pager


class Output:
    """Prints replies and records in the chosen format: ``pretty`` (for
    people), ``plain`` (the default into a pipe: the reply line, then the
    data block as sent, LF line ends), ``raw`` (the bytes exactly as the
    server sent them), ``json`` or ``yaml``."""

    def __init__(self, fmt: str, *, stream=None, err=None, body_only: bool = False,
                 color: bool = True) -> None:
        self.fmt = fmt
        self.stream = stream or sys.stdout
        self.err = err or sys.stderr
        self.body_only = body_only
        self.color = color
        self.count = 0
        #: Pretty output taller than the terminal goes through it (set for
        #: one-shot commands and help, never for streams).
        self.pager: Optional["Pager"] = None

    def size(self) -> "Size":
        """The terminal's size, asked of the terminal itself (an exported
        ``COLUMNS`` may be stale or inherited: pytest-xdist sets 80); into a
        pipe, ``COLUMNS``/``LINES`` or 80 x 24."""
        from prompt_toolkit.data_structures import Size
        try:
            columns, rows = os.get_terminal_size(self.stream.fileno())
        except (AttributeError, ValueError, OSError):
            columns = rows = 0
        if not (columns and rows):
            columns, rows = shutil.get_terminal_size((80, 24))
        return Size(rows=rows, columns=columns)

    def fragments(self, frags: Fragments) -> None:
        if self.pager is not None and isatty(self.stream):
            from .ui import STYLE
            size = self.size()
            if self.pager.wanted(frags, size) and self.pager.show(
                    frags, STYLE if self.color else None, size):
                return
        if self.color and isatty(self.stream):
            from prompt_toolkit import print_formatted_text
            from prompt_toolkit.formatted_text import FormattedText

            from .ui import STYLE
            print_formatted_text(FormattedText(frags), end="", style=STYLE,
                                 include_default_pygments_style=False, file=self.stream)
        else:
            self.stream.write("".join(f[1] for f in frags))
        self.stream.flush()

    def reply(self, reply: Reply) -> None:
        if self.fmt == "pretty" and not self.body_only:
            self.fragments(render_reply(reply))
        elif self.fmt in ("json", "yaml"):
            self.record(reply_data(reply))
        else:
            self.binary(raw_bytes(reply, body_only=self.body_only, exact=self.fmt == "raw"))

    def record(self, data: Any, *, text: str = "") -> None:
        """A structured record: JSON line, YAML document, or ``text``."""
        if self.fmt == "json":
            self.stream.write(dump_json(data) + "\n")
        elif self.fmt == "yaml":
            self.stream.write("---\n" + dump_yaml(data))
        else:
            self.stream.write(text)
        self.stream.flush()

    def binary(self, data: bytes) -> None:
        buf = getattr(self.stream, "buffer", None)
        if buf is not None:
            self.stream.flush()
            buf.write(data)
            buf.flush()
        else:
            self.stream.write(data.decode("utf-8", "replace"))
            self.stream.flush()

    def note(self, text: str) -> None:
        """Progress and explanations: stderr, so stdout stays machine-readable."""
        self.err.write(text + "\n")
        self.err.flush()


def isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


__all__ = ["Output", "isatty"]
