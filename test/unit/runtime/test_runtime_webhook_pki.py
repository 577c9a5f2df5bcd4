"""Issuing a webhook's certificates: a CA for leaf certificates only, serving certificates for
their names, never outliving their issuer."""

from __future__ import annotations

import datetime

from cryptography import x509

from gpuctrl.runtime.webhook import (
    certificate_pem,
    new_ca,
    new_serving_certificate,
    private_key_pem,
)

START = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)


def test_a_serving_certificate_names_ips_and_dns_names_and_ends_with_its_ca() -> None:
    ca = new_ca("test-ca", START, START + 10 * DAY)
    assert ca[0].extensions.get_extension_for_class(x509.BasicConstraints).value.path_length == 0
    cert, key = new_serving_certificate(
        "svc", ["b.svc", "127.0.0.1", "a.svc", "b.svc"], ca, START, START + 30 * DAY
    )
    cert.verify_directly_issued_by(ca[0])
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["a.svc", "b.svc"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert cert.not_valid_after_utc == START + 10 * DAY
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert x509.load_pem_x509_certificate(certificate_pem(cert)) == cert
    assert private_key_pem(key).startswith(b"-----BEGIN PRIVATE KEY-----")


def test_without_an_issuer_the_certificate_signs_itself() -> None:
    cert, _ = new_serving_certificate("loopback", ["::1"], None, START, START + DAY)
    cert.verify_directly_issued_by(cert)
    assert cert.not_valid_after_utc == START + DAY
