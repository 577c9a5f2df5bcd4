"""Issuing the certificates a webhook serves with: a CA and serving certificates it signs.

Keys are ECDSA P-256 (generated in microseconds, where RSA-2048 takes tens of milliseconds).
A CA may sign leaf certificates only (path length 0); a serving certificate is for TLS server
authentication under its names (DNS names and IP addresses) and ends no later than its CA.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["KeyPair", "certificate_pem", "new_ca", "new_serving_certificate", "private_key_pem"]

KeyPair = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]
"""A certificate and its private key."""


def new_ca(
    common_name: str, not_before: datetime.datetime, not_after: datetime.datetime
) -> KeyPair:
    """A self-signed CA valid from ``not_before`` to ``not_after``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    cert = (
        _builder(name, name, key.public_key(), key.public_key(), not_before, not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def new_serving_certificate(
    common_name: str,
    names: Sequence[str],
    issuer: KeyPair | None,
    not_before: datetime.datetime,
    not_after: datetime.datetime,
) -> KeyPair:
    """A serving certificate for ``names`` (each an IP address or a DNS name, sorted and
    deduplicated), signed by ``issuer`` (None: self-signed), valid from ``not_before`` to
    ``not_after`` or the issuer's end, whichever comes first."""
    key = ec.generate_private_key(ec.SECP256R1())
    alt_names: list[x509.GeneralName] = []
    for name in sorted(set(names)):
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt_names.append(x509.DNSName(name))
    subject = _name(common_name)
    issuer_name, issuer_key = (subject, key) if issuer is None else (issuer[0].subject, issuer[1])
    if issuer is not None:
        not_after = min(not_after, issuer[0].not_valid_after_utc)
    cert = (
        _builder(
            subject, issuer_name, key.public_key(), issuer_key.public_key(), not_before, not_after
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .sign(issuer_key, hashes.SHA256())
    )
    return cert, key


def certificate_pem(cert: x509.Certificate) -> bytes:
    """``cert`` in PEM."""
    return cert.public_bytes(serialization.Encoding.PEM)


def private_key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """``key`` in unencrypted PKCS#8 PEM."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    issuer_key: ec.EllipticCurvePublicKey,
    not_before: datetime.datetime,
    not_after: datetime.datetime,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key), critical=False
        )
    )


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )
