"""Persistence: a write-ahead binlog that loses nothing acknowledged and stays small.

``open_journal(config, reactor)`` (used by ``twistd beanstalk -b`` and
``stalkd -b``) locks and reads the directory; ``BinlogJournal.attach(queue)``
restores the jobs and starts writing.  See docs/persistence.md.
"""
from .format import file_name
from .replay import BinlogError, Recovery, read_directory
from .writer import BinlogJournal, open_journal

__all__ = ["BinlogError", "BinlogJournal", "Recovery", "file_name", "open_journal",
           "read_directory"]
