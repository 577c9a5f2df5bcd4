"""The certificate manager's pure read of its Secret: only an Opaque Secret is ever used."""

from __future__ import annotations

import base64

import pytest

from webhooks._certmanager import SECRET_NAME, UnusableSecret, secret_data


def secret(kind: str | None, data: dict[str, bytes]) -> dict[str, object]:
    obj: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET_NAME, "namespace": "gpuctrl"},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }
    if kind is not None:
        obj["type"] = kind
    return obj


@pytest.mark.parametrize(
    "kind",
    ["kubernetes.io/service-account-token", "kubernetes.io/tls", "bootstrap.kubernetes.io/token"],
)
def test_a_secret_of_another_type_is_refused_naming_it(kind: str) -> None:
    token = secret(kind, {"token": b"the manager's token", "ca.crt": b"-----BEGIN"})
    with pytest.raises(UnusableSecret) as raised:
        secret_data(token)
    message = str(raised.value)
    assert f"gpuctrl/{SECRET_NAME}" in message
    assert kind in message
    assert "\n" not in message
    assert "the manager's token" not in message


@pytest.mark.parametrize("kind", ["Opaque", None])
def test_an_opaque_secret_is_decoded(kind: str | None) -> None:
    assert secret_data(secret(kind, {"ca.crt": b"pem"})) == {"ca.crt": b"pem"}
    assert secret_data(secret(kind, {})) == {}


def test_no_secret_is_no_data() -> None:
    assert secret_data(None) == {}
