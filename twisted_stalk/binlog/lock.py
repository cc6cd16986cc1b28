# -*- test-case-name: tests.test_binlog -*-
"""One server per binlog directory: an exclusive lock on ``DIR/lock``.

Both lock kinds are taken: ``flock`` (conflicts even between two opens in
one process) and a POSIX ``lockf`` lock, which is what beanstalkd takes on
the same file name, so a beanstalkd and a twisted-stalk cannot share a
directory either.  The lock file holds the owner's pid, for the message the
second server prints.
"""
from __future__ import annotations

import errno
import fcntl
import os
from typing import Optional

from .replay import BinlogError

LOCK_NAME = "lock"


class DirectoryLock:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, LOCK_NAME)
        self.fd: Optional[int] = None

    def acquire(self) -> "DirectoryLock":
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise BinlogError(f"cannot use binlog directory {self.directory}: "
                              f"cannot create {LOCK_NAME}: {e.strerror}")
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise BinlogError(f"cannot lock binlog directory {self.directory}: {e.strerror}")
                owner = _read_owner(fd)
                who = f" (pid {owner})" if owner else ""
                raise BinlogError(f"binlog directory {self.directory} is in use by "
                                  f"another server{who}")
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, b"%d\n" % os.getpid(), 0)
            except OSError as e:
                raise BinlogError(f"cannot use binlog directory {self.directory}: "
                                  f"cannot write {LOCK_NAME}: {e.strerror}")
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        return self

    def release(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                os.ftruncate(fd, 0)
            except OSError:
                pass
            os.close(fd)


def _read_owner(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""
