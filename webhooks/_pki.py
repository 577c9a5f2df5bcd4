"""The webhook's certificates as data: what the Secret should hold next, decided purely.

The Secret ``gpuctrl-webhook-tls`` holds a CA (``ca.crt``, ``ca.key``), the CAs to trust
(``ca-bundle.crt``: the current CA first, then older ones not yet expired) and a serving
certificate signed by the current CA (``tls.crt``, ``tls.key``). `next_secret_data` takes
the current data and the time and returns the data the Secret should hold next, or None when
it is fine as it is. One step at a time, so that the trust bundle is always published before
a certificate that needs it is served:

1. no usable CA, or less than a third of its lifetime left: a new CA, added to the bundle
   (the serving certificate is kept: the old CA stays trusted);
2. CAs in the bundle that have expired are dropped (nothing they signed can still be valid:
   a serving certificate never outlives its CA);
3. the serving certificate is replaced when it is missing, unusable, for other names, less
   than a third of its lifetime is left, or it is not signed by the current CA - the last
   only once the current CA is in ``published`` (the bundle the apiserver already trusts).

Keys are ECDSA P-256; certificates start an hour before issue (clock skew between replicas
and the apiserver) and a serving certificate ends no later than its CA.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gpuctrl.runtime.webhook import (
    KeyPair,
    certificate_pem,
    new_ca,
    new_serving_certificate,
    private_key_pem,
)

__all__ = [
    "BUNDLE_KEY",
    "CA_CERT_KEY",
    "CA_KEY_KEY",
    "CERT_KEY",
    "DEFAULT_LIFETIMES",
    "KEY_KEY",
    "Lifetimes",
    "next_secret_data",
]

CA_CERT_KEY = "ca.crt"
CA_KEY_KEY = "ca.key"
BUNDLE_KEY = "ca-bundle.crt"
CERT_KEY = "tls.crt"
KEY_KEY = "tls.key"

_BACKDATE = datetime.timedelta(hours=1)


@dataclass(frozen=True)
class Lifetimes:
    """How long new certificates are valid; each is renewed with a third of it left."""

    ca: datetime.timedelta = datetime.timedelta(days=3 * 365)
    serving: datetime.timedelta = datetime.timedelta(days=90)


DEFAULT_LIFETIMES = Lifetimes()
SecretData = dict[str, bytes]


def next_secret_data(
    data: Mapping[str, bytes],
    now: datetime.datetime,
    names: Sequence[str],
    published: bytes,
    lifetimes: Lifetimes = DEFAULT_LIFETIMES,
) -> SecretData | None:
    """The Secret data after the next step (see the module docstring), or None when none is due.

    ``names`` are the serving certificate's DNS names or IP addresses; ``published`` is the
    caBundle the webhook configuration carries now.
    """
    ca = _load_ca(data)
    if ca is None or _remaining(ca[0], now) < lifetimes.ca / 3:
        new_ca = _issue_ca(now, lifetimes.ca)
        bundle = [new_ca[0], *(c for c in _bundle(data) if c.not_valid_after_utc > now)]
        return {**data, **_ca_data(new_ca), BUNDLE_KEY: _pems(bundle)}
    bundle = _bundle(data)
    kept = [c for c in bundle if c.not_valid_after_utc > now or c == ca[0]]
    if ca[0] not in kept:
        kept.insert(0, ca[0])
    if kept != bundle:
        return {**data, BUNDLE_KEY: _pems(kept)}
    serving = _load_serving(data)
    if serving is not None and not _serving_due(serving, ca[0], now, names, lifetimes):
        return None
    if (
        serving is not None
        and serving.not_valid_after_utc > now
        and certificate_pem(ca[0]) not in published
    ):
        return None  # the current CA is not trusted yet: keep serving the valid certificate
    cert, key = _issue_serving(ca, now, names, lifetimes.serving)
    return {**data, CERT_KEY: certificate_pem(cert), KEY_KEY: private_key_pem(key)}


def _serving_due(
    cert: x509.Certificate,
    ca: x509.Certificate,
    now: datetime.datetime,
    names: Sequence[str],
    lifetimes: Lifetimes,
) -> bool:
    return (
        _remaining(cert, now) < lifetimes.serving / 3
        or cert.not_valid_before_utc > now
        or not _signed_by(cert, ca)
        or _names(cert) != sorted(set(names))
    )


def _remaining(cert: x509.Certificate, now: datetime.datetime) -> datetime.timedelta:
    return cert.not_valid_after_utc - now


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _names(cert: x509.Certificate) -> list[str]:
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    found = [*sans.get_values_for_type(x509.DNSName)]
    found += [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    return sorted(set(found))


def _load_ca(data: Mapping[str, bytes]) -> KeyPair | None:
    try:
        cert = x509.load_pem_x509_certificate(data[CA_CERT_KEY])
        key = serialization.load_pem_private_key(data[CA_KEY_KEY], password=None)
    except (KeyError, ValueError, TypeError):
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
        return None
    return cert, key


def _load_serving(data: Mapping[str, bytes]) -> x509.Certificate | None:
    try:
        cert = x509.load_pem_x509_certificate(data[CERT_KEY])
        key = serialization.load_pem_private_key(data[KEY_KEY], password=None)
    except (KeyError, ValueError, TypeError):
        return None
    return cert if key.public_key() == cert.public_key() else None


def _bundle(data: Mapping[str, bytes]) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(data.get(BUNDLE_KEY, b""))
    except ValueError:
        return []


def _issue_ca(now: datetime.datetime, lifetime: datetime.timedelta) -> KeyPair:
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    return new_ca(f"gpuctrl-webhook-ca@{stamp}", now - _BACKDATE, now + lifetime)


def _issue_serving(
    ca: KeyPair, now: datetime.datetime, names: Sequence[str], lifetime: datetime.timedelta
) -> KeyPair:
    return new_serving_certificate("gpuctrl-webhook", names, ca, now - _BACKDATE, now + lifetime)


def _ca_data(ca: KeyPair) -> SecretData:
    return {CA_CERT_KEY: certificate_pem(ca[0]), CA_KEY_KEY: private_key_pem(ca[1])}


def _pems(certs: Sequence[x509.Certificate]) -> bytes:
    return b"".join(certificate_pem(c) for c in certs)
