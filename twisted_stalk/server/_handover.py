# -*- test-case-name: tests.test_early -*-
"""The early loop's connections, handed to the reactor (see :mod:`._early`).

Contract: after :func:`adopt`, each connection the early loop served is a
:class:`~twisted_stalk.server.protocol.BeanstalkServerProtocol` on its own
socket with the same engine session (its tubes, its reserved jobs, its
waiting reserve), and the client sees the byte stream it would have seen had
the protocol served it from the start: the replies the early loop had not
yet written go first, then the protocol runs the input the loop had not run
(a half-read command line, a put whose body has not all come), in order; a
reserve still waiting keeps waiting and gets its job, or its timeout, from
the reactor's timer.  tests/test_early.py checks this over real sockets.
"""
from __future__ import annotations

from typing import Any, Iterable

from twisted.internet.protocol import Factory

from . import _early
from .protocol import _DISCARD, _SKIP_LINE

_MODES = {_early.DISCARD: _DISCARD, _early.SKIP_LINE: _SKIP_LINE}


class _Given(Factory):
    """Hands the reactor one protocol already made (for one adoption)."""

    def __init__(self, proto: Any) -> None:
        self.proto = proto

    def buildProtocol(self, addr: Any) -> Any:
        return self.proto


def adopt(connections: Iterable["_early.EarlyConnection"], factory: Any, reactor: Any) -> int:
    """Give ``connections`` (oldest first) to ``factory``'s protocols on
    ``reactor``, which takes over the engine's clock; returns how many were
    adopted.  Arms the factory's timer at the engine's next deadline."""
    engine = factory.engine
    engine.clock = reactor
    engine._now = reactor.seconds  # (the engine's cached clock.seconds)
    adopted = 0
    for conn in connections:
        sock = conn.sock
        proto = protocol_for(factory, conn)
        try:
            reactor.adoptStreamConnection(sock.fileno(), sock.family, _Given(proto))
        except OSError:  # the socket is already unusable: as if the client had gone
            proto.session = None
            engine.close_session(conn.session)
            continue
        finally:
            sock.close()  # the reactor holds its own duplicate
        adopted += 1
        resume(proto, conn)
    factory.after_input()
    factory.rearm()
    return adopted


def protocol_for(factory: Any, conn: "_early.EarlyConnection") -> Any:
    """A protocol of ``factory`` that takes over ``conn``'s session (its
    ``connectionMade`` then keeps it rather than opening one)."""
    proto = factory.protocol()
    proto.factory = factory
    proto.session = conn.session
    conn.session.frontend = proto
    return proto


def resume(proto: Any, conn: "_early.EarlyConnection") -> None:
    """Put ``proto`` (connected) where ``conn`` was: replies first, then the input."""
    if conn.out:
        proto._send(bytes(conn.out))
    if conn.closing:  # quit, or the client half-closed: close after those replies
        proto._close()
        return
    if conn.mode in _MODES:
        proto._mode = _MODES[conn.mode]
        proto._need = conn.need
        proto._after_discard = conn.after
    if conn.blocked:
        proto._block()
        if conn.buf:
            proto._buffer_while_held(bytes(conn.buf))
    elif conn.buf:
        proto.dataReceived(bytes(conn.buf))


__all__ = ["adopt", "protocol_for", "resume"]
