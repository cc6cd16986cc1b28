# -*- test-case-name: tests.test_wire -*-
"""A speed trick, fenced: reads and writes on a plain socket without Twisted's buffers.

Contract: a connection with :class:`DirectIO` installed receives exactly the
bytes, and its peer receives exactly the replies, in the same order, that
the plain Twisted path (``transport.doRead`` / ``transport.write``) would
give; EOF and socket errors reach the reactor as Twisted's own ``doRead``
reports them.  The wire tests run with it on and off
(``TWISTED_STALK_DIRECT_IO=0``, ``--no-direct-io``).

What it does, and why (measured in docs/performance.md):

* **reads**: the transport's ``doRead`` becomes :meth:`DirectIO.read`,
  which calls ``os.read`` on the descriptor (the same syscall as ``recv``
  without its argument parsing) and hands the bytes straight to the
  protocol's ``dataReceived`` (one Python frame less per command);
* **writes**: :meth:`DirectIO.send` tries ``os.write`` first when Twisted
  has nothing queued for the socket (Twisted's ``write`` always queues and
  asks the reactor for a writable event: two ``epoll_ctl`` calls and a
  loop turn per reply).  Whatever the kernel does not take goes to
  ``transport.write``, and later replies follow it there until Twisted's
  queue has drained, so the order holds.

Only plain TCP and unix-socket transports (``twisted.internet.tcp.Server``
and its unix subclass) qualify; TLS and everything else use the plain path.
"""
from __future__ import annotations

import os
from errno import EWOULDBLOCK
from os import read as _os_read
from os import write as _os_write
from typing import Any, Optional

from twisted.internet import main, tcp

#: Bytes read per recv: Twisted's 64 KiB allocates and shrinks a 64 KiB
#: buffer on every read, while a command is usually tens of bytes.
READ_SIZE = 16384

#: The switch: ``TWISTED_STALK_DIRECT_IO=0`` in the environment turns the
#: trick off for every server in the process (``--no-direct-io`` for one).
ENABLED = os.environ.get("TWISTED_STALK_DIRECT_IO", "1") != "0"


def eligible(transport: Any) -> bool:
    """True for the transports :class:`DirectIO` can serve."""
    return isinstance(transport, tcp.Server)


class DirectIO:
    """The read and write paths of one plain-socket connection."""

    __slots__ = ("proto", "transport", "fd", "journal", "open")

    def __init__(self, proto: Any, transport: Any) -> None:
        self.proto = proto
        self.transport = transport
        self.fd = transport.socket.fileno()
        #: The engine's journal: while it has unsettled records the protocol
        #: holds replies (``proto._held``), and this path steps aside.
        self.journal = proto.engine.journal
        #: True while Twisted has nothing queued: replies may go straight out.
        self.open = True

    @classmethod
    def install(cls, proto: Any) -> "DirectIO":
        """Route ``proto``'s reads and writes through a new DirectIO."""
        transport = proto.transport
        direct = cls(proto, transport)
        transport.doRead = direct.read
        proto._send = direct.send
        return direct

    def uninstall(self) -> None:
        """Back to the plain path (the connection is closing)."""
        self.open = False
        self.proto.__dict__.pop("_send", None)

    def read(self) -> Optional[Any]:
        """``doRead``: recv, then ``dataReceived``; EOF and errors as Twisted reports them."""
        try:
            data = _os_read(self.fd, READ_SIZE)
        except OSError as e:
            return None if e.args[0] == EWOULDBLOCK else main.CONNECTION_LOST
        if not data:
            return main.CONNECTION_DONE
        self.proto.dataReceived(data)
        return None

    def send(self, data: bytes) -> None:
        """Write ``data`` now if the socket takes it, else queue it in Twisted."""
        if self.open and self.proto._held is None and not self.journal.pending:
            try:
                sent = _os_write(self.fd, data)
            except OSError:
                sent = 0  # EAGAIN, or an error Twisted will report on its own write
            if sent == len(data):
                return
            # Twisted queues the rest; later replies go after it.
            self.open = False
            self.transport.write(data[sent:])
        else:
            self._send_queued(data)

    def _send_queued(self, data: bytes) -> None:
        proto = self.proto
        if proto._held is not None or self.journal.pending:
            type(proto)._send(proto, data)  # the plain path holds replies
            return
        t = self.transport
        if not (t.dataBuffer or t._tempDataLen or t.disconnecting) and t.connected:
            self.open = True  # Twisted's queue has drained
            self.send(data)
        else:
            t.write(data)


__all__ = ["DirectIO", "ENABLED", "READ_SIZE", "eligible"]
