# -*- test-case-name: tests.test_engines -*-
"""Choosing the engine: the one place that builds one, by URL.

``twistd beanstalk`` and ``stalkd`` name their engine by a URL (from their
flags: :func:`engine_url`) and call :func:`open_engine`; the server factory
takes the :class:`~twisted_stalk.core.engine.Engine` built here and nothing
else, and ``server/`` imports no engine of its own.

The URL's scheme picks the engine:

``memory:``
    the in-memory engine, with its binlog when the options name a directory
    (``binlog-dir``, ``binlog-size``, ``fsync-ms``, ``no-fsync``);
``postgresql://...`` (or ``postgres://``, or libpq's ``key=value`` form)
    the PostgreSQL engine (:mod:`twisted_stalk.pg`, imported only then).

Other engines register under the :data:`GROUP` entry-point group, as
SQLAlchemy's dialects and Twisted's plugins do: an entry point named after
the scheme whose object is an :data:`Opener`, ``opener(url, settings)``
returning a started engine or raising
:class:`~twisted_stalk.core.engine.EngineError` with a one-line message::

    [options.entry_points]
    twisted_stalk.engines =
        toy = toy_engine:open_toy

The built-in engines are declared there too (setup.cfg); :data:`BUILT_IN`
names the same openers, looked up first (a server's start reads no package
metadata for them, and a tree run without being installed has them).
``docs/architecture.md`` ("Adding a third engine") walks through one.
"""
from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Callable, Dict, Mapping, Optional

from . import PROTOCOL_VERSION
from .core.engine import Engine, EngineError
from .core.facts import Facts
from .protocol.constants import DEFAULT_MAX_JOB_SIZE

#: The entry-point group engines register under (the name is the URL scheme).
GROUP = "twisted_stalk.engines"

#: The built-in openers by scheme, as setup.cfg declares them in :data:`GROUP`
#: (tests/test_engines.py checks that both say the same).
BUILT_IN: Dict[str, str] = {
    "memory": "twisted_stalk.engines:open_memory",
    "postgresql": "twisted_stalk.pg:open_url",
    "postgres": "twisted_stalk.pg:open_url",
}

#: What a URL scheme is made of (RFC 3986: a letter, then letters, digits,
#: ``+``, ``.``, ``-``), matched by hand: :mod:`re` costs ``stalkd``'s first
#: reply its import (server/_early.py).
_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_SCHEME_CHARS = _LETTERS | frozenset("0123456789+.-")


class EngineSettings:
    """What every engine is built with besides its URL.

    (A plain class, not a dataclass: stalkd's early loop opens its engine
    here before its first reply, and :mod:`dataclasses` would cost it the
    import of :mod:`inspect`; server/_early.py.)"""

    __slots__ = ("reactor", "max_job_size", "facts", "options")

    def __init__(self, reactor: Any, max_job_size: int = DEFAULT_MAX_JOB_SIZE,
                 facts: Optional[Facts] = None,
                 options: Optional[Mapping[str, Any]] = None) -> None:
        #: The reactor (any object with ``seconds()`` and ``callLater`` will do
        #: for the in-memory engine).
        self.reactor = reactor
        #: Largest job body in bytes (``-z``).
        self.max_job_size = max_job_size
        #: What ``stats`` says of the process (:class:`~twisted_stalk.core.facts.Facts`);
        #: None: the process's own (server/facts.py).
        self.facts = facts
        #: The rest of the server's configuration (``twistd`` option names), for
        #: the settings an engine takes from flags (the binlog's).
        self.options: Mapping[str, Any] = {} if options is None else options

    def process_facts(self) -> Facts:
        """:attr:`facts`, or this process's when none were given."""
        if self.facts is None:
            from .server.facts import ProcessFacts
            self.facts = ProcessFacts(PROTOCOL_VERSION, self.reactor.seconds())
        return self.facts


#: An engine's opener: ``opener(url, settings)`` -> a started :class:`Engine`.
if TYPE_CHECKING:  # pragma: no cover
    Opener = Callable[[str, EngineSettings], Engine]


def scheme_of(url: str) -> str:
    """The scheme of an engine URL, lower case; libpq's ``key=value`` form
    (no scheme) is ``postgresql``.  EngineError for anything else."""
    end = 1 if url[:1] in _LETTERS else 0
    while end and end < len(url) and url[end] in _SCHEME_CHARS:
        end += 1
    if end and url[end:end + 1] == ":":
        return url[:end].lower()
    if "=" in url:
        return "postgresql"
    raise EngineError(f"engine {url!r}: no scheme (memory:, postgresql://...)")


def opener_for(scheme: str) -> Opener:
    """The opener registered for ``scheme``: a built-in one, else an entry
    point of :data:`GROUP`.  EngineError if there is none.

    The built-ins are looked up first, without reading the installed
    packages' metadata (``importlib.metadata`` and its scan of ``sys.path``
    cost a server's start some milliseconds: docs/operations.md, "Startup
    time")."""
    target = BUILT_IN.get(scheme)
    if target is None:
        found = {ep.name: ep for ep in registered()}
        if scheme not in found:
            known = sorted(set(BUILT_IN) | set(found))
            raise EngineError(f"no engine for {scheme}: (known: {', '.join(known)})")
        return found[scheme].load()
    module, _, name = target.partition(":")
    __import__(module)  # (importlib's import_module: its module costs the first reply)
    return getattr(sys.modules[module], name)


def registered() -> list:
    """The entry points of :data:`GROUP` in the installed packages."""
    from importlib.metadata import entry_points
    try:
        return list(entry_points(group=GROUP))
    except TypeError:  # pragma: no cover - Python < 3.10
        return list(entry_points().get(GROUP, ()))  # type: ignore[attr-defined]


def open_engine(url: str, reactor: Any, max_job_size: int = DEFAULT_MAX_JOB_SIZE,
                facts: Optional[Facts] = None,
                options: Optional[Mapping[str, Any]] = None) -> Engine:
    """The engine ``url`` names, built and started (see the module docstring).

    Raises :class:`~twisted_stalk.core.engine.EngineError` (one line) when it
    cannot be used: no such engine, a directory or database it cannot use.
    """
    settings = EngineSettings(reactor, max_job_size, facts, options)
    return opener_for(scheme_of(url))(url, settings)


def engine_url(config: Mapping[str, Any]) -> str:
    """The engine URL the server's flags name: ``--engine``'s value, else ``memory:``."""
    return str(config.get("engine") or "memory:")


def open_configured(config: Mapping[str, Any], reactor: Any) -> Engine:
    """:func:`open_engine` for the server's configuration (``twistd`` option names)."""
    return open_engine(engine_url(config), reactor, config["max-job-size"], options=config)


def open_memory(url: str, settings: EngineSettings) -> Engine:
    """The ``memory:`` engine: :class:`~twisted_stalk.core.memory.MemoryEngine`,
    with the binlog of ``settings.options["binlog-dir"]`` replayed into it."""
    from .core.memory import MemoryEngine
    options = settings.options
    engine = MemoryEngine(settings.reactor, max_job_size=settings.max_job_size,
                          facts=settings.process_facts())
    if options.get("binlog-dir"):
        try:
            from .binlog import BinlogError, check_run_as, open_journal
        except ImportError:
            raise EngineError("-b/--binlog-dir: binlog persistence is not available in this build")
        try:
            check_run_as(options)  # the user twistd will become can write there
            journal = open_journal(options, settings.reactor)
            engine.journal = journal
            journal.attach(engine)  # the jobs recovered from the directory
        except BinlogError as e:
            raise EngineError(str(e))
    return engine


__all__ = ["BUILT_IN", "EngineError", "EngineSettings", "GROUP", "Opener", "engine_url",
           "open_configured", "open_engine", "open_memory", "opener_for", "registered",
           "scheme_of"]
