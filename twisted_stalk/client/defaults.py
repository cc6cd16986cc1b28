# -*- test-case-name: tests.test_client_connection,tests.test_client_pool -*-
"""The tubes a client's calls use when they name none.

A :class:`TubeDefaults` holds the tube puts, peeks and kicks use and the
tubes reserves watch.  A :class:`~twisted_stalk.client.BeanstalkClient` owns
one (``client.defaults``) and brings every new connection to it; the servers
of a :class:`~twisted_stalk.client.BeanstalkPool` share one, so ``pool.use``
and ``pool.watch`` change them all at once.
"""
from __future__ import annotations

from typing import Any, List, Sequence, Tuple, Union

from twisted.internet.defer import Deferred, gatherResults, succeed

from ..protocol.constants import DEFAULT_TUBE
from . import _validate as v
from .errors import InvalidArgument

TubeName = Union[str, bytes]


class TubeDefaults:
    """The default ``use`` tube and watch list (names checked, kept as bytes).

    :ivar use: the tube puts, peeks and kicks use when they name none.
    :ivar watch: the tubes reserves watch when they name none (a tuple, in
        the order they were added; never empty).
    """

    def __init__(self, use: TubeName = DEFAULT_TUBE,
                 watch: Union[TubeName, Sequence[TubeName]] = (DEFAULT_TUBE,)) -> None:
        if isinstance(watch, (str, bytes)):
            watch = (watch,)
        self.use: bytes = v.tube_name(use)
        self.watch: Tuple[bytes, ...] = tuple(dict.fromkeys(v.tube_name(t) for t in watch))
        if not self.watch:
            raise InvalidArgument("watch must name at least one tube")

    def __repr__(self) -> str:
        return f"<TubeDefaults use={self.used!r} watch={self.watched!r}>"

    @property
    def used(self) -> str:
        """:attr:`use` as text."""
        return self.use.decode("ascii")

    @property
    def watched(self) -> Tuple[str, ...]:
        """:attr:`watch` as text."""
        return tuple(t.decode("ascii") for t in self.watch)

    def set_use(self, tube: TubeName) -> bytes:
        """Make ``tube`` the default tube; its name as bytes (or :class:`InvalidArgument`)."""
        self.use = v.tube_name(tube)
        return self.use

    def add_watch(self, tube: TubeName) -> bytes:
        """Add ``tube`` to the watch list (if not in it); its name as bytes."""
        raw = v.tube_name(tube)
        if raw not in self.watch:
            self.watch = self.watch + (raw,)
        return raw

    def remove_watch(self, tube: TubeName) -> bytes:
        """Remove ``tube`` from the watch list unless it is the only tube
        watched (as the server's ``ignore`` refuses); its name as bytes."""
        raw = v.tube_name(tube)
        if raw in self.watch and len(self.watch) > 1:
            self.watch = tuple(t for t in self.watch if t != raw)
        return raw

    def apply(self, proto: Any) -> Deferred:
        """Send what brings connection ``proto`` (a
        :class:`~twisted_stalk.client.BeanstalkProtocol`) to these defaults:
        a ``use``, ``watch``es, then ``ignore``s; fires when all are answered."""
        ds: List[Deferred] = []
        if self.used != proto.using:
            ds.append(proto.use(self.use))
        had = proto.watching
        for name in self.watched:
            if name not in had:
                ds.append(proto.watch(name))
        for name in had:
            if name not in self.watched:
                ds.append(proto.ignore(name))
        if not ds:
            return succeed(None)
        return gatherResults(ds, consumeErrors=True)


__all__ = ["TubeDefaults"]
