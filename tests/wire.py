"""A tiny blocking beanstalk peer for wire tests: send bytes, read exact replies."""
from __future__ import annotations

import socket
from typing import List

_BODY_WORDS = (b"RESERVED", b"FOUND", b"OK")


class Wire:
    """Reads replies by their framing (line, plus body for RESERVED/FOUND/OK)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("connection closed")
        self.buf += chunk

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line + b"\r\n"

    def reply(self) -> bytes:
        """One whole reply, header and body, as bytes."""
        head = self.line()
        words = head.split()
        if words and words[0] in _BODY_WORDS:
            n = int(words[-1])
            while len(self.buf) < n + 2:
                self._fill()
            body, self.buf = self.buf[:n + 2], self.buf[n + 2:]
            return head + body
        return head

    def replies(self, n: int) -> List[bytes]:
        return [self.reply() for _ in range(n)]

    def ask(self, data: bytes) -> bytes:
        self.send(data)
        return self.reply()

    def nothing_within(self, seconds: float) -> bool:
        """True if no byte arrives within ``seconds``."""
        if self.buf:
            return False
        self.sock.settimeout(seconds)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            return True
        finally:
            self.sock.settimeout(5)
        self.buf += chunk
        return False

    def closed(self) -> bool:
        """True when the server has closed the connection."""
        try:
            self._fill()
        except (EOFError, ConnectionResetError):
            return True
        return False

    def close(self) -> None:
        self.sock.close()
