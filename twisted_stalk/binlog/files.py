# -*- test-case-name: tests.test_binlog -*-
"""The binlog directory and its files: checks, creation, preallocation, removal.

Everything here touches the file system rather than a record:

* :func:`check_directory` and :func:`check_writable_as`: the startup checks
  (the path is a directory; the user a server will run as may write in it);
* :func:`create_file`: a new ``binlog.<seq>`` with its header, preallocated by
  :func:`preallocate`, which copes with both ``posix_fallocate`` conventions
  (CPython raises, PyPy returns the error number);
* :func:`finish_file`: a file no longer written is cut to its used size,
  fsynced and closed;
* :class:`OldFiles`: the files before the current one, their sizes and
  damage, tidying them after recovery, and removing the oldest of them;
* :func:`sync_directory` and :func:`unlink_quietly`.
"""
from __future__ import annotations

import errno
import os
import stat
from typing import List, Optional, Set, Tuple

from twisted.logger import Logger

from .format import file_header, file_name
from .replay import BinlogError, FileInfo

#: posix_fallocate errors that mean "not supported here": the file is then
#: written without preallocation (running out of space shows as a write error).
_NO_FALLOCATE = frozenset((errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS))


def round_size(size: int) -> int:
    """``-s`` rounded up to a multiple of 4096 bytes (as beanstalkd documents)."""
    size = max(int(size), 4096)
    return (size + 4095) // 4096 * 4096


def check_directory(directory: str) -> None:
    """Raise :class:`BinlogError` unless ``directory`` exists and is a directory."""
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        raise BinlogError(f"binlog directory {directory} does not exist")
    except OSError as e:
        raise BinlogError(f"cannot use binlog directory {directory}: {e.strerror}")
    if not stat.S_ISDIR(st.st_mode):
        raise BinlogError(f"binlog directory {directory} is not a directory")


def check_writable_as(directory: str, uid: Optional[int], gid: Optional[int],
                      euid: bool = False) -> None:
    """Raise :class:`BinlogError` unless ``uid``/``gid`` may create files in ``directory``.

    For a server started as root that switches user later (``twistd -u/-g``):
    a forked child switches exactly as twistd will
    (:func:`twisted.python.util.switchUID`: groups, gid, uid) and asks the
    kernel (``access``), so supplementary groups, ACLs and read-only mounts
    all count.  Nothing is checked when no switch will happen, or when this
    process cannot switch (twistd then reports that itself).
    """
    if (uid is None or uid == os.geteuid()) and (gid is None or gid == os.getegid()):
        return
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 2
        try:
            from twisted.python.util import switchUID
            switchUID(uid, gid, euid)
            if os.access in os.supports_effective_ids:
                ok = os.access(directory, os.W_OK | os.X_OK, effective_ids=True)
            else:
                ok = os.access(directory, os.W_OK | os.X_OK)
            code = 0 if ok else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 1:
        raise BinlogError(f"binlog directory {directory} is not writable by "
                          f"{_describe_user(uid, gid)}, which the server runs as")


def _describe_user(uid: Optional[int], gid: Optional[int]) -> str:
    import grp
    import pwd
    parts = []
    if uid is not None:
        try:
            parts.append(f"user {pwd.getpwuid(uid).pw_name} (uid {uid})")
        except KeyError:
            parts.append(f"uid {uid}")
    if gid is not None:
        try:
            parts.append(f"group {grp.getgrgid(gid).gr_name} (gid {gid})")
        except KeyError:
            parts.append(f"gid {gid}")
    return " and ".join(parts)


def preallocate(fd: int, length: int) -> None:
    """Reserve the first ``length`` bytes of ``fd`` on disk (``posix_fallocate``).

    Raises :class:`OSError` when there is no room (ENOSPC, EFBIG, EDQUOT...).
    CPython raises the error; PyPy returns it as a number (0 for success):
    both are handled.  A file system without fallocate is accepted as it is.
    """
    while True:
        try:
            err = os.posix_fallocate(fd, 0, length)
        except OSError as e:
            err = e.errno
        if err != errno.EINTR:
            break
    if err and err not in _NO_FALLOCATE:
        raise OSError(err, os.strerror(err))


def create_file(directory: str, seq: int, next_id: int, capacity: int) -> int:
    """Create ``binlog.<seq>`` with its header, preallocated to ``capacity``
    bytes; returns its descriptor.  Raises :class:`OSError` (and leaves no
    file behind) when it cannot be made, e.g. for want of space."""
    path = os.path.join(directory, file_name(seq))
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.pwrite(fd, file_header(seq, next_id), 0)
        preallocate(fd, capacity)
    except BaseException:
        os.close(fd)
        unlink_quietly(path)
        raise
    return fd


def finish_file(fd: int, used: int, sync: bool) -> Optional[OSError]:
    """Cut a file that is no longer written to its ``used`` bytes (giving back
    unused preallocated space), fsync it when ``sync``, and close it.  The
    descriptor is closed in any case; returns the error of the cut or sync."""
    error = None
    try:
        os.ftruncate(fd, used)
        if sync:
            os.fsync(fd)
    except OSError as e:
        error = e
    os.close(fd)
    return error


def sync_directory(directory: str) -> None:
    """fsync ``directory`` so that files created or removed in it stay so."""
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class OldFiles:
    """The binlog files before the one being written, oldest first.

    Each entry is ``[seq, size]``; ``total`` is the sum of the sizes and
    ``damaged`` the sequence numbers of files recovery found damage in (they
    are kept as ``binlog.N.damaged`` when removed, for inspection).
    """

    log = Logger(namespace="twisted_stalk.binlog")

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.entries: List[List[int]] = []
        self.total = 0
        self.damaged: Set[int] = set()

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def oldest(self) -> Optional[int]:
        """The sequence number of the oldest file, or None when there is none."""
        return self.entries[0][0] if self.entries else None

    @property
    def newest(self) -> Optional[int]:
        return self.entries[-1][0] if self.entries else None

    def adopt(self, recovered: List[FileInfo]) -> int:
        """Take over the files recovery read; returns the newest sequence number (0: none).

        Tidies them on the way so that they are neither reported nor kept
        again: empty or headerless files are removed, torn tails and unused
        preallocated space cut off (damaged files are left as they are).
        """
        last = 0
        for info in recovered:
            last = max(last, info.seq)
            if info.drop:
                unlink_quietly(info.path)
                continue
            size = info.size
            if not info.damaged and info.valid_end < size:
                try:
                    os.truncate(info.path, info.valid_end)
                    size = info.valid_end
                except OSError:
                    pass
            if info.damaged:
                self.damaged.add(info.seq)
            self.add(info.seq, size)
        return last

    def add(self, seq: int, size: int) -> None:
        """A file that is no longer written (newer than every file added before)."""
        self.entries.append([seq, size])
        self.total += size

    def remove_below(self, seq: int) -> Tuple[int, int]:
        """Remove every file older than ``seq``: ``(files removed, bytes freed)``.

        The caller has made sure that nothing in them is needed any more (and
        that what replaces them is on disk).  Files go oldest-first only: if
        one cannot be removed, it and every newer one stay (they hold the
        deletes and updates of its jobs) and are tried again next time.
        """
        removed = freed = 0
        entries = self.entries
        while entries and entries[0][0] < seq:
            old, size = entries[0]
            if not self._remove(old):
                break
            del entries[0]
            removed += 1
            freed += size
        self.total -= freed
        return removed, freed

    def _remove(self, seq: int) -> bool:
        path = os.path.join(self.directory, file_name(seq))
        if seq in self.damaged:
            try:
                os.rename(path, path + ".damaged")
            except OSError:
                pass
            else:
                self.damaged.discard(seq)
                self.log.warn("binlog: {file} had damage; its good records are now "
                              "in newer files and it was kept as {file}.damaged",
                              file=file_name(seq))
                return True
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            self.log.error("binlog: cannot remove {file} ({why}): keeping it and the "
                           "files after it", file=file_name(seq), why=e.strerror or e)
            return False
        self.damaged.discard(seq)
        return True
