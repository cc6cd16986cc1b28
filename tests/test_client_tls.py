"""``tls:host:port`` endpoints: the client through TLS to our server behind a TLS port."""
import datetime
import os
import tempfile

from twisted.internet import defer, reactor
from twisted.internet.endpoints import serverFromString
from twisted.trial import unittest

from twisted_stalk.client import BeanstalkClient
from twisted_stalk.engines import open_engine
from twisted_stalk.server import BeanstalkServerFactory

try:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID
    import OpenSSL  # noqa: F401
    import service_identity  # noqa: F401
except ImportError:  # pragma: no cover
    x509 = None


def make_cert(directory):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    key_path = os.path.join(directory, "key.pem")
    cert_path = os.path.join(directory, "cert.pem")
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.TraditionalOpenSSL,
                                  serialization.NoEncryption()))
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


class TLSTests(unittest.TestCase):
    if x509 is None:
        skip = "cryptography, pyOpenSSL and service_identity are needed for TLS"

    async def _round_trip(self):
        directory = tempfile.mkdtemp()
        key_path, cert_path = make_cert(directory)
        roots = os.path.join(directory, "roots")
        os.mkdir(roots)
        os.link(cert_path, os.path.join(roots, "ca.pem"))
        endpoint = serverFromString(
            reactor, f"ssl:0:interface=127.0.0.1:privateKey={key_path}:certKey={cert_path}")
        factory = BeanstalkServerFactory(reactor, open_engine("memory:", reactor))
        port = await endpoint.listen(factory)
        self.addCleanup(port.stopListening)
        # The in-process server's one timer may still be armed for a stale deadline.
        self.addCleanup(lambda: [c.cancel() for c in reactor.getDelayedCalls()
                                 if getattr(c.func, "__self__", None) is factory])
        number = port.getHost().port
        client = BeanstalkClient(f"tls:localhost:{number}:trustRoots={roots}", reactor=reactor)
        self.addCleanup(client.close)
        job_id = await client.tube("secure").put(b"over TLS")
        job = await client.watching("secure").reserve(timeout=1)
        assert job.id == job_id and job.body == b"over TLS"
        await job.delete()

    def test_tls_round_trip(self):
        return defer.ensureDeferred(self._round_trip())
