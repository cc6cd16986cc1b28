# -*- test-case-name: tests.test_shell_units -*-
"""Long output through a pager, as pgcli and iredis do.

Output taller than the window (``help``, big stats, ``list-tubes`` on
thousands of tubes, a long body) goes through ``$PAGER``, or ``less -SRXF``
when it is not set: ``-R`` keeps the colours, ``-S`` chops long lines
instead of wrapping them, ``-X`` leaves the text on the screen after
quitting, ``-F`` quits at once when it fits after all.  Only when stdout is a
terminal: pipes, ``--json``, ``--raw`` and the tools' streams are never paged.
The ``pager`` setting (``off``, or a command) and ``--no-pager`` or
``\\pager off`` turn it off.
"""
from __future__ import annotations

import io
import os
import shlex
import shutil
import signal
import subprocess
from typing import Dict, List, Optional

from prompt_toolkit import print_formatted_text
from prompt_toolkit.data_structures import Size
from prompt_toolkit.formatted_text import FormattedText
from prompt_toolkit.output import ColorDepth
from prompt_toolkit.output.vt100 import Vt100_Output
from prompt_toolkit.utils import get_cwidth

from .render import Fragments, plain

#: The pager when neither the setting nor ``$PAGER`` names one.
DEFAULT_PAGER = "less -SRXF"

_OFF = ("off", "no", "false", "0", "none")


class Pager:
    """Shows long output through a pager program (``command``)."""

    def __init__(self, command: List[str]) -> None:
        self.command = command
        self.env: Dict[str, str] = dict(os.environ)
        if os.path.basename(command[0]) == "less" and len(command) == 1:
            self.env.setdefault("LESS", DEFAULT_PAGER.split(" ", 1)[1])

    @classmethod
    def from_setting(cls, setting: str = "") -> Optional["Pager"]:
        """The pager the ``pager`` setting names: ``""``/``auto``/``on`` for
        ``$PAGER`` or ``less -SRXF``, ``off`` for none, else a command.  None
        when off or when the program is not installed."""
        setting = setting.strip()
        if setting.lower() in _OFF:
            return None
        if setting.lower() in ("", "auto", "on", "yes"):
            setting = os.environ.get("PAGER", "").strip() or DEFAULT_PAGER
        try:
            command = shlex.split(setting)
        except ValueError:
            return None
        if not command or shutil.which(command[0]) is None:
            return None
        return cls(command)

    def wanted(self, fragments: Fragments, size: Size, spare: int = 1) -> bool:
        """Whether ``fragments`` are taller than a window of ``size`` (less
        ``spare`` rows for what follows: a prompt, a toolbar)."""
        return rows(plain(fragments), size.columns) > max(1, size.rows - spare)

    def show(self, fragments: Fragments, style, size: Size) -> bool:
        """Run the pager on ``fragments`` (coloured with ``style``, or plain
        when it is None); False if it could not run."""
        text = plain(fragments) if style is None else ansi(fragments, style, size)
        data = text.encode("utf-8", "replace")
        # Ctrl-C belongs to the pager while it runs (a handler, not SIG_IGN,
        # so that the pager does not inherit an ignored SIGINT).
        previous = signal.signal(signal.SIGINT, lambda *_: None)
        try:
            subprocess.run(self.command, input=data, env=self.env, check=False)
        except OSError:
            return False
        finally:
            signal.signal(signal.SIGINT, previous)
        return True


def rows(text: str, columns: int) -> int:
    """Rows ``text`` takes in a window ``columns`` wide, wrapped."""
    columns = max(1, columns)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return sum(max(1, -(-get_cwidth(line) // columns)) for line in lines)


def ansi(fragments: Fragments, style, size: Size) -> str:
    """``fragments`` as text with the terminal's colour escapes."""
    buf = io.StringIO()
    output = Vt100_Output(buf, lambda: size, term=os.environ.get("TERM"),
                          default_color_depth=ColorDepth.from_env() or ColorDepth.DEPTH_8_BIT)
    print_formatted_text(FormattedText(fragments), end="", style=style, output=output,
                         include_default_pygments_style=False)
    return buf.getvalue()


__all__ = ["DEFAULT_PAGER", "Pager", "ansi", "rows"]
