# -*- test-case-name: tests.test_shell_units -*-
"""Fitting the shell's own lines to the window: the prompt, the prefix of
continued and wrapped lines, and the bottom toolbar.

prompt_toolkit draws the prompt as the prefix of the first line and asks for
a prefix for every further line, body lines and wrapped parts alike, giving
the prompt's width.  A prefix as wide as the window leaves no room for text
(the screen went blank once the prompt was wider than the window), so the
prompt is shortened to at most half the window, and no prefix is ever wider
than the prompt.  The toolbar is one line per row and is cut at the window's
edge, so its parts are chosen or shortened to fit.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from prompt_toolkit.utils import get_cwidth

Fragments = List[Tuple[str, str]]

ELLIPSIS = "…"

#: The prompt never takes more than this share of the window (but at least
#: :data:`MIN_PROMPT` columns, when the window has them): the default prompt
#: (``stalk 127.0.0.1:11300 [use=default watch=default]> ``) fits 80 columns.
PROMPT_SHARE = 2 / 3
MIN_PROMPT = 12


def width_of(fragments: Sequence[Tuple[str, str]]) -> int:
    """Columns taken by ``fragments`` on a terminal."""
    return sum(get_cwidth(text) for _, text in fragments)


def shorten(text: str, width: int) -> str:
    """``text`` in at most ``width`` columns, its middle replaced by ``…``
    (tube names often differ only at their ends: ``emails-high``)."""
    if get_cwidth(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    head = width // 2
    tail = width - 1 - head
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")


def cut(fragments: Sequence[Tuple[str, str]], width: int) -> Fragments:
    """``fragments`` cut to ``width`` columns, ending in ``…`` when cut."""
    if width_of(fragments) <= width:
        return list(fragments)
    out: Fragments = []
    room = max(0, width - 1)
    for style, text in fragments:
        if room <= 0:
            break
        piece = ""
        for ch in text:
            w = get_cwidth(ch)
            if w > room:
                room = 0
                break
            piece += ch
            room -= w
        out.append((style, piece))
    if width >= 1:
        out.append((out[-1][0] if out else "", ELLIPSIS))
    return out


def prompt_budget(columns: int) -> int:
    """The most columns the prompt may take in a window ``columns`` wide."""
    return min(columns - 1, max(MIN_PROMPT, int(columns * PROMPT_SHARE)))


def _watch_text(watch: Sequence[str], limit: Optional[int], every: bool) -> str:
    names = list(watch) if every else list(watch[:1])
    if limit is not None:
        names = [shorten(n, limit) for n in names]
    more = len(watch) - len(names)
    return ",".join(names) + (f"+{more}" if more else "")


def prompt_variants(server: str, use: str, watch: Sequence[str],
                    connected: bool) -> List[Fragments]:
    """The prompt from the fullest to the shortest form."""
    if not connected:
        down = [("class:prompt.server", server), ("class:prompt.down", " (disconnected: Enter retries)")]
        return [
            [("class:prompt.name", "stalk ")] + down + [("", "> ")],
            down + [("", "> ")],
            [("class:prompt.server", server), ("class:prompt.down", " (disconnected)"), ("", "> ")],
            [("class:prompt.down", "(disconnected)"), ("", "> ")],
            [("class:prompt.down", "!"), ("", "> ")],
        ]
    name = [("class:prompt.name", "stalk ")]
    at = [("class:prompt.server", server), ("class:prompt.state", " ")]
    end = [("", "> ")]

    def state(limit: Optional[int], every: bool) -> Fragments:
        tube = use if limit is None else shorten(use, limit)
        return [("class:prompt.state", f"[use={tube} watch={_watch_text(watch, limit, every)}]")]

    variants: List[Fragments] = [
        name + at + state(None, True) + end,
        name + at + state(None, False) + end,
        at + state(None, False) + end,
        at + state(24, False) + end,
        state(24, False) + end,
        state(12, False) + end,
    ]
    variants.append([("class:prompt.name", "stalk"), ("", "> ")])
    variants.append([("", "> ")])
    return variants


def fit_prompt(variants: Sequence[Fragments], columns: int) -> Fragments:
    """The fullest variant that fits the prompt's share of the window."""
    budget = prompt_budget(columns)
    for variant in variants:
        if width_of(variant) <= budget:
            return list(variant)
    return cut(variants[-1], max(0, budget))


def continuation(prompt_width: int, columns: int, line_number: int, wrap_count: int,
                 label: str = "body> ") -> Fragments:
    """The prefix of a further line: ``body>`` for a new line of a put body,
    blanks for the wrapped part of any line (so that a wrapped body line does
    not look like a new one).  Lines are aligned under the prompt when it
    takes at most half the window; after a longer one they start at the
    left, under a short prefix, so that they keep most of the width."""
    if prompt_width <= columns // 2:
        width = prompt_width
    else:
        width = min(get_cwidth(label), columns // 2)
    if wrap_count or line_number == 0:
        return [("", " " * width)]
    return [("class:info", label.rjust(width)[-width:] if width else "")]


def pick(items: Sequence[Tuple[int, str]], width: int, sep: str = "   ") -> str:
    """The ``(rank, text)`` items that fit in ``width`` columns, taken from
    the lowest rank up to the first that does not fit, shown in their given
    order."""
    chosen: List[int] = []
    for i in sorted(range(len(items)), key=lambda i: items[i][0]):
        trial = sorted(chosen + [i])
        if get_cwidth(sep.join(items[j][1] for j in trial)) > width:
            break
        chosen = trial
    return sep.join(items[j][1] for j in chosen)


def split_words(text: str, width: int) -> Tuple[str, str]:
    """``text`` as a first line of at most ``width`` columns, ended at a
    space, and the rest ("" when it fits; ``width`` 0: no limit)."""
    if width <= 0 or width_of([("", text)]) <= width:
        return text, ""
    head = ""
    for ch in text:
        if width_of([("", head + ch)]) > width:
            break
        head += ch
    cut_at = head.rfind(" ")
    if cut_at <= 0:
        cut_at = len(head)
    return text[:cut_at].rstrip(), text[cut_at:].strip()


__all__ = ["ELLIPSIS", "continuation", "cut", "fit_prompt", "pick", "prompt_budget",
           "prompt_variants", "shorten", "split_words", "width_of"]
