"""TLS: real certificates made here, real handshakes over loopback, stock clients.

``stalkd --tls-cert/--tls-key[/--tls-ca]`` and ``twistd beanstalk`` with both an
``ssl:`` endpoint string and ``--tls-listen`` (mutual TLS).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time

import pytest

pytest.importorskip("OpenSSL")
pytest.importorskip("cryptography")

import greenstalk  # noqa: E402

from servers import free_port  # noqa: E402
from test_ops_helpers import http_get, make_pki, start_stalkd, wait_http  # noqa: E402
from wire import Wire  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(str(tmp_path_factory.mktemp("pki")))


def client_context(pki, cert=None, key=None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki.ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


def tls_socket(address, ctx) -> ssl.SSLSocket:
    raw = socket.create_connection(address, timeout=5)
    return ctx.wrap_socket(raw, server_hostname="localhost")


def rejected(address, ctx) -> bool:
    """:func:`_rejected` in a thread of its own: PyPy's ssl leaves the server's
    alert in OpenSSL's (per-thread) error queue, where the next read of another
    socket in the same thread would find it."""
    import threading
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(_rejected(address, ctx)))
    thread.start()
    thread.join(30)
    return outcome == [True]


def _rejected(address, ctx) -> bool:
    """True when the server refuses this client during or right after the handshake.

    With TLS 1.3 the client finishes its side before the server has checked the
    client certificate, so the refusal may only show on the first read.
    """
    try:
        s = tls_socket(address, ctx)
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return True
    try:
        s.sendall(b"list-tube-used\r\n")
        return s.recv(100) == b""
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return True
    finally:
        try:
            s.close()
        except OSError:  # PyPy's ssl reports the server's alert again on close
            pass


def test_stalkd_tls_with_greenstalk(tmp_path, pki):
    server = start_stalkd(tmp_path, "--tls-cert", pki.server_cert, "--tls-key", pki.server_key)
    try:
        # A stock client (greenstalk) over a verified TLS socket.
        sock = tls_socket(server.address, client_context(pki))
        assert sock.version() in ("TLSv1.2", "TLSv1.3")
        client = greenstalk.Client(sock, use="secure", watch="secure")
        job_id = client.put("over TLS", ttr=30)
        job = client.reserve(timeout=1)
        assert (job.id, job.body) == (job_id, "over TLS")
        client.delete(job)
        assert client.stats_tube("secure")["cmd-delete"] == 1
        client.close()
        # Plain text to the TLS port gets nothing useful back.
        plain = socket.create_connection(server.address, timeout=5)
        plain.sendall(b"stats\r\n")
        try:
            data = plain.recv(100)
        except ConnectionResetError:
            data = b""
        assert not data.startswith(b"OK")
        plain.close()
    finally:
        assert server.stop() == 0


def test_stalkd_mutual_tls(tmp_path, pki):
    server = start_stalkd(tmp_path, "--tls-cert", pki.server_cert, "--tls-key", pki.server_key,
                          "--tls-ca", pki.ca)
    try:
        good = tls_socket(server.address, client_context(pki, pki.client_cert, pki.client_key))
        w = Wire(good)
        assert w.ask(b"put 0 0 10 2\r\nok\r\n") == b"INSERTED 1\r\n"
        assert w.ask(b"reserve-with-timeout 0\r\n") == b"RESERVED 1 2\r\nok\r\n"
        # A certificate from a CA the server does not trust, and no certificate at all.
        assert rejected(server.address, client_context(pki, pki.rogue_cert, pki.rogue_key))
        assert rejected(server.address, client_context(pki))
        # The trusted connection was not disturbed.
        assert w.ask(b"delete 1\r\n") == b"DELETED\r\n"
        good.close()
    finally:
        assert server.stop() == 0


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl command")
def test_openssl_s_client_talks_to_mutual_tls(tmp_path, pki):
    server = start_stalkd(tmp_path, "--tls-cert", pki.server_cert, "--tls-key", pki.server_key,
                          "--tls-ca", pki.ca)
    try:
        script = b"put 0 0 10 5\r\nhello\r\npeek 1\r\nquit\r\n"
        out = subprocess.run(
            ["openssl", "s_client", "-quiet", "-ign_eof", "-verify_return_error",
             "-connect", f"127.0.0.1:{server.port}", "-servername", "localhost",
             "-CAfile", pki.ca, "-cert", pki.client_cert, "-key", pki.client_key],
            input=script, capture_output=True, timeout=20)
        assert b"INSERTED 1\r\nFOUND 1 5\r\nhello\r\n" in out.stdout, out.stderr
        refused = subprocess.run(
            ["openssl", "s_client", "-quiet", "-ign_eof", "-connect", f"127.0.0.1:{server.port}",
             "-CAfile", pki.ca, "-cert", pki.rogue_cert, "-key", pki.rogue_key],
            input=b"stats\r\n", capture_output=True, timeout=20)
        assert b"OK " not in refused.stdout
    finally:
        assert server.stop() == 0


def test_stalkd_bad_certificate_files_exit_with_a_message(tmp_path, pki):
    port = free_port()
    from servers import ours_command
    out = subprocess.run(ours_command(port, "--tls-cert", str(tmp_path / "missing.pem")),
                         capture_output=True, timeout=30)
    assert out.returncode == 1
    assert b"cannot read certificate" in out.stderr
    out = subprocess.run(ours_command(port, "--tls-cert", pki.server_cert, "--tls-key",
                                      pki.client_key), capture_output=True, timeout=30)
    assert out.returncode == 1 and b"cannot" in out.stderr


def test_twistd_ssl_endpoint_mutual_tls_metrics_and_sigterm(tmp_path, pki):
    """The twistd plugin: ``--listen ssl:...`` (server TLS), ``--tls-listen`` with
    ``--tls-ca`` (mutual TLS), ``--metrics``; SIGTERM exits 0."""
    ssl_port, mtls_port, metrics_port = free_port(), free_port(), free_port()
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    if not os.path.exists(twistd):
        pytest.skip("no twistd script")
    args = [twistd, "-n", "--pidfile=", "beanstalk",
            "--listen", f"ssl:{ssl_port}:interface=127.0.0.1:privateKey={pki.server_key}"
                        f":certKey={pki.server_cert}",
            "--tls-listen", f"tcp:{mtls_port}:interface=127.0.0.1",
            "--tls-cert", pki.server_cert, "--tls-key", pki.server_key, "--tls-ca", pki.ca,
            "--metrics", f"tcp:{metrics_port}:interface=127.0.0.1", "--extensions"]
    proc = subprocess.Popen(args, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=ROOT),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{metrics_port}/healthz", timeout=20)
        # Server-only TLS through Twisted's ssl: endpoint string.
        a = Wire(tls_socket(("127.0.0.1", ssl_port), client_context(pki)))
        assert a.ask(b"put 0 0 10 1\r\nA\r\n") == b"INSERTED 1\r\n"
        # Mutual TLS on the --tls-listen endpoint: same queue.
        b = Wire(tls_socket(("127.0.0.1", mtls_port),
                            client_context(pki, pki.client_cert, pki.client_key)))
        assert b.ask(b"peek 1\r\n") == b"FOUND 1 1\r\nA\r\n"
        assert b.ask(b"capabilities\r\n").startswith(b"OK ")
        assert rejected(("127.0.0.1", mtls_port), client_context(pki))
        assert http_get(f"http://127.0.0.1:{metrics_port}/readyz")[0] == 200
        # A waiting reserve on each, then SIGTERM: both closed cleanly, exit 0.
        a.send(b"reserve-with-timeout 60\r\n")
        assert a.reply().startswith(b"RESERVED 1")
        b.send(b"reserve\r\n")
        time.sleep(0.2)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        # a holds job 1: it may still delete it; b's waiting reserve is closed.
        assert b.closed()
        assert a.ask(b"delete 1\r\n") == b"DELETED\r\n"
        assert a.closed()
        assert proc.wait(15) == 0
        assert time.monotonic() - started < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_peers_that_never_start_tls_lose_their_slot(tmp_path, pki):
    """Five TCP peers that never send a ClientHello hold all five places of
    --max-connections 5 only until the handshake deadline; then a client with
    a valid certificate is served."""
    server = start_stalkd(tmp_path, "--tls-cert", pki.server_cert, "--tls-key", pki.server_key,
                          "--tls-ca", pki.ca, "--max-connections", "5",
                          "--tls-handshake-timeout", "0.5")
    idle = []
    try:
        time.sleep(0.1)  # start_stalkd's probe (a plain connect) is dropped at its deadline
        idle = [socket.create_connection(server.address, timeout=5) for _ in range(5)]
        started = time.monotonic()
        for s in idle:  # each is cut (reset) at its deadline
            s.settimeout(5)
            try:
                assert s.recv(10) == b""
            except ConnectionResetError:
                pass
        assert time.monotonic() - started < 3
        s = tls_socket(server.address, client_context(pki, pki.client_cert, pki.client_key))
        s.sendall(b"list-tube-used\r\n")
        assert s.recv(100) == b"USING default\r\n"
        s.close()
    finally:
        for s in idle:
            s.close()
        assert server.stop() == 0


def test_handshake_deadline_spares_finished_handshakes(tmp_path, pki):
    server = start_stalkd(tmp_path, "--tls-cert", pki.server_cert, "--tls-key", pki.server_key,
                          "--tls-handshake-timeout", "0.3")
    try:
        s = tls_socket(server.address, client_context(pki))
        time.sleep(0.6)
        s.sendall(b"list-tube-used\r\n")
        assert s.recv(100) == b"USING default\r\n"
        s.close()
    finally:
        assert server.stop() == 0
