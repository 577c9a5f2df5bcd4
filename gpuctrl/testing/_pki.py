"""Certificates and keys of one local control plane, written into its folder.

Every control plane gets its own certificate authority, an apiserver serving certificate signed by
it, and a service-account signing key. Keys are ECDSA P-256: generating them takes microseconds,
where RSA-2048 takes tens of milliseconds each.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Pki", "self_signed_pair", "write_pki"]

# Names under which the apiserver is reached: on loopback by tests, and in-cluster by pods.
_SERVING_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
_SERVING_IPS = ("127.0.0.1", "10.0.0.1")
_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files of one control plane."""

    ca_file: Path
    serving_cert_file: Path
    serving_key_file: Path
    service_account_key_file: Path  # private: signs tokens (apiserver, controller-manager)
    service_account_pub_file: Path  # public: verifies tokens (apiserver)


def write_pki(directory: Path) -> Pki:
    """Generate a fresh CA, serving certificate and service-account key pair into `directory`."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpuctrl-testing-ca")])
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key(), ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    serving_key = ec.generate_private_key(ec.SECP256R1())
    serving_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")])
    alt_names: list[x509.GeneralName] = [x509.DNSName(name) for name in _SERVING_DNS_NAMES]
    alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in _SERVING_IPS]
    serving_cert = _serving_cert(serving_name, serving_key, ca_name, ca_key, alt_names, now)
    sa_key = ec.generate_private_key(ec.SECP256R1())
    pki = Pki(
        ca_file=directory / "ca.crt",
        serving_cert_file=directory / "apiserver.crt",
        serving_key_file=directory / "apiserver.key",
        service_account_key_file=directory / "sa.key",
        service_account_pub_file=directory / "sa.pub",
    )
    pki.ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    pki.serving_cert_file.write_bytes(serving_cert.public_bytes(serialization.Encoding.PEM))
    pki.serving_key_file.write_bytes(_private_pem(serving_key))
    pki.service_account_key_file.write_bytes(_private_pem(sa_key))
    pki.service_account_pub_file.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki


def self_signed_pair(common_name: str, ips: list[str]) -> tuple[bytes, bytes]:
    """A self-signed serving certificate for ``ips`` and its key (PEM), for a loopback server."""
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    alt_names = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert = _serving_cert(name, key, name, key, list(alt_names), now)
    return cert.public_bytes(serialization.Encoding.PEM), _private_pem(key)


def _serving_cert(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    alt_names: list[x509.GeneralName],
    now: datetime.datetime,
) -> x509.Certificate:
    return (
        _builder(subject, issuer, key.public_key(), issuer_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .sign(issuer_key, hashes.SHA256())
    )


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    issuer_key: ec.EllipticCurvePublicKey,
    now: datetime.datetime,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key), critical=False
        )
    )


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=not cert_sign,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
