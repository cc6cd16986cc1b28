# -*- test-case-name: tests.test_shell_units -*-
"""Where the server is: ``host:port``, ``unix:PATH`` or ``tls:host:port``,
and the TLS context for it."""
from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from typing import Dict

from twisted_stalk.protocol.constants import DEFAULT_PORT

from .errors import ConnectionFailed, UsageError, oserror_text


@dataclass(frozen=True)
class Target:
    """Where the server is: ``tcp`` host/port, ``unix`` path or ``tls`` host/port.

    For ``tls``: ``cafile`` verifies the server (default: the system's CAs),
    ``insecure`` skips that, and ``cert``/``key`` are the client certificate
    and its private key for servers that require one (mutual TLS; ``key``
    may be left out when ``cert`` holds both)."""

    scheme: str = "tcp"
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    path: str = ""
    insecure: bool = False
    cafile: str = ""
    cert: str = ""
    key: str = ""

    def __str__(self) -> str:
        if self.scheme == "unix":
            return f"unix:{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        prefix = "tls:" if self.scheme == "tls" else ""
        return f"{prefix}{host}:{self.port}"


def parse_target(text: str) -> Target:
    """Parse ``host:port``, ``host``, ``:port``, ``[::1]:p``, ``tcp:``/``tcp://``,
    ``unix:PATH``/``unix://PATH`` and ``tls:``/``tls://`` addresses.

    Raises ValueError with a readable message.
    """
    text = text.strip()
    if not text:
        raise ValueError("empty address")
    scheme = "tcp"
    for name in ("tcp", "unix", "tls", "ssl"):
        for sep in ("://", ":"):
            if text.startswith(name + sep):
                scheme = "tls" if name == "ssl" else name
                text = text[len(name) + len(sep):]
                break
        else:
            continue
        break
    if scheme == "unix":
        if not text:
            raise ValueError("unix: address needs a socket path")
        return Target("unix", path=text)
    host, port = text, DEFAULT_PORT
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"bad address {text!r}: missing ]")
        host, rest = text[1:end], text[end + 1:]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"bad address {text!r}")
            port = _port(rest[1:], text)
    elif text.count(":") == 1:
        host, _, p = text.partition(":")
        port = _port(p, text)
    elif text.count(":") > 1:
        raise ValueError(f"bad address {text!r}: write IPv6 addresses as [addr]:port")
    host = host.rstrip("/") or "127.0.0.1"
    return Target(scheme, host=host, port=port)


def _port(text: str, whole: str) -> int:
    text = text.rstrip("/")
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"bad port in address {whole!r}")
    return int(text)


def tls_context(t: Target) -> ssl.SSLContext:
    """The client TLS context for ``t``: server verification (``cafile``, or
    none with ``insecure``) and the client certificate (``cert``/``key``)."""
    try:
        ctx = ssl.create_default_context(cafile=t.cafile or None)
    except (OSError, ssl.SSLError) as e:
        raise ConnectionFailed(f"cannot load the CA file {t.cafile}: {oserror_text(e)}") from None
    if t.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if t.cert:
        try:
            ctx.load_cert_chain(t.cert, t.key or None)
        except (OSError, ssl.SSLError) as e:
            what = f"{t.cert} and {t.key}" if t.key else t.cert
            raise ConnectionFailed(f"cannot load the client certificate {what}: "
                                   f"{oserror_text(e)}") from None
    return ctx


def config_flag(text: str) -> bool:
    """A yes/no setting of the config file: ``1``, ``yes``, ``true``, ``on``."""
    return text.strip().lower() in ("1", "yes", "true", "on")


def resolve_target(args, config: Dict[str, str]) -> Target:
    """The server the command line (``--url``, ``--address``, the TLS options),
    ``STALK_ADDRESS`` or the config file names; UsageError if it cannot be."""
    text = args.url or args.address or os.environ.get("STALK_ADDRESS") or config.get("address") or ""
    try:
        target = parse_target(text) if text else Target()
    except ValueError as e:
        raise UsageError(str(e))
    cert = getattr(args, "cert", None)
    key = getattr(args, "key", None)
    if (cert or key) and target.scheme != "tls":
        raise UsageError("--cert/--key are for TLS: give the server as --url tls:HOST:PORT")
    if target.scheme == "tls":
        cafile = args.cafile or config.get("cafile", "")
        insecure = args.insecure or config_flag(config.get("insecure", "no"))
        cert = cert or config.get("cert", "")
        key = key or config.get("key", "")
        if key and not cert:
            raise UsageError("--key needs --cert (the client certificate)")
        for what, path in (("certificate", cert), ("key", key), ("CA file", cafile)):
            if path and not os.path.isfile(os.path.expanduser(path)):
                raise UsageError(f"no such {what} file: {path}")
        target = Target("tls", target.host, target.port, insecure=insecure,
                        cafile=os.path.expanduser(cafile) if cafile else "",
                        cert=os.path.expanduser(cert) if cert else "",
                        key=os.path.expanduser(key) if key else "")
    return target


__all__ = ["Target", "config_flag", "parse_target", "resolve_target", "tls_context"]
