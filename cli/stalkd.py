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

Operations (twisted-stalk extensions to beanstalkd's flags):
 --tls-cert FILE        serve TLS on the -l/-p socket with this PEM certificate
 --tls-key FILE         its PEM private key (default: in the certificate file)
 --tls-ca FILE          require client certificates signed by these CAs (mutual TLS)
 --metrics ENDPOINT     serve /metrics, /healthz, /readyz over HTTP, e.g.
                        tcp:9100:interface=127.0.0.1
 --web ENDPOINT         serve the web console (docs/web.md), e.g.
                        tcp:8080:interface=127.0.0.1
 --web-auth FILE        credentials that let the console act (else read-only)
 --max-connections N    refuse connections beyond N (default: as many as the
                        open-file limit allows)
 --max-memory BYTES     put answers OUT_OF_MEMORY above BYTES of stored jobs
 --extensions           serve list-jobs, flush-tube and capabilities
 --shutdown-grace SECS  SIGTERM/SIGINT waits this long for workers still holding
                        jobs (default 0: exit at once, as beanstalkd does;
                        twistd beanstalk defaults to 10)
"""

_WITH_VALUE = set("bflpuzs")
_FLAGS = set("FvVh")
_LONG_WITH_VALUE = {"tls-cert", "tls-key", "tls-ca", "metrics", "max-connections",
                    "max-memory", "shutdown-grace", "web", "web-auth"}
_LONG_FLAGS = {"extensions"}


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
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if name in _LONG_FLAGS and not eq:
                opts[name] = True
            elif name in _LONG_WITH_VALUE:
                if not eq:
                    if i >= len(argv):
                        raise UsageError(f"option requires an argument: --{name}")
                    value = argv[i]
                    i += 1
                opts[name] = value
            else:
                raise UsageError(f"unknown option: {arg}")
            continue
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
        raise UsageError(f"{_dash(flag)} needs a whole number, got {text!r}")
    if not low <= value <= high:
        raise UsageError(f"{_dash(flag)} must be between {low} and {high}, got {value}")
    return value


def _dash(flag: str) -> str:
    return f"-{flag}" if len(flag) == 1 else f"--{flag}"


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
        for name in ("max-connections", "max-memory"):
            opts[name] = _int_option(opts, name, 0, 0, 2**63 - 1)
        if opts.get("web-auth") and not opts.get("web"):
            raise UsageError("--web-auth goes with --web")
        grace = opts.get("shutdown-grace")
        try:
            # Like beanstalkd, the drop-in exits at once unless asked to wait:
            # test suites stop it between tests while workers hold jobs.
            opts["shutdown-grace"] = 0.0 if grace is None else float(str(grace))
        except ValueError:
            raise UsageError(f"--shutdown-grace needs a number of seconds, got {grace!r}")
    except UsageError as e:
        sys.stderr.write(f"stalkd: {e} (stalkd -h lists the flags)\n")
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
    for name in ("tls-cert", "tls-key", "tls-ca", "metrics", "max-connections",
                 "max-memory", "extensions", "shutdown-grace"):
        config[name] = opts.get(name)
    tls = None
    if config["tls-cert"] or config["tls-key"] or config["tls-ca"]:
        from twisted_stalk.server.ops import tls_options
        from twisted_stalk.server.tls import TLSConfigError
        try:
            tls = tls_options(config)
        except TLSConfigError as e:
            raise fail(str(e), 1)
    try:
        factory = make_factory(config, reactor)
    except Exception as e:  # a binlog directory that cannot be used
        raise fail(str(e) or e.__class__.__name__, 10)
    factory.doStart()
    listening = factory
    if tls is not None:
        from twisted_stalk.server.tls import wrap_factory
        listening = wrap_factory(factory, tls)
    port = reactor.adoptStreamPort(sock.fileno(), family, listening)
    sock.close()
    install_drain_signal(factory)
    from twisted_stalk.server.ops import (install_signals_when_running, make_shutdown,
                                          metrics_site)
    shutdown = make_shutdown(factory, reactor, port.stopListening, config)
    install_signals_when_running(reactor, shutdown)
    status = [0]
    if config["metrics"]:
        from twisted.internet.endpoints import serverFromString

        def metrics_failed(failure) -> None:
            sys.stderr.write(f"stalkd: cannot serve --metrics: {failure.getErrorMessage()}\n")
            status[0] = 111
            reactor.stop()
        try:
            endpoint = serverFromString(reactor, str(config["metrics"]))
        except Exception as e:  # a malformed endpoint string
            raise fail(f"--metrics {config['metrics']}: {e}", 111)
        endpoint.listen(metrics_site(factory, shutdown, lambda: port.connected)
                        ).addErrback(metrics_failed)
    if opts.get("web"):
        _serve_web(reactor, factory, opts, status)
    reactor.run()
    return status[0]


def _serve_web(reactor, factory, opts: Dict[str, object], status: List[int]) -> None:
    """``--web ENDPOINT`` (and ``--web-auth FILE``): the console (docs/web.md)."""
    from twisted_stalk.web import listen
    from twisted_stalk.web.auth import AuthFileError

    def failed(failure) -> None:
        sys.stderr.write(f"stalkd: cannot serve --web: {failure.getErrorMessage()}\n")
        status[0] = 111
        reactor.stop()
    try:
        listen(factory, reactor, str(opts["web"]), opts.get("web-auth")).addErrback(failed)
    except AuthFileError as e:
        raise fail(str(e), 1)
    except Exception as e:  # a malformed endpoint string
        raise fail(f"--web {opts['web']}: {e}", 111)


if __name__ == "__main__":
    sys.exit(main())
