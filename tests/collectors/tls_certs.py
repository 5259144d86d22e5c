"""Throw-away TLS material for the TLS ZooKeeper tests, generated at test time in a tmp dir.

A CA signs a server certificate (127.0.0.1 / localhost) and a client certificate; the server gets a PKCS12
keystore (its key + chain) and a JKS truststore (the CA, made with the JDK's keytool), the Python client gets
PEM files. A second, unrelated CA is made too, for the "wrong CA" case. Nothing here is a secret worth keeping.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

STORE_PASSWORD = "zkledger-test-store"  # generated per run; only protects files in a pytest tmp dir
CLIENT_CN = "zkledger-collector"

Key = ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class TlsMaterial:
    """Paths of everything generated (PEM for kazoo, stores for the ZooKeeper server)."""

    ca: Path
    wrong_ca: Path
    client_cert: Path
    client_key: Path
    server_keystore: Path
    server_truststore: Path
    password: str = STORE_PASSWORD

    @property
    def client_principal(self) -> str:
        """The client certificate's subject as ZooKeeper's x509 auth provider names it (RFC 2253)."""
        return f"CN={CLIENT_CN},O=zkledger tests"

    def server_config(self, secure_port: int, *, client_auth: str = "need") -> dict[str, str]:
        """zoo.cfg lines for a Netty TLS client port (ZooKeeper turns unknown keys into `zookeeper.*` props)."""
        return {
            "secureClientPort": str(secure_port),
            "secureClientPortAddress": "127.0.0.1",
            "serverCnxnFactory": "org.apache.zookeeper.server.NettyServerCnxnFactory",
            "ssl.keyStore.location": str(self.server_keystore),
            "ssl.keyStore.password": self.password,
            "ssl.keyStore.type": "PKCS12",
            "ssl.trustStore.location": str(self.server_truststore),
            "ssl.trustStore.password": self.password,
            "ssl.trustStore.type": "JKS",
            "ssl.clientAuth": client_auth,
            # the client certificate authenticates the session (scheme x509, id = its subject)
            "authProvider.x509": "org.apache.zookeeper.server.auth.X509AuthenticationProvider",
        }


def _name(cn: str) -> x509.Name:
    # O before CN, so that the RFC 2253 form (most specific first) reads "CN=...,O=..."
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "zkledger tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _new_key() -> Key:
    return ec.generate_private_key(ec.SECP256R1())


def _builder(subject: x509.Name, issuer: x509.Name, key: Key) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=2)))


def _ca(cn: str) -> tuple[Key, x509.Certificate]:
    key = _new_key()
    cert = (_builder(_name(cn), _name(cn), key)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def _leaf(cn: str, ca_key: Key, ca_cert: x509.Certificate, *, server: bool) -> tuple[Key, x509.Certificate]:
    key = _new_key()
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (_builder(_name(cn), ca_cert.subject, key)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                              critical=False))
    if server:
        names: list[x509.GeneralName] = [x509.DNSName("localhost"),
                                         x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _write_pem(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _write_key(path: Path, key: Key) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)
    return path


def _keystore(path: Path, key: Key, cert: x509.Certificate, ca_cert: x509.Certificate, password: str) -> Path:
    blob = pkcs12.serialize_key_and_certificates(b"server", key, cert, [ca_cert],
                                                 serialization.BestAvailableEncryption(password.encode()))
    path.write_bytes(blob)
    return path


def _truststore(path: Path, ca_pem: Path, password: str) -> Path:
    """A JKS truststore holding the CA, made by the JDK's own keytool (next to the java that runs ZooKeeper)."""
    keytool = shutil.which("keytool")
    if keytool is None:
        raise RuntimeError("keytool not found (it ships with the JDK that runs ZooKeeper)")
    subprocess.run([keytool, "-importcert", "-noprompt", "-alias", "zkledger-test-ca", "-file", str(ca_pem),
                    "-keystore", str(path), "-storetype", "JKS", "-storepass", password],
                   check=True, capture_output=True, timeout=60)
    return path


def make_tls_material(folder: Path) -> TlsMaterial:
    """Generate a CA, server and client certificates, the server's key/trust stores and an unrelated CA."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca("zkledger test CA")
    _wrong_key, wrong_cert = _ca("some other CA")
    server_key, server_cert = _leaf("localhost", ca_key, ca_cert, server=True)
    client_key, client_cert = _leaf(CLIENT_CN, ca_key, ca_cert, server=False)
    ca_pem = _write_pem(folder / "ca.pem", ca_cert)
    return TlsMaterial(
        ca=ca_pem,
        wrong_ca=_write_pem(folder / "wrong-ca.pem", wrong_cert),
        client_cert=_write_pem(folder / "client.pem", client_cert),
        client_key=_write_key(folder / "client-key.pem", client_key),
        server_keystore=_keystore(folder / "server.p12", server_key, server_cert, ca_cert, STORE_PASSWORD),
        server_truststore=_truststore(folder / "truststore.jks", ca_pem, STORE_PASSWORD),
    )
