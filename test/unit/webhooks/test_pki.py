"""The certificate steps: renewal points, the trust bundle across a CA rotation."""

from __future__ import annotations

import datetime

from cryptography import x509

from webhooks._pki import BUNDLE_KEY, CA_CERT_KEY, CERT_KEY, Lifetimes, next_secret_data

START = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
LIFETIMES = Lifetimes(ca=datetime.timedelta(days=30), serving=datetime.timedelta(days=9))
NAMES = ["gpuctrl-webhook.gpuctrl.svc", "127.0.0.1"]


def settle(data: dict[str, bytes], day: float, published: bytes) -> dict[str, bytes]:
    now = START + datetime.timedelta(days=day)
    for _ in range(10):
        following = next_secret_data(data, now, NAMES, published, LIFETIMES)
        if following is None:
            return data
        data = following
    raise AssertionError("the steps did not settle")


def cert(data: dict[str, bytes], key: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(data[key])


def bundle(data: dict[str, bytes]) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(data[BUNDLE_KEY])


def test_first_certificates_name_the_service_and_the_url_host() -> None:
    data = settle({}, 0, b"")
    serving = cert(data, CERT_KEY)
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["gpuctrl-webhook.gpuctrl.svc"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    serving.verify_directly_issued_by(cert(data, CA_CERT_KEY))


def test_serving_certificate_is_renewed_with_a_third_of_its_lifetime_left() -> None:
    data = settle({}, 0, b"")
    first = cert(data, CERT_KEY)
    assert settle(data, 5.9, data[BUNDLE_KEY])[CERT_KEY] == data[CERT_KEY]
    renewed = settle(data, 6.1, data[BUNDLE_KEY])
    assert cert(renewed, CERT_KEY).serial_number != first.serial_number


def test_ca_rotation_keeps_the_old_ca_trusted_until_it_expires() -> None:
    data = settle({}, 0, b"")
    published = data[BUNDLE_KEY]
    data = settle(data, 18, published)  # serving certificate renewed: valid until day 27
    old_ca = cert(data, CA_CERT_KEY)
    # Day 21: less than a third of the CA's 30 days left -> a new CA joins the bundle, but the
    # serving certificate stays the old CA's until the new bundle is published.
    data = settle(data, 21, published)
    new_ca = cert(data, CA_CERT_KEY)
    assert new_ca != old_ca
    assert bundle(data) == [new_ca, old_ca]
    cert(data, CERT_KEY).verify_directly_issued_by(old_ca)
    # Once the apiserver trusts the bundle, the serving certificate moves to the new CA.
    data = settle(data, 21, data[BUNDLE_KEY])
    cert(data, CERT_KEY).verify_directly_issued_by(new_ca)
    assert bundle(data) == [new_ca, old_ca]
    # After the old CA expired it leaves the bundle.
    data = settle(data, 30.5, data[BUNDLE_KEY])
    assert bundle(data) == [new_ca]


def test_a_serving_certificate_never_outlives_its_ca() -> None:
    data = settle({}, 0, b"")
    data = settle(data, 18, data[BUNDLE_KEY])  # renewed at day 18, CA ends day 30
    assert cert(data, CERT_KEY).not_valid_after_utc <= cert(data, CA_CERT_KEY).not_valid_after_utc


def test_garbage_in_the_secret_is_replaced() -> None:
    data = settle({CA_CERT_KEY: b"junk", CERT_KEY: b"junk", BUNDLE_KEY: b"junk"}, 0, b"")
    cert(data, CERT_KEY).verify_directly_issued_by(cert(data, CA_CERT_KEY))


def test_other_names_get_a_new_certificate() -> None:
    data = settle({}, 0, b"")
    following = next_secret_data(data, START, ["other.svc"], data[BUNDLE_KEY], LIFETIMES)
    assert following is not None
    assert following[CERT_KEY] != data[CERT_KEY]
