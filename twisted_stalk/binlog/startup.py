# -*- test-case-name: tests.test_binlog_server -*-
"""Opening the binlog for a server process: ``-b DIR``.

:func:`open_journal` turns the ``-b/-f/-F/-s`` settings into a locked and
read :class:`~twisted_stalk.binlog.writer.BinlogJournal` (used by
``twistd beanstalk`` and ``stalkd``); it raises :class:`BinlogError` with a
one-line message when the directory cannot be used.
"""
from __future__ import annotations

import signal
from ..protocol.constants import DEFAULT_BINLOG_SIZE
from .writer import BinlogJournal


def open_journal(config, reactor) -> BinlogJournal:
    """Build the journal for ``twistd beanstalk -b`` / ``stalkd -b`` (see tap.make_factory).

    Raises :class:`BinlogError` with a one-line message when the directory
    cannot be used.  The caller attaches it to the queue
    (:meth:`BinlogJournal.attach`); reactor shutdown (SIGTERM) flushes it.
    """
    try:  # a file size limit must turn into an error reply, not kill us
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not main thread
        pass
    journal = BinlogJournal(
        config["binlog-dir"], reactor,
        max_size=config.get("binlog-size") or DEFAULT_BINLOG_SIZE,
        fsync_ms=50 if config.get("fsync-ms") is None else config["fsync-ms"],
        no_fsync=bool(config.get("no-fsync")),
        sync_thread=True)
    journal.open()
    add_trigger = getattr(reactor, "addSystemEventTrigger", None)
    if add_trigger is not None:
        add_trigger("before", "shutdown", journal.close)
    return journal
