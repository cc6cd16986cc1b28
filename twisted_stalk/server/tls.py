"""TLS for the server: server certificates and mutual TLS (client certificates).

Two ways to listen with TLS:

* Twisted's own ``ssl:`` endpoint strings, e.g.
  ``--listen ssl:11400:privateKey=key.pem:certKey=cert.pem`` (server
  certificate only; ``extraCertChain=chain.pem`` adds intermediates);
* ``--tls-listen ENDPOINT --tls-cert cert.pem --tls-key key.pem [--tls-ca ca.pem]``
  (``stalkd --tls-cert ... --tls-key ... [--tls-ca ...]``): any stream endpoint
  (``tcp:``, ``unix:``, ``systemd:``) wrapped in TLS by
  :func:`wrap_factory`; with ``--tls-ca`` every client must present a
  certificate signed by one of the CA certificates in that file (mutual TLS),
  and a client without one fails the handshake.

Needs pyOpenSSL (``pip install '.[tls]'`` from this repository: pyOpenSSL and
service_identity, Twisted's own ``twisted[tls]`` set).  TLS connections skip
the direct-socket write of plain TCP; everything else is the same protocol.
"""
from __future__ import annotations

import re
from typing import List, Optional

_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n.+?\r?\n-----END CERTIFICATE-----",
                       re.DOTALL)


class TLSConfigError(Exception):
    """The TLS files or options cannot be used (message says which and why)."""


def _require_openssl() -> None:
    try:
        import OpenSSL  # noqa: F401
    except ImportError:
        raise TLSConfigError("TLS needs pyOpenSSL: pip install pyOpenSSL service_identity")


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TLSConfigError(f"cannot read {what} {path}: {e.strerror or e}")


def pem_certificates(data: bytes) -> List[bytes]:
    """The PEM certificate blocks in ``data``, in file order."""
    return _PEM_CERT.findall(data)


def server_options(cert: str, key: Optional[str] = None, ca: Optional[str] = None):
    """``CertificateOptions`` for a TLS server.

    ``cert``: PEM file with the server certificate first, then any intermediate
    certificates (sent to clients as the chain).  ``key``: its PEM private key
    (default: read from ``cert``).  ``ca``: PEM file of the certificates that
    client certificates must chain to; when given, clients must present one.
    """
    _require_openssl()
    from twisted.internet import ssl

    cert_pem = _read(cert, "certificate")
    key_pem = _read(key, "private key") if key else cert_pem
    blocks = pem_certificates(cert_pem)
    if not blocks:
        raise TLSConfigError(f"no PEM certificate in {cert}")
    try:
        leaf = ssl.PrivateCertificate.loadPEM(blocks[0] + b"\n" + key_pem)
        chain = [ssl.Certificate.loadPEM(b).original for b in blocks[1:]]
    except Exception as e:  # OpenSSL.crypto.Error and friends
        raise TLSConfigError(f"cannot load certificate {cert} with key {key or cert}: {e}")
    kwargs = {}
    if chain:
        kwargs["extraCertChain"] = chain
    if ca:
        ca_blocks = pem_certificates(_read(ca, "CA certificates"))
        if not ca_blocks:
            raise TLSConfigError(f"no PEM certificate in {ca}")
        try:
            roots = [ssl.Certificate.loadPEM(b) for b in ca_blocks]
        except Exception as e:
            raise TLSConfigError(f"cannot load CA certificates from {ca}: {e}")
        # A trust root makes the server verify, and require, client certificates.
        kwargs["trustRoot"] = ssl.trustRootFromCertificates(roots)
    try:
        return ssl.CertificateOptions(privateKey=leaf.privateKey.original,
                                      certificate=leaf.original, **kwargs)
    except Exception as e:
        raise TLSConfigError(f"cannot use certificate {cert}: {e}")


#: Seconds a TLS client has to complete its handshake (``--tls-handshake-timeout``).
DEFAULT_HANDSHAKE_TIMEOUT = 5.0


def wrap_factory(factory, options, handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
                 clock=None):
    """``factory`` behind TLS: listen with the result on any stream endpoint.

    A client that has not completed its handshake ``handshake_timeout``
    seconds after connecting is disconnected (0: no deadline), so sockets that
    never start TLS cannot hold connection slots.  A connection ``factory``
    refuses (its ``buildProtocol`` returns None, at the connection limit) is
    refused here too: the port closes it before any handshake.
    """
    from twisted.protocols.tls import TLSMemoryBIOFactory, TLSMemoryBIOProtocol

    if clock is None:
        clock = getattr(factory, "reactor", None)
        if clock is None:
            from twisted.internet import reactor as clock

    class NoDelayTLSProtocol(TLSMemoryBIOProtocol):
        _handshake_deadline = None

        def makeConnection(self, transport) -> None:
            # Replies are small and latency matters, as on plain TCP.
            set_no_delay = getattr(transport, "setTcpNoDelay", None)
            if set_no_delay is not None:
                try:
                    set_no_delay(True)
                except OSError:  # a unix socket
                    pass
            if handshake_timeout > 0:
                self._handshake_deadline = clock.callLater(handshake_timeout,
                                                           self._handshake_overdue)
            TLSMemoryBIOProtocol.makeConnection(self, transport)

        def _handshake_overdue(self) -> None:
            self._handshake_deadline = None
            if not self._handshakeDone:
                self.transport.abortConnection()

        def connectionLost(self, reason) -> None:
            deadline, self._handshake_deadline = self._handshake_deadline, None
            if deadline is not None and deadline.active():
                deadline.cancel()
            TLSMemoryBIOProtocol.connectionLost(self, reason)

    class LimitedTLSFactory(TLSMemoryBIOFactory):
        def buildProtocol(self, addr):
            inner = self.wrappedFactory.buildProtocol(addr)
            if inner is None:
                return None
            return self.protocol(self, inner)

    wrapped = LimitedTLSFactory(options, False, factory)
    wrapped.protocol = NoDelayTLSProtocol
    return wrapped


def options_from_config(config):
    """``CertificateOptions`` from ``tls-cert``/``tls-key``/``tls-ca`` (None if no cert)."""
    cert = config.get("tls-cert")
    if not cert:
        if config.get("tls-key") or config.get("tls-ca"):
            raise TLSConfigError("--tls-key and --tls-ca need --tls-cert")
        return None
    return server_options(cert, config.get("tls-key"), config.get("tls-ca"))


__all__ = ["TLSConfigError", "options_from_config", "pem_certificates", "server_options",
           "wrap_factory"]
