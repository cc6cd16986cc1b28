# -*- test-case-name: tests.test_wire,tests.test_wire_abuse -*-
"""How a connection's replies leave: gathered per read, held for the journal,
bounded when the client does not read them.

:class:`ReplyOutput` is a part of
:class:`~twisted_stalk.server.protocol.BeanstalkServerProtocol`: the replies
to one read are gathered and written together; while the engine's journal
(the binlog) has records that are not yet durable, replies are held and sent
in order once it settles (no reply acknowledges a change that could still be
lost); a client that does not read its replies stops being read once more
than :data:`MAX_UNSENT` bytes wait for it (see :mod:`.flow`).
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, List, Optional

#: Unsent reply bytes above which a connection's input is no longer read
#: (beanstalkd reads a client's next command only once its reply is written).
MAX_UNSENT = 256 * 1024
#: Bytes a client may send ahead while its reply is outstanding before
#: reading pauses (see :mod:`.flow`).
MAX_BUFFERED_WHILE_WAITING = 256 * 1024
#: Replies gathered from one read before they are written (and the unsent
#: bound checked), and the size of a reply written at once: a burst of
#: pipelined commands cannot pile up replies.  (The hot commands' own
#: replies, INSERTED and DELETED, are a few bytes each and not counted.)
FLUSH_EVERY = 32
FLUSH_SIZE = 65536


class ReplyOutput:
    """The write side of a connection (a part of the server protocol)."""

    transport: Any
    _journal: Any

    def _init_output(self) -> None:
        # Instance attributes, set in __init__ in a fixed order, not class
        # defaults: CPython 3.11 specialises attribute reads only for values
        # stored in the instance (a class default costs a full lookup).
        #: Replies gathered while processing one read, written together.
        self._out: List[bytes] = []
        #: True while dataReceived runs: replies go to _out, written at its end.
        self._reading = False
        #: Replies held until the journal has written what they acknowledge.
        self._held: Optional[List[bytes]] = None
        #: Close the connection once the held replies are sent.
        self._close_when_sent = False

    def _write(self, data: bytes) -> None:
        if self._reading:
            self._out.append(data)
        else:
            self._send(data)

    def _append(self, reply: bytes) -> None:
        """Add a reply to the read's list; write the list once it is long or
        large (writing may stall this connection: see :mod:`.flow`)."""
        out = self._out
        out.append(reply)
        if len(out) >= FLUSH_EVERY or len(reply) > FLUSH_SIZE:
            self._flush()

    def _flush(self) -> None:
        out = self._out
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        self._send(data)

    def _send(self, data: bytes) -> None:
        """Write ``data``, or hold it while the journal has unsettled records:
        no reply may acknowledge a change that is not durable, and the records
        of a whole reactor turn share one write and one fsync.
        (:class:`._fastio.DirectIO` replaces this on plain sockets.)"""
        held = self._held
        if held is not None:
            held.append(data)
        elif self._journal.pending:
            self._held = [data]
            self._journal.when_settled(self._send_held)
        else:
            self.transport.write(data)

    def _send_held(self) -> None:
        """The journal settled: send the replies held meanwhile."""
        held, self._held = self._held, None
        if held:
            self._send(b"".join(held))
        if self._close_when_sent:
            self._close_when_sent = False
            self._lose()

    def _lose(self) -> None:
        """Close the transport (a FIN after what is queued)."""
        # A transport with a producer registered waits for it before it
        # closes (TLS never would): unregister first.
        transport = self.transport
        transport.unregisterProducer()
        transport.loseConnection()

    @property
    def unsent(self) -> bool:
        """True while replies are held for the journal or queued in the transport."""
        return self._held is not None or _write_buffered(self.transport)


def _write_buffered(transport: Any, depth: int = 4) -> bool:
    """True while ``transport`` (or the transport under a TLS wrapper) still
    holds bytes it has not handed to the kernel."""
    while transport is not None and depth:
        if getattr(transport, "_appSendBuffer", None):  # TLS, before the handshake
            return True
        if getattr(transport, "dataBuffer", b"") or getattr(transport, "_tempDataLen", 0):
            return True
        transport = getattr(transport, "transport", None)
        depth -= 1
    return False


__all__ = ["FLUSH_EVERY", "FLUSH_SIZE", "MAX_BUFFERED_WHILE_WAITING", "MAX_UNSENT", "ReplyOutput"]
