"""Certificates and keys of one local control plane, written into its folder.

Every control plane gets its own certificate authority, an apiserver serving certificate signed by
it (issued by `gpuctrl.runtime.webhook`), and a service-account signing key (ECDSA P-256).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gpuctrl.runtime.webhook import (
    certificate_pem,
    new_ca,
    new_serving_certificate,
    private_key_pem,
)

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
_BACKDATE = datetime.timedelta(hours=1)


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
    start, end = now - _BACKDATE, now + _VALIDITY
    ca = new_ca("gpuctrl-testing-ca", start, end)
    names = [*_SERVING_DNS_NAMES, *_SERVING_IPS]
    serving_cert, serving_key = new_serving_certificate("kube-apiserver", names, ca, start, end)
    sa_key = ec.generate_private_key(ec.SECP256R1())
    pki = Pki(
        ca_file=directory / "ca.crt",
        serving_cert_file=directory / "apiserver.crt",
        serving_key_file=directory / "apiserver.key",
        service_account_key_file=directory / "sa.key",
        service_account_pub_file=directory / "sa.pub",
    )
    pki.ca_file.write_bytes(certificate_pem(ca[0]))
    pki.serving_cert_file.write_bytes(certificate_pem(serving_cert))
    pki.serving_key_file.write_bytes(private_key_pem(serving_key))
    pki.service_account_key_file.write_bytes(private_key_pem(sa_key))
    pki.service_account_pub_file.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki


def self_signed_pair(common_name: str, ips: list[str]) -> tuple[bytes, bytes]:
    """A self-signed serving certificate for ``ips`` and its key (PEM), for a loopback server."""
    now = datetime.datetime.now(datetime.UTC)
    cert, key = new_serving_certificate(common_name, ips, None, now - _BACKDATE, now + _VALIDITY)
    return certificate_pem(cert), private_key_pem(key)
