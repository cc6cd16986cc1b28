"""The console's credentials file and its helper command."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from twisted_stalk.web import auth


def test_scrypt_and_pbkdf2_hashes_check():
    for scheme in ("scrypt", "pbkdf2-sha256") if auth.HAVE_SCRYPT else ("pbkdf2-sha256",):
        stored = auth.hash_password("correct horse", scheme)
        assert stored.startswith(scheme + "$")
        assert auth.check_password("correct horse", stored)
        assert not auth.check_password("correct horsE", stored)
    assert auth.hash_password("x") != auth.hash_password("x")  # salted


@pytest.mark.parametrize("line,why", [
    ("user alice admin", "expected"),
    ("group alice admin x", "expected"),
    ("user al!ce admin scrypt$1", "bad name"),
    ("user alice root scrypt$16384$8$1$AA==$AA==", "role"),
    ("user alice admin md5$abc", "scrypt$"),
    ("user alice admin scrypt$3$8$1$AA==$AA==", "cost"),
    ("user alice admin scrypt$16384$8$1$@@$AA==", "malformed"),
    ("token ci admin sha256$abc", "64 hex"),
])
def test_malformed_lines_name_the_line(line, why):
    with pytest.raises(auth.AuthFileError) as e:
        auth.parse("# comment\n\n" + line, "creds")
    assert "creds, line 3" in str(e.value) and why in str(e.value)


def test_duplicates_and_empty_files_are_refused(tmp_path):
    entry = f"token ci admin {auth.hash_token('t')}"
    with pytest.raises(auth.AuthFileError, match="twice"):
        auth.parse(entry + "\n" + entry)
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n")
    with pytest.raises(auth.AuthFileError, match="no entries"):
        auth.load(str(empty))
    with pytest.raises(auth.AuthFileError, match="cannot read"):
        auth.load(str(tmp_path / "missing"))


def test_tokens_and_unknown_users():
    creds = auth.Credentials(auth.parse(f"token ci viewer {auth.hash_token('s3cret')}\n"
                                        f"user a admin {auth.hash_password('pw', 'pbkdf2-sha256')}"))
    assert creds.token_identity("s3cret") == auth.Identity("ci", "viewer", "token")
    assert creds.token_identity("s3cre") is None
    identity, stored = creds.password_check("nobody", "pw")
    # An unknown user is checked against a decoy hash: same work, always false.
    assert identity is None and stored and not auth.check_password("pw", stored)


def _helper(*args, stdin=""):
    return subprocess.run([sys.executable, "-m", "twisted_stalk.web.auth", *args],
                          input=stdin, capture_output=True, text=True)


def test_the_helper_writes_users_and_tokens(tmp_path):
    path = str(tmp_path / "console.auth")
    done = _helper("add", "alice", "--file", path, "--password-stdin", "--scheme",
                   "pbkdf2-sha256", stdin="pass word\n")
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    token = _helper("token", "deploy", "--file", path, "--role", "viewer")
    assert token.returncode == 0 and "shown only now" in token.stderr
    creds = auth.load(path)
    assert auth.check_password("pass word", creds.users["alice"].secret)
    assert creds.token_identity(token.stdout.strip()).role == "viewer"
    # add replaces; remove removes.
    _helper("add", "alice", "--file", path, "--password-stdin", "--role", "viewer",
            "--scheme", "pbkdf2-sha256", stdin="other\n")
    assert auth.load(path).users["alice"].role == "viewer"
    assert _helper("remove", "deploy", "--file", path).returncode == 0
    assert _helper("remove", "deploy", "--file", path).returncode == 1
    assert auth.load(path).tokens == []
    assert _helper("add", "bad name", "--file", path).returncode == 2
