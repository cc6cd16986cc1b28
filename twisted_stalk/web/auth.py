# -*- test-case-name: tests.test_web_auth -*-
"""Credentials of the web console (``--web-auth FILE``) and the helper that writes them.

The file holds one entry per line (``#`` starts a comment)::

    user alice admin scrypt$16384$8$1$<salt, base64>$<key, base64>
    user bob viewer pbkdf2-sha256$600000$<salt, base64>$<key, base64>
    token deploy-bot admin sha256$<SHA-256 of the token, hex>

A *user* logs in with a password, kept as a salted ``hashlib.scrypt`` (or
``pbkdf2_hmac``) key; a *token* is sent by scripts as ``Authorization:
Bearer <token>`` and kept as its SHA-256 (tokens are random 256-bit values,
so a fast hash is enough).  A role is ``admin`` (may change the queue) or
``viewer`` (may look).  Every comparison is constant-time.

Write entries with::

    python -m twisted_stalk.web.auth add alice --file console.auth [--role viewer]
    python -m twisted_stalk.web.auth token deploy-bot --file console.auth
    python -m twisted_stalk.web.auth remove alice --file console.auth

``add`` asks for the password twice on a terminal (else, or with
``--password-stdin``, it reads one line from standard input); ``token`` prints
a new token once.  A new file is created with mode 0600; an existing one is
replaced by a file with its owner, group and mode (``root:stalk 0640`` stays
so), through a symbolic link to where it points.  A running server reads the
file again on SIGHUP (:mod:`.reload`).
"""
from __future__ import annotations

import argparse
import base64
import getpass
import hashlib
import hmac
import os
import secrets
import stat
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ..wording import counted

ROLES = ("admin", "viewer")
#: scrypt cost: 16 MiB of memory and tens of milliseconds per check.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2 ** 14, 8, 1
PBKDF2_ITERATIONS = 600_000
_MAX_PASSWORD = 1024
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._@-")


class AuthFileError(Exception):
    """The credentials file cannot be read or has a malformed line."""


@dataclass(frozen=True)
class Identity:
    """Who makes a request: a name, a role, and how they proved it."""

    name: str
    role: str
    #: "password" (a login session), "token" (bearer) or "anonymous".
    kind: str

    @property
    def can_act(self) -> bool:
        return self.role == "admin"


@dataclass(frozen=True)
class Entry:
    kind: str  # "user" or "token"
    name: str
    role: str
    secret: str  # the stored hash, as written in the file


def valid_name(name: str) -> bool:
    return 0 < len(name) <= 64 and set(name) <= _NAME_CHARS


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


#: Whether this Python has ``hashlib.scrypt`` (PyPy's hashlib does not).
HAVE_SCRYPT = hasattr(hashlib, "scrypt")
#: The scheme new passwords get: scrypt where there is one, else PBKDF2.
DEFAULT_SCHEME = "scrypt" if HAVE_SCRYPT else "pbkdf2-sha256"


def hash_password(password: str, scheme: str = DEFAULT_SCHEME) -> str:
    """A salted key for ``password`` in the file's format."""
    salt = os.urandom(16)
    secret = password.encode("utf-8")
    if scheme == "scrypt":
        key = hashlib.scrypt(secret, salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P,
                             maxmem=64 * 1024 * 1024, dklen=32)
        return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(key)}"
    if scheme == "pbkdf2-sha256":
        key = hashlib.pbkdf2_hmac("sha256", secret, salt, PBKDF2_ITERATIONS)
        return f"pbkdf2-sha256${PBKDF2_ITERATIONS}${_b64(salt)}${_b64(key)}"
    raise ValueError(f"unknown scheme {scheme!r}")


def _parse_hash(stored: str) -> Tuple[str, Tuple[int, ...], bytes, bytes]:
    parts = stored.split("$")
    try:
        if parts[0] == "scrypt" and len(parts) == 6:
            n, r, p = (int(x) for x in parts[1:4])
            if n < 2 or n & (n - 1) or n > 2 ** 20 or not 0 < r <= 32 or not 0 < p <= 16:
                raise ValueError("scrypt cost out of range")
            return "scrypt", (n, r, p), base64.b64decode(parts[4], validate=True), \
                base64.b64decode(parts[5], validate=True)
        if parts[0] == "pbkdf2-sha256" and len(parts) == 4:
            iterations = int(parts[1])
            if not 1000 <= iterations <= 10_000_000:
                raise ValueError("pbkdf2 iterations out of range")
            return "pbkdf2-sha256", (iterations,), base64.b64decode(parts[2], validate=True), \
                base64.b64decode(parts[3], validate=True)
    except (ValueError, TypeError) as e:
        raise ValueError(f"malformed password hash: {e}")
    raise ValueError("password hash must be scrypt$... or pbkdf2-sha256$...")


def check_password(password: str, stored: str) -> bool:
    """True if ``password`` matches ``stored`` (slow on purpose: run it off the reactor)."""
    scheme, cost, salt, key = _parse_hash(stored)
    secret = password.encode("utf-8")[:_MAX_PASSWORD * 4]
    if scheme == "scrypt":
        if not HAVE_SCRYPT:
            raise ValueError("this Python has no hashlib.scrypt (PyPy): give the user a "
                             "pbkdf2-sha256 password")
        n, r, p = cost
        got = hashlib.scrypt(secret, salt=salt, n=n, r=r, p=p, maxmem=128 * 1024 * 1024,
                             dklen=len(key))
    else:
        got = hashlib.pbkdf2_hmac("sha256", secret, salt, cost[0], dklen=len(key))
    return hmac.compare_digest(got, key)


def hash_token(token: str) -> str:
    return "sha256$" + hashlib.sha256(token.encode("utf-8")).hexdigest()


def parse(text: str, source: str = "credentials file") -> List[Entry]:
    """The entries of a credentials file (raises :class:`AuthFileError`)."""
    entries: List[Entry] = []
    seen = set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        where = f"{source}, line {number}"
        if len(fields) != 4 or fields[0] not in ("user", "token"):
            raise AuthFileError(f"{where}: expected 'user|token NAME ROLE HASH'")
        kind, name, role, secret = fields
        if not valid_name(name):
            raise AuthFileError(f"{where}: bad name {name!r} (letters, digits, . _ @ -)")
        if role not in ROLES:
            raise AuthFileError(f"{where}: role must be one of {', '.join(ROLES)}")
        if (kind, name) in seen:
            raise AuthFileError(f"{where}: {kind} {name} appears twice")
        seen.add((kind, name))
        if kind == "user":
            try:
                _parse_hash(secret)
            except ValueError as e:
                raise AuthFileError(f"{where}: {e}")
        elif not (secret.startswith("sha256$") and len(secret) == 7 + 64
                  and all(c in "0123456789abcdef" for c in secret[7:])):
            raise AuthFileError(f"{where}: a token's hash is sha256$ and 64 hex digits")
        entries.append(Entry(kind, name, role, secret))
    return entries


def load(path: str) -> "Credentials":
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(1024 * 1024)
    except OSError as e:
        raise AuthFileError(f"cannot read --web-auth file {path}: {e.strerror or e}")
    except UnicodeDecodeError:
        raise AuthFileError(f"--web-auth file {path} is not UTF-8 text")
    entries = parse(text, path)
    if not entries:
        raise AuthFileError(f"--web-auth file {path} has no entries "
                            "(python -m twisted_stalk.web.auth add USER --file ...)")
    return Credentials(entries, path)


class Credentials:
    """The users and tokens of a credentials file."""

    def __init__(self, entries: Sequence[Entry], path: Optional[str] = None) -> None:
        #: The file they were read from (read again on SIGHUP: :mod:`.reload`).
        self.path = path
        self.users: Dict[str, Entry] = {e.name: e for e in entries if e.kind == "user"}
        self.tokens: List[Entry] = [e for e in entries if e.kind == "token"]
        #: A hash to check against for unknown users, so that the time taken
        #: does not tell which user names exist.
        self._decoy = hash_password(secrets.token_hex(8)) if self.users else None

    def __str__(self) -> str:
        """``2 users and 1 token``."""
        return f"{counted(len(self.users), 'user')} and {counted(len(self.tokens), 'token')}"

    def password_check(self, name: str, password: str) -> Tuple[Optional[Identity], str]:
        """``(identity or None, stored hash to check)``: the slow check itself is
        :func:`check_password`, run by the caller in a thread."""
        entry = self.users.get(name)
        if entry is None:
            return None, self._decoy or ""
        return Identity(entry.name, entry.role, "password"), entry.secret

    def token_identity(self, token: str) -> Optional[Identity]:
        hashed = hash_token(token)
        found = None
        for entry in self.tokens:  # no early exit: constant time per entry
            if hmac.compare_digest(hashed, entry.secret):
                found = entry
        return Identity(found.name, found.role, "token") if found is not None else None


# ----------------------------------------------------------------- the helper

HEADER = "# twisted-stalk web console credentials (docs/web.md)"


def _rewrite(path: str, kind: str, name: str, line: Optional[str]) -> bool:
    """Replace (or remove, ``line`` None) the entry ``kind name``; True if it was there.

    The new file replaces the old one at once (a server reading it on SIGHUP
    sees one or the other), with the old one's owner, group and mode."""
    path = os.path.realpath(path)  # a symbolic link stays one
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        was = os.stat(path)
    except FileNotFoundError:
        lines, was = [], None
    except OSError as e:
        raise SystemExit(f"cannot read {path}: {e.strerror}")
    kept, found = [], False
    for raw in lines or [HEADER]:
        fields = raw.split()
        if len(fields) >= 2 and fields[0] == kind and fields[1] == name:
            found = True
            continue
        kept.append(raw)
    if line is not None:
        kept.append(line)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        raise SystemExit(f"cannot write {tmp}: {e.strerror}")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            if was is not None:
                try:
                    os.fchown(f.fileno(), was.st_uid, was.st_gid)
                except PermissionError:
                    raise SystemExit(f"cannot give the new {path} the owner of the old one "
                                     f"(uid {was.st_uid}, gid {was.st_gid}): run this as root "
                                     "or as that owner")
                os.fchmod(f.fileno(), stat.S_IMODE(was.st_mode))
            f.write("\n".join(kept) + "\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return found


def _read_password(from_stdin: bool) -> str:
    """Asked twice on a terminal; else one line of standard input (a script, an install)."""
    if from_stdin or not sys.stdin.isatty():
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            raise SystemExit("the passwords differ")
    if not password:
        raise SystemExit("empty password")
    if len(password) > _MAX_PASSWORD:
        raise SystemExit(f"password longer than {_MAX_PASSWORD} characters")
    return password


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m twisted_stalk.web.auth",
        description="Write entries of the web console's --web-auth file.")
    sub = parser.add_subparsers(dest="command", required=True)
    for command, text in (("add", "add or replace a user (asks for the password)"),
                          ("token", "create a bearer token for scripts (printed once)"),
                          ("remove", "remove a user or token")):
        p = sub.add_parser(command, help=text)
        p.add_argument("name")
        p.add_argument("--file", required=True, help="the credentials file")
        if command != "remove":
            p.add_argument("--role", choices=ROLES, default="admin")
        if command == "add":
            p.add_argument("--password-stdin", action="store_true",
                           help="read the password from the first line of standard input "
                                "(what happens anyway when it is not a terminal)")
            p.add_argument("--scheme", choices=("scrypt", "pbkdf2-sha256"), default=DEFAULT_SCHEME)
    parser.epilog = ("An existing file keeps its owner, group and mode. A running server "
                     "reads the file again on SIGHUP (systemctl reload twisted-stalk).")
    args = parser.parse_args(argv)
    if not valid_name(args.name):
        parser.error("a name is 1-64 letters, digits, '.', '_', '@' or '-'")
    if args.command == "add":
        line = f"user {args.name} {args.role} {hash_password(_read_password(args.password_stdin), args.scheme)}"
        _rewrite(args.file, "user", args.name, line)
        print(f"user {args.name} ({args.role}) written to {args.file}")
    elif args.command == "token":
        token = secrets.token_urlsafe(32)
        _rewrite(args.file, "token", args.name, f"token {args.name} {args.role} {hash_token(token)}")
        print(token)
        sys.stderr.write(f"token {args.name} ({args.role}) written to {args.file}; "
                         "it is shown only now\n")
    else:
        removed = [_rewrite(args.file, kind, args.name, None) for kind in ("user", "token")]
        if not any(removed):
            sys.stderr.write(f"{args.name}: no such entry in {args.file}\n")
            return 1
        print(f"{args.name} removed from {args.file}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
