# -*- test-case-name: tests.test_binlog_server -*-
"""Opening the binlog for a server process: ``-b DIR`` and its startup checks.

:func:`open_journal` turns the ``-b/-f/-F/-s`` settings into a locked and
read :class:`~twisted_stalk.binlog.writer.BinlogJournal` (used by
``twistd beanstalk`` and ``stalkd``); :func:`check_run_as` checks, before
twistd drops privileges (``-u/-g``), that the user it will become can write
in the directory.  Both raise :class:`BinlogError` with a one-line message.
"""
from __future__ import annotations

import signal
from typing import Optional, Tuple

from ..protocol.constants import DEFAULT_BINLOG_SIZE
from .files import check_directory, check_writable_as
from .writer import BinlogJournal


def open_journal(config, reactor) -> BinlogJournal:
    """Build the journal for ``twistd beanstalk -b`` / ``stalkd -b`` (see tap.make_factory).

    Raises :class:`BinlogError` with a one-line message when the directory
    cannot be used.  The caller attaches it to the engine
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


def twistd_run_as(config) -> Tuple[Optional[int], Optional[int], bool]:
    """``(uid, gid, euid)`` twistd will switch to after ``makeService`` (its
    ``-u/-g/--euid``, with ``-u``'s own group when ``-g`` is not given), read
    from the twistd options ``config`` is a subcommand of; Nones when there
    are none (``stalkd`` switches user before it opens the binlog)."""
    parent = getattr(config, "parent", None)
    if parent is None:
        return None, None, False
    uid, gid = parent.get("uid"), parent.get("gid")
    if uid is not None and gid is None:
        import pwd
        gid = pwd.getpwuid(uid).pw_gid
    return uid, gid, bool(parent.get("euid"))


def check_run_as(config) -> None:
    """Raise :class:`BinlogError` unless the binlog directory of ``config`` is
    a directory the user twistd will run as can write in.

    twistd opens the binlog as the user it starts as (typically root) and
    switches user only later; without this check a directory that user
    cannot write in would only fail at the first new file.
    """
    directory = config["binlog-dir"]
    uid, gid, euid = twistd_run_as(config)
    if uid is None and gid is None:
        return
    check_directory(directory)
    check_writable_as(directory, uid, gid, euid)
