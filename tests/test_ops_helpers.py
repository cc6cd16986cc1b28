"""Helpers for the operations tests (no tests here): certificates made on the
spot, ``stalkd`` processes with their log in a file, HTTP scrapes."""
from __future__ import annotations

import datetime
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import List, Optional, Tuple

from servers import free_port, ours_command, stop_process

try:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
except ImportError:  # pragma: no cover
    x509 = None


# ------------------------------------------------------------------ certificates

def _name(cn: str):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(path: str, key) -> None:
    with open(path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))


def _write_cert(path: str, *certs) -> None:
    with open(path, "wb") as f:
        for cert in certs:
            f.write(cert.public_bytes(serialization.Encoding.PEM))


def make_ca(directory: str, name: str):
    """A CA (key, cert); writes ``<name>.pem``; returns (key, cert, path)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    path = os.path.join(directory, f"{name}.pem")
    _write_cert(path, cert)
    return key, cert, path


def make_leaf(directory: str, name: str, ca, server: bool) -> Tuple[str, str]:
    """A certificate signed by ``ca`` (from :func:`make_ca`); returns (cert, key) paths."""
    ca_key, ca_cert, _ = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(name))
               .issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(days=1))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               # Python 3.13's default verification (VERIFY_X509_STRICT) wants both.
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                   ca_key.public_key()), critical=False)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                              critical=False)
               .add_extension(x509.ExtendedKeyUsage(
                   [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
                   critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(__import__("ipaddress").ip_address("127.0.0.1"))]),
            critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    cert_path = os.path.join(directory, f"{name}.crt")
    key_path = os.path.join(directory, f"{name}.key")
    _write_cert(cert_path, cert)
    _write_key(key_path, key)
    return cert_path, key_path


@dataclass
class PKI:
    ca: str                 # CA certificate file (trust root for both sides)
    server_cert: str
    server_key: str
    client_cert: str        # signed by the CA
    client_key: str
    rogue_cert: str         # signed by another CA the server does not trust
    rogue_key: str


def make_pki(directory: str) -> PKI:
    ca = make_ca(directory, "test-ca")
    rogue_ca = make_ca(directory, "rogue-ca")
    server = make_leaf(directory, "server", ca, server=True)
    client = make_leaf(directory, "client", ca, server=False)
    rogue = make_leaf(directory, "rogue", rogue_ca, server=False)
    return PKI(ca[2], server[0], server[1], client[0], client[1], rogue[0], rogue[1])


# ---------------------------------------------------------------------- servers

@dataclass
class Stalkd:
    """A ``stalkd`` process whose stderr (its log) goes to a file."""

    proc: subprocess.Popen
    port: int
    log_path: str

    @property
    def address(self):
        return ("127.0.0.1", self.port)

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def wait_log(self, text: str, timeout: float = 5.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            log = self.log()
            if text in log:
                return log
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not logged; log:\n{log}")
            time.sleep(0.01)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> Optional[int]:
        return stop_process(self.proc, sig, timeout)


def start_stalkd(tmp_path, *flags: str, plain_probe: bool = True, wait: float = 10.0) -> Stalkd:
    """Start ``stalkd`` on a free port; waits until it accepts (and, with
    ``--metrics``, until the metrics port answers)."""
    port = free_port()
    log_path = os.path.join(str(tmp_path), f"stalkd-{port}.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(ours_command(port, *flags), stdout=subprocess.DEVNULL,
                                stderr=log, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    server = Stalkd(proc, port, log_path)
    deadline = time.monotonic() + wait
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"stalkd exited with {proc.returncode}: {server.log()}")
        try:
            socket.create_connection(server.address, timeout=0.5).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("stalkd did not start listening")
            time.sleep(0.01)
    return server


def wait_http(url: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            http_get(url)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def http_get(url: str) -> Tuple[int, str, str]:
    """(status, content type, body) of a GET; 4xx/5xx are returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.headers.get("content-type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("content-type", ""), e.read().decode()


def stats_of(wire) -> dict:
    """The server's ``stats`` as a dict of strings (values unquoted)."""
    reply = wire.ask(b"stats\r\n")
    head, _, body = reply.partition(b"\r\n")
    assert head.startswith(b"OK ")
    out = {}
    for line in body.decode().splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            out[key] = value.strip('"')
    return out


def fd_limited(limit: int, *cmd: str) -> List[str]:
    """``cmd`` run under ``ulimit -n limit`` (soft and hard)."""
    return ["sh", "-c", f'ulimit -n {limit} && exec "$@"', "sh", *cmd]


def allow_test_descriptors(need: int) -> None:
    """Raise this test process's open-file limit for ``need`` descriptors, or skip."""
    import resource
    import pytest
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"needs {need} descriptors in the test process")
    resource.setrlimit(resource.RLIMIT_NOFILE,
                       (hard if hard != resource.RLIM_INFINITY else max(need, 4096), hard))


def bytes_lines(*lines: bytes) -> List[bytes]:
    return [line + b"\r\n" for line in lines]


def sys_executable() -> str:
    return sys.executable
