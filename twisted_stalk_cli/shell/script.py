# -*- test-case-name: tests.test_shell_units -*-
"""Script mode's input: entries (a command line, and a put's body) read from
a byte stream, as ``stalk -`` takes them on stdin."""
from __future__ import annotations

from typing import List, Optional, Tuple

from .request import put_form


class ScriptReader:
    """Reads entries (command line plus put body) from a binary stream.

    A put with ``<bytes>`` reads exactly that many bytes and then the line end;
    a put without reads the following lines up to an empty line (or EOF).
    """

    def __init__(self, stream) -> None:
        self.stream = stream
        self.lineno = 0

    def _readline(self) -> Optional[bytes]:
        line = self.stream.readline()
        if not line:
            return None
        self.lineno += 1
        return line

    def __iter__(self):
        return self

    def __next__(self) -> Tuple[int, str, Optional[bytes]]:
        while True:
            raw = self._readline()
            if raw is None:
                raise StopIteration
            lineno = self.lineno
            line = raw.rstrip(b"\r\n").decode("utf-8", "replace")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            form = put_form(line.strip())
            if form is None or form.source in ("file", "editor"):
                return lineno, line, None
            if form.source == "exact":
                try:
                    size = int(form.numbers[3])
                except ValueError:
                    return lineno, line, None
                data = self.stream.read(size)
                ending = self.stream.read(1)
                if ending == b"\r":
                    ending += self.stream.read(1)
                self.lineno += data.count(b"\n") + (1 if ending.endswith(b"\n") else 0)
                if ending not in (b"\n", b"\r\n", b""):
                    data += ending  # not at a line end: keep what was written
                    rest = self.stream.readline()
                    data += rest.rstrip(b"\r\n")
                    self.lineno += 1
                return lineno, line, data
            lines: List[bytes] = []
            while True:
                more = self._readline()
                if more is None:
                    break
                more = more.rstrip(b"\r\n") if more.endswith(b"\r\n") else more.rstrip(b"\n")
                if not more:
                    break
                lines.append(more)
            return lineno, line, b"\n".join(lines)


__all__ = ["ScriptReader"]
