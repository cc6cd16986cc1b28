# -*- test-case-name: tests.test_binlog,tests.test_binlog_server -*-
"""Persistence: a write-ahead binlog that loses nothing acknowledged and stays small.

``open_journal(config, reactor)`` (used by ``twistd beanstalk -b`` and
``stalkd -b``) locks and reads the directory; ``BinlogJournal.attach(engine)``
restores the jobs and starts writing.  See docs/persistence.md.

Modules: :mod:`.format` (file and record layout), :mod:`.writer` (the
journal the engine calls), :mod:`.files` (the directory and its files),
:mod:`.syncer` (the fsync thread), :mod:`.compaction` (getting space back),
:mod:`.replay` (reading a directory back), :mod:`.lock` (one server per
directory), :mod:`.startup` (opening it for a server process).
"""
from .format import file_name
from .replay import BinlogError, Recovery, read_directory
from .startup import check_run_as, open_journal
from .writer import BinlogJournal

__all__ = ["BinlogError", "BinlogJournal", "Recovery", "check_run_as", "file_name",
           "open_journal", "read_directory"]
