"""``stalkd``: a drop-in for the ``beanstalkd`` command line.

Accepts beanstalkd's flags (``-b -f -F -l -p -u -z -s -v -V -h``) so scripts and
test suites that start ``beanstalkd`` can start this instead.  The listening
socket is bound before Twisted is imported, so connections are accepted (into
the kernel's backlog) within a few milliseconds of launch; the reactor adopts
the socket once it is loaded.  With ``--engine`` the port is bound only once
the database has answered (the schema checked, the node registered): a
server that cannot start never holds clients on an open port.

Exit status follows beanstalkd: 5 for a bad flag, 111 when the address (or
the ``--metrics`` endpoint) cannot be bound, 10 for a binlog directory that
cannot be used, 0 after SIGTERM or SIGINT, from the moment the port is bound.
"""
from __future__ import annotations

import _socket
import os
import sys

# Nothing heavier before the first reply (docs/operations.md, "Startup time"):
# the bind uses _socket (the socket module's enums and selectors cost ~10 ms),
# and typing is for the type checker only.
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    import socket
    from typing import Optional

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
 --metrics-tubes N      tubes with their own /metrics series at most (default
                        100: the busiest active ones; the rest are summed)
 --metrics-tube-pattern REGEX
                        only tubes whose names match get their own series
 --max-connections N    at N connections stop accepting until one closes
                        (default: as many as the open-file limit allows)
 --max-connections-wait SECS
                        at the limit, a connection that waited SECS in the
                        listen backlog is accepted and closed, counted and
                        logged (default 2; 0: at once)
 --max-memory BYTES     put answers OUT_OF_MEMORY above BYTES of stored jobs
 --extensions           serve list-jobs, flush-tube and capabilities
 --stats-yaml 1.12      print stats string values bare, as beanstalkd 1.12 did
                        (default 1.13: in double quotes)
 --shutdown-grace SECS  SIGTERM/SIGINT waits this long for workers still holding
                        jobs (default 0: exit at once, as beanstalkd does;
                        twistd beanstalk defaults to 10)
 --tls-handshake-timeout SECS
                        a TLS client that has not completed its handshake by
                        then is disconnected (default 5; 0: no limit)
 --engine CONNINFO      keep the queue in PostgreSQL (a libpq connection string,
                        docs/ha.md): several servers then serve one queue
 --engine-init          create or migrate --engine's schema, then exit
 --busy-poll USEC       before sleeping, look for new input for up to USEC
                        microseconds (default 0: off; a shorter round trip
                        for more CPU: docs/operations.md, "Busy polling")
"""

_WITH_VALUE = set("bflpuzs")
_FLAGS = set("FvVh")
_LONG_WITH_VALUE = {"tls-cert", "tls-key", "tls-ca", "metrics", "max-connections",
                    "max-connections-wait",
                    "max-memory", "shutdown-grace", "tls-handshake-timeout", "metrics-tubes",
                    "metrics-tube-pattern", "stats-yaml", "web", "web-auth", "engine",
                    "busy-poll"}
#: beanstalkd's JOB_DATA_SIZE_LIMIT_MAX: a larger -z is capped with a warning.
MAX_JOB_SIZE = 1073741824
_LONG_FLAGS = {"extensions", "engine-init"}


class FlagError(Exception):
    """A command line ``stalkd`` cannot run with (a bad or missing flag value):
    printed as one line, exit status 5."""


def fail(message: str, status: int) -> "SystemExit":
    sys.stderr.write(f"stalkd: {message}\n")
    return SystemExit(status)


def parse_argv(argv: list[str]) -> dict[str, object]:
    """Parse beanstalkd-style flags: ``-p 11300``, ``-p11300``, ``-VV``."""
    opts: dict[str, object] = {"V": 0}
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("-") or arg == "-":
            raise FlagError(f"unknown argument: {arg}")
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if name in _LONG_FLAGS and not eq:
                opts[name] = True
            elif name in _LONG_WITH_VALUE:
                if not eq:
                    if i >= len(argv):
                        raise FlagError(f"option requires an argument: --{name}")
                    value = argv[i]
                    i += 1
                opts[name] = value
            else:
                raise FlagError(f"unknown option: {arg}")
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
                        raise FlagError(f"flag requires an argument: -{flag}")
                    value = argv[i]
                    i += 1
                opts[flag] = value
                break
            else:
                raise FlagError(f"unknown flag: -{flag}")
    return opts


def _int_option(opts: dict[str, object], flag: str, default: int, low: int, high: int) -> int:
    text = opts.get(flag)
    if text is None:
        return default
    try:
        value = int(str(text))
    except ValueError:
        raise FlagError(f"{_dash(flag)} needs a whole number, got {text!r}")
    if not low <= value <= high:
        raise FlagError(f"{_dash(flag)} must be between {low} and {high}, got {value}")
    return value


def _dash(flag: str) -> str:
    return f"-{flag}" if len(flag) == 1 else f"--{flag}"


def bind_listener(address: str, port: int) -> tuple[_socket.socket, int]:
    """Bind and listen before anything heavy is imported; returns (socket,
    family): a :class:`_socket.socket` (the base of :class:`socket.socket`,
    whose module is not loaded yet; :func:`_serve` wraps it once it is)."""
    if address.startswith("unix:"):
        path = address[len("unix:"):]
        try:
            if os.path.exists(path) and not os.path.isdir(path):
                os.unlink(path)
        except OSError:
            pass
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        sock.bind(path)
    else:
        # An ASCII host as bytes: a str would load the idna codec (~3 ms).
        host = (address.encode("ascii") if address.isascii() else address) if address else None
        infos = _socket.getaddrinfo(host, port, _socket.AF_UNSPEC,
                                    _socket.SOCK_STREAM, 0, _socket.AI_PASSIVE)
        family, kind, proto, _, sockaddr = infos[0]
        sock = _socket.socket(family, kind, proto)
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
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


def job_size_limit(opts: dict[str, object]) -> int:
    """``-z``, capped at 1 GiB with a warning as beanstalkd does."""
    size = _int_option(opts, "z", 65535, 0, 2**63 - 1)
    if size > MAX_JOB_SIZE:
        sys.stderr.write(f"stalkd: maximum job size was set to {MAX_JOB_SIZE}\n")
        size = MAX_JOB_SIZE
    return size


def main(argv: list[str] | None = None) -> int:
    from .boot import EarlySignals
    early = EarlySignals().install()
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts = parse_argv(argv)
        port = _int_option(opts, "p", 11300, 0, 65535)
        max_job_size = job_size_limit(opts)
        fsync_ms = _int_option(opts, "f", 50, 0, 2**31 - 1)
        binlog_size = _int_option(opts, "s", 10485760, 1, 2**31 - 1)
        for name in ("max-connections", "max-memory"):
            opts[name] = _int_option(opts, name, 0, 0, 2**63 - 1)
        # Like beanstalkd, the drop-in exits at once unless asked to wait:
        # test suites stop it between tests while workers hold jobs.
        opts["shutdown-grace"] = _seconds(opts, "shutdown-grace", 0.0)
        opts["tls-handshake-timeout"] = _seconds(opts, "tls-handshake-timeout", 5.0)
        if opts.get("max-connections-wait") is not None:  # (default: limits.DEFAULT_WAIT)
            opts["max-connections-wait"] = _seconds(opts, "max-connections-wait", 0.0)
        opts["metrics-tubes"] = _int_option(opts, "metrics-tubes", 100, 0, 2**31 - 1)
        if opts.get("web-auth") and not opts.get("web"):
            raise FlagError("--web-auth goes with --web")
        if opts.get("engine") and opts.get("b"):
            from twisted_stalk.pg import ENGINE_WITH_BINLOG
            raise FlagError(ENGINE_WITH_BINLOG)
    except FlagError as e:
        sys.stderr.write(f"stalkd: {e} (stalkd -h lists the flags)\n")
        return 5
    if opts.get("h"):
        sys.stdout.write(USAGE)
        return 0
    if opts.get("engine-init"):
        return _engine_init(opts)
    if opts.get("v"):
        from twisted_stalk import PROTOCOL_VERSION, __version__
        sys.stdout.write(f"stalkd {__version__} (beanstalkd {PROTOCOL_VERSION} compatible)\n")
        return 0
    address = str(opts.get("l", "0.0.0.0"))
    if opts.get("engine"):  # bound once the database has answered (_serve)
        return _serve(None, (address, port), opts, max_job_size, fsync_ms, binlog_size, early)
    return _serve(bind_or_exit(address, port), (address, port), opts, max_job_size, fsync_ms,
                  binlog_size, early)


def bind_or_exit(address: str, port: int) -> tuple[_socket.socket, int]:
    """:func:`bind_listener`, or exit 111 with one line."""
    try:
        return bind_listener(address, port)
    except OSError as e:
        where = address if address.startswith("unix:") else f"{address}:{port}"
        raise fail(f"cannot listen on {where}: {e.strerror or e}", 111)
    except UnicodeError:
        raise fail(f"bad listen address: {address}", 111)


def _engine_init(opts: dict[str, object]) -> int:
    """``--engine-init``: create or migrate the schema; 0, or 10 if it cannot."""
    if not opts.get("engine"):
        sys.stderr.write("stalkd: --engine-init goes with --engine (stalkd -h lists the flags)\n")
        return 5
    from twisted_stalk.pg import EngineError, init_schema
    try:
        sys.stdout.write(init_schema(str(opts["engine"])) + "\n")
    except EngineError as e:
        sys.stderr.write(f"stalkd: {e}\n")
        return 10
    return 0


def _seconds(opts: dict[str, object], name: str, default: float) -> float:
    text = opts.get(name)
    if text is None:
        return default
    try:
        value = float(str(text))
    except ValueError:
        raise FlagError(f"--{name} needs a number of seconds, got {text!r}")
    if not value >= 0:
        raise FlagError(f"--{name} must not be negative, got {text}")
    return value


def _serve(bound: Optional[tuple[_socket.socket, int]], where: tuple[str, int],
           opts: dict[str, object], max_job_size: int, fsync_ms: int, binlog_size: int,
           early) -> int:
    """Everything after the bind, in the order daemons do it: import, read the
    secrets, bind the other listeners, drop privileges (``-u``), open the
    binlog as that user, serve.  With ``--engine`` (``bound`` None) the main
    port is bound only once the database has answered, so clients never wait
    on a port whose server cannot start; then privileges drop."""
    config: dict[str, object] = {
        "max-job-size": max_job_size,
        "binlog-dir": opts.get("b"),
        "fsync-ms": fsync_ms,
        "no-fsync": bool(opts.get("F")),
        "binlog-size": binlog_size,
    }
    for name in ("tls-cert", "tls-key", "tls-ca", "metrics", "max-connections",
                 "max-connections-wait", "max-memory", "extensions", "shutdown-grace", "tls-handshake-timeout",
                 "metrics-tubes", "metrics-tube-pattern", "stats-yaml", "engine", "busy-poll"):
        config[name] = opts.get(name)
    tls_wanted = bool(config["tls-cert"] or config["tls-key"] or config["tls-ca"])

    # Serve from now on where the flags allow, while Twisted loads (server/_early.py).
    serving = None
    if bound is not None:
        from .server._early import serve_early
        serving = serve_early(bound[0], bound[1], opts, max_job_size,
                              lambda: early.drain_requested)
        if serving is not None:
            # What the loop's first stats and stats-tube would import (the
            # resource extension; typing, for the named tuples built on first
            # use): imported here, beside the loop, rather than by the loop
            # while this thread imports Twisted (an import waits for the
            # import lock, which a finder holds while it looks).
            import resource  # noqa: F401
            from .core.readmodel import TubeFigures  # noqa: F401

    # Heavy imports only now that the socket is listening, and only those
    # the flags need (see boot.py).
    from .boot import lean_imports
    with lean_imports(tls=tls_wanted):
        from twisted_stalk.server import reactor as lean
        try:
            lean.install()
        except Exception:  # pragma: no cover - another reactor already installed
            pass
        from twisted.internet import reactor
        from twisted.logger import (FilteringLogObserver, LogLevel, LogLevelFilterPredicate,
                                    globalLogBeginner, textFileLogObserver)

        from twisted_stalk.server import factory as _factory  # noqa: F401  (before -u)
        from twisted_stalk.server import ops
        if config["binlog-dir"]:
            import twisted_stalk.binlog  # noqa: F401  (imported before -u drops privileges)
        from twisted_stalk.server.listening import ListenError, listen_now, listening_line
        if config["metrics"]:
            from twisted_stalk.server import metrics  # noqa: F401
        if opts.get("web"):
            from twisted_stalk import web
            from twisted_stalk.web.auth import AuthFileError

    try:  # the flags checked by the modules that use them
        ops.stats_quoted(config["stats-yaml"])  # type: ignore[arg-type]
        policy = ops.tube_policy(config)
        ops.busy_poll_window(config)
    except ValueError as e:
        sys.stderr.write(f"stalkd: {e} (stalkd -h lists the flags)\n")
        return 5

    verbosity = int(opts["V"])  # type: ignore[arg-type]
    level = LogLevel.warn if verbosity == 0 else (LogLevel.info if verbosity == 1 else LogLevel.debug)
    levels = LogLevelFilterPredicate(defaultLogLevel=level)
    if verbosity == 0:  # the console's actions and logins are its audit trail (docs/web.md)
        levels.setLogLevelForNamespace("twisted_stalk.web", LogLevel.info)
    observer = FilteringLogObserver(textFileLogObserver(sys.stderr), [levels])
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)

    tls = None
    if tls_wanted:  # read the certificate and key while still privileged
        import twisted.protocols.tls  # noqa: F401  (wrap_factory's, before -u)
        from twisted_stalk.server.tls import TLSConfigError, wrap_factory
        try:
            tls = ops.tls_options(config)
        except TLSConfigError as e:
            raise fail(str(e), 1)
    site = None
    #: (what, port, endpoint) of every listener, announced once all are up.
    listeners: list = []
    if config["metrics"]:
        site = ops.metrics_site()  # served once the queue exists, before the reactor runs
        try:
            listeners.append(("--metrics", listen_now(reactor, str(config["metrics"]), site,
                                                      "--metrics"), str(config["metrics"])))
        except ListenError as e:
            raise fail(str(e), 111)
    credentials = None
    if opts.get("web-auth"):  # a secret: read it while still privileged
        try:
            credentials = web.load_credentials(str(opts["web-auth"]))
        except AuthFileError as e:
            raise fail(str(e), 1)
    if opts.get("u") and bound is not None:
        become_user(str(opts["u"]))
    handed = serving.stop() if serving is not None else []  # the reactor takes over
    if serving is not None and serving.failure is not None:
        sys.stderr.write(f"stalkd: the early loop failed: {serving.failure!r}\n")
    try:
        from twisted_stalk.engines import open_configured
        engine = serving.engine if serving is not None else open_configured(config, reactor)
        factory = ops.make_factory(engine, config, reactor)
    except Exception as e:  # a binlog directory (or --engine database) that cannot be used
        raise fail(str(e) or e.__class__.__name__, 10)
    if bound is None:
        bound = bind_or_exit(*where)
        if opts.get("u"):
            become_user(str(opts["u"]))
    sock, family = bound
    import socket
    if not isinstance(sock, socket.socket):  # bound with _socket (bind_listener)
        sock = socket.socket(family, socket.SOCK_STREAM, 0, sock.detach())
        sock.setblocking(False)  # (PyPy's wrapper does not read it from the descriptor)
    if early.drain_requested:
        ops.enter_drain(factory)
    ops.install_drain_signal(factory)
    factory.doStart()
    listening = factory
    if tls is not None:
        listening = wrap_factory(factory, tls, float(config["tls-handshake-timeout"]), reactor)
    port = reactor.adoptStreamPort(sock.fileno(), family, listening)
    listeners.insert(0, ("--tls-listen" if tls is not None else "--listen", port, ""))
    if serving is not None:
        from .server._handover import adopt
        adopt(handed, factory, reactor)
    limit = factory.connection_limit
    if limit is not None:
        limit.watch(port)
    accept_backlog(sock, reactor, listening,
                   limit.maximum - len(factory.connections) if limit is not None else 1 << 30)
    sock.close()
    shutdown = ops.make_shutdown(factory, reactor, port.stopListening, config)
    ops.install_signals_when_running(reactor, shutdown, lambda: early.stop_signal)
    if site is not None:
        site.attach(factory, shutdown, lambda: port.connected, policy)
    if opts.get("web"):  # bound as the -u user: the console needs the engine
        try:
            listeners.append(("--web", web.listen(factory, reactor, str(opts["web"]), credentials),
                              str(opts["web"])))
        except ListenError as e:
            raise fail(str(e), 111)
    for what, bound, description in listeners:  # one line each, whatever -V says
        sys.stderr.write(f"stalkd: {listening_line(what, bound, description)}\n")
    sys.stderr.flush()
    if early.stop_signal:  # a SIGTERM whose exit was lost (boot.py)
        return 0
    early.only_remember()  # the reactor's start acts on it (ops.install_signals_when_running)
    reactor.run()
    return 0


def accept_backlog(sock: socket.socket, reactor, factory, room: int) -> int:
    """Adopt up to ``room`` connections the kernel queued while Twisted was
    loading; returns how many.  A connection whose client has already gone (a
    readiness probe that connected and closed) is closed here, never counted
    as open, as a server running from the start would have done; it still
    counts in total-connections, as there (a session opened and closed)."""
    adopted = 0
    while adopted < room:
        try:
            conn, _ = sock.accept()
        except OSError:  # EAGAIN: none left; anything else: the reactor's accept deals with it
            break
        try:
            conn.setblocking(False)
            if _peer_gone(conn):
                engine = factory_of(factory).engine
                engine.close_session(engine.open_session(None))
                continue
            reactor.adoptStreamConnection(conn.fileno(), conn.family, factory)
            adopted += 1
        finally:
            conn.close()  # the reactor holds its own duplicate
    return adopted


def factory_of(listening):
    """The beanstalk factory behind ``listening`` (itself, or what TLS wraps)."""
    return getattr(listening, "wrappedFactory", listening)


def _peer_gone(conn: socket.socket) -> bool:
    """True when the peer has closed (EOF with nothing to read) or reset."""
    import socket
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


if __name__ == "__main__":
    sys.exit(main())
