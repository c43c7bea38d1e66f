"""The certificate of the body server's ``https:`` side (``mmina.replayer.body_server``).

A large body of an ``https:`` page is continued to a loopback server of the same scheme
(Playwright keeps a continued request's scheme), which needs a certificate. One is made per
process, for 127.0.0.1, self-signed, its key never written anywhere but a private temporary
folder removed at once: nothing trusts it but the replay's own contexts, which take any
certificate (``Offline``: they reach no network, only this server).
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import ssl
import tempfile
from pathlib import Path

VALID_DAYS = 30


@functools.cache
def server_context() -> ssl.SSLContext:
    """A TLS server context with a new self-signed certificate for 127.0.0.1 (made once per process)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mmina replay body server")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory(prefix="mmina-tls-") as folder:  # ssl loads a chain from files only
        chain, secret = Path(folder) / "cert.pem", Path(folder) / "key.pem"
        chain.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        secret.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        context.load_cert_chain(chain, secret)
    return context
