"""``stalkd``: a drop-in for the ``beanstalkd`` command line.

Accepts beanstalkd's flags (``-b -f -F -l -p -u -z -s -v -V -h``) so scripts and
test suites that start ``beanstalkd`` can start this instead.  The listening
socket is bound before Twisted is imported, so connections are accepted (into
the kernel's backlog) within a few milliseconds of launch; the reactor adopts
the socket once it is loaded.

Exit status follows beanstalkd: 5 for a bad flag, 111 when the address cannot
be bound, 10 for a binlog directory that cannot be used, 0 after SIGTERM.
"""
from __future__ import annotations

import os
import socket
import sys
from typing import Dict, List, Optional, Tuple

USAGE = """Use: stalkd [OPTIONS]

Options:
 -b DIR   write-ahead log directory
 -f MS    fsync at most once every MS milliseconds (default is 50ms);
          use -f0 for "always fsync"
 -F       never fsync
 -l ADDR  listen on address (default is 0.0.0.0); unix:PATH for a unix socket
 -p PORT  listen on port (default is 11300)
 -u USER  become user and group
 -z BYTES set the maximum job size in bytes (default is 65535);
          max allowed is 1073741824 bytes
 -s BYTES set the size of each write-ahead log file (default is 10485760);
          will be rounded up to a multiple of 4096 bytes
 -v       show version information
 -V       increase verbosity
 -h       show this help
"""

_WITH_VALUE = set("bflpuzs")
_FLAGS = set("FvVh")


class UsageError(Exception):
    pass


def fail(message: str, status: int) -> "SystemExit":
    sys.stderr.write(f"stalkd: {message}\n")
    return SystemExit(status)


def parse_argv(argv: List[str]) -> Dict[str, object]:
    """Parse beanstalkd-style flags: ``-p 11300``, ``-p11300``, ``-VV``."""
    opts: Dict[str, object] = {"V": 0}
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("-") or arg == "-":
            raise UsageError(f"unknown argument: {arg}")
        j = 1
        while j < len(arg):
            flag = arg[j]
            j += 1
            if flag in _FLAGS:
                if flag == "V":
                    opts["V"] = int(opts["V"]) + 1  # type: ignore[arg-type]
                else:
                    opts[flag] = True
            elif flag in _WITH_VALUE:
                value = arg[j:]
                if not value:
                    if i >= len(argv):
                        raise UsageError(f"flag requires an argument: -{flag}")
                    value = argv[i]
                    i += 1
                opts[flag] = value
                break
            else:
                raise UsageError(f"unknown flag: -{flag}")
    return opts


def _int_option(opts: Dict[str, object], flag: str, default: int, low: int, high: int) -> int:
    text = opts.get(flag)
    if text is None:
        return default
    try:
        value = int(str(text))
    except ValueError:
        raise UsageError(f"-{flag} needs a whole number, got {text!r}")
    if not low <= value <= high:
        raise UsageError(f"-{flag} must be between {low} and {high}, got {value}")
    return value


def bind_listener(address: str, port: int) -> Tuple[socket.socket, int]:
    """Bind and listen before anything heavy is imported; returns (socket, family)."""
    if address.startswith("unix:"):
        path = address[len("unix:"):]
        try:
            if os.path.exists(path) and not os.path.isdir(path):
                os.unlink(path)
        except OSError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
    else:
        infos = socket.getaddrinfo(address or None, port, socket.AF_UNSPEC,
                                   socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
        family, kind, proto, _, sockaddr = infos[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
    sock.listen(1024)
    sock.setblocking(False)
    return sock, sock.family


def become_user(name: str) -> None:
    import grp
    import pwd
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise fail(f"getpwnam(\"{name}\"): no such user", 1)
    try:
        os.setgroups([g.gr_gid for g in grp.getgrall() if name in g.gr_mem] + [entry.pw_gid])
        os.setgid(entry.pw_gid)
        os.setuid(entry.pw_uid)
    except OSError as e:
        raise fail(f"cannot become user {name}: {e.strerror}", 1)


def _exit_on_early_sigterm(signum, frame) -> None:
    # SIGTERM before the reactor runs: nothing has been acknowledged yet.
    raise SystemExit(0)


def main(argv: Optional[List[str]] = None) -> int:
    import signal
    signal.signal(signal.SIGTERM, _exit_on_early_sigterm)
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts = parse_argv(argv)
        port = _int_option(opts, "p", 11300, 0, 65535)
        max_job_size = _int_option(opts, "z", 65535, 0, 1073741824)
        fsync_ms = _int_option(opts, "f", 50, 0, 2**31 - 1)
        binlog_size = _int_option(opts, "s", 10485760, 1, 2**31 - 1)
    except UsageError as e:
        sys.stderr.write(f"stalkd: {e}\n{USAGE}")
        return 5
    if opts.get("h"):
        sys.stdout.write(USAGE)
        return 0
    if opts.get("v"):
        from twisted_stalk import PROTOCOL_VERSION, __version__
        sys.stdout.write(f"stalkd {__version__} (beanstalkd {PROTOCOL_VERSION} compatible)\n")
        return 0
    address = str(opts.get("l", "0.0.0.0"))
    try:
        sock, family = bind_listener(address, port)
    except OSError as e:
        where = address if address.startswith("unix:") else f"{address}:{port}"
        raise fail(f"cannot listen on {where}: {e.strerror or e}", 111)
    except UnicodeError:
        raise fail(f"bad listen address: {address}", 111)
    if opts.get("u"):
        become_user(str(opts["u"]))
    return _serve(sock, family, opts, max_job_size, fsync_ms, binlog_size)


def _serve(sock: socket.socket, family: int, opts: Dict[str, object],
           max_job_size: int, fsync_ms: int, binlog_size: int) -> int:
    # Heavy imports only now that the socket is listening.
    from twisted_stalk.server import reactor as lean
    try:
        lean.install()
    except Exception:  # pragma: no cover - another reactor already installed
        pass
    from twisted.internet import reactor
    from twisted.logger import globalLogBeginner, textFileLogObserver, LogLevel, FilteringLogObserver, LogLevelFilterPredicate

    from twisted_stalk.server.tap import install_drain_signal, make_factory

    verbosity = int(opts["V"])  # type: ignore[arg-type]
    level = LogLevel.warn if verbosity == 0 else (LogLevel.info if verbosity == 1 else LogLevel.debug)
    observer = FilteringLogObserver(textFileLogObserver(sys.stderr),
                                    [LogLevelFilterPredicate(defaultLogLevel=level)])
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)

    config = {
        "max-job-size": max_job_size,
        "binlog-dir": opts.get("b"),
        "fsync-ms": fsync_ms,
        "no-fsync": bool(opts.get("F")),
        "binlog-size": binlog_size,
    }
    try:
        factory = make_factory(config, reactor)
    except Exception as e:  # a binlog directory that cannot be used
        raise fail(str(e) or e.__class__.__name__, 10)
    factory.doStart()
    reactor.adoptStreamPort(sock.fileno(), family, factory)
    sock.close()
    install_drain_signal(factory)
    reactor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
