"""Words a person reads: counts with their noun in the right number.

One helper for every message a person reads (logs, the shell, the console), so
that none of them says "1 connections" or hedges with "connection(s)".
Free of Twisted, like :mod:`twisted_stalk.protocol`.
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Optional


def counted(count: int, noun: str, plural: Optional[str] = None) -> str:
    """``count`` and ``noun`` in the number ``count`` asks for.

    >>> counted(1, "job"), counted(0, "job"), counted(3, "reservation")
    ('1 job', '0 jobs', '3 reservations')
    >>> counted(2, "process", "processes"), counted(1, "process", "processes")
    ('2 processes', '1 process')

    ``plural`` is for nouns whose plural is not ``noun + "s"``.
    """
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {plural if plural is not None else noun + 's'}"
