# -*- test-case-name: tests.test_web_api -*-
"""What the server tells others about its connections, as values.

A console lists the server's connections and names who holds a job; it
asks the factory (:meth:`~.factory.BeanstalkServerFactory.connection_facts`,
:meth:`~.factory.BeanstalkServerFactory.peer_of`) and gets
:class:`ConnectionFacts`, never a transport or a protocol object.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Tuple


@dataclass(frozen=True)
class ConnectionFacts:
    """One client connection at one moment."""

    #: ``host:port``, ``[v6]:port`` or ``unix:path`` of the client.
    peer: str
    #: The tube it uses and those it watches (in its order).
    use: bytes
    watch: Tuple[bytes, ...]
    #: In a reserve that waits for a job.
    waiting: bool
    producer: bool
    worker: bool
    #: Ids of the jobs it has reserved, in id order.
    held: Tuple[int, ...]


def peer_text(transport: Any) -> str:
    """``host:port`` (or ``unix``) of a connection's peer."""
    try:
        peer = transport.getPeer()
    except Exception:  # pragma: no cover - a transport without a peer
        return "?"
    host = getattr(peer, "host", None)
    if host is not None:
        return f"[{host}]:{peer.port}" if ":" in host else f"{host}:{peer.port}"
    name = getattr(peer, "name", None)
    return f"unix:{name.decode() if isinstance(name, bytes) else name or ''}"


def facts_of(peer: str, session: Any) -> ConnectionFacts:
    """The facts of a connection whose engine session is ``session``."""
    return ConnectionFacts(peer, session.use.name, tuple(t.name for t in session.watch),
                           bool(session.waiting), bool(session.is_producer),
                           bool(session.is_worker), tuple(sorted(session.reserved)))


__all__ = ["ConnectionFacts", "facts_of", "peer_text"]
