"""The certificate manager and the Secret the install ships, on the real apiserver."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from cryptography import x509
from kubernetes_asyncio.client import ApiClient

from gpuctrl.runtime import Client, NotFound, Resource
from webhooks._certmanager import SECRET_NAME, CertificateManager, UnusableSecret
from webhooks._configuration import (
    CONFIGURATION_NAME,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    published_bundle,
    read_configuration,
)
from webhooks._pki import BUNDLE_KEY, CERT_KEY, KEY_KEY, _signed_by

pytestmark = pytest.mark.slow

SECRETS = Resource("v1", "Secret", "secrets")
CLIENT_CONFIG = {"url": "https://127.0.0.1:1/mutate-v1-pod"}


def manager(client: Client, namespace: str, cert_dir: Path) -> CertificateManager:
    return CertificateManager(
        client, namespace, cert_dir, ["127.0.0.1"], client_config=CLIENT_CONFIG
    )


def exists(path: Path) -> bool:
    return path.exists()


async def test_a_token_secret_in_its_place_is_neither_read_nor_written(
    kube_api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    """Issue 25 item 6: a service-account-token Secret named gpuctrl-webhook-tls (the token
    controller fills it with another account's token) is refused, and nothing is written."""
    client = Client(kube_api)
    token = base64.b64encode(b"another account's token").decode()
    await client.create(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": SECRET_NAME,
                "namespace": namespace,
                "annotations": {"kubernetes.io/service-account.name": "default"},
            },
            "type": "kubernetes.io/service-account-token",
            "data": {"token": token},
        },
    )
    with pytest.raises(UnusableSecret, match=r"kubernetes\.io/service-account-token"):
        await manager(client, namespace, tmp_path / "certs").sync()
    after = await client.get(SECRETS, SECRET_NAME, namespace)
    # The token controller may have added ca.crt and namespace; the manager added nothing.
    assert after["data"]["token"] == token
    assert not {CERT_KEY, KEY_KEY, BUNDLE_KEY, "ca.key"} & set(after["data"])
    assert not exists(tmp_path / "certs")
    with pytest.raises(NotFound):
        await client.get(MUTATING_WEBHOOK_CONFIGURATIONS, CONFIGURATION_NAME)


async def test_the_shipped_empty_secret_is_filled_in_one_pass(
    kube_api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    client = Client(kube_api)
    await client.create(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET_NAME, "namespace": namespace},
            "type": "Opaque",
        },
    )
    try:
        await manager(client, namespace, tmp_path).sync()
        secret = await client.get(SECRETS, SECRET_NAME, namespace)
        data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
        assert (tmp_path / "tls.crt").read_bytes() == data[CERT_KEY]
        assert (tmp_path / "tls.key").read_bytes() == data[KEY_KEY]
        configuration = await read_configuration(client)
        assert published_bundle(configuration) == data[BUNDLE_KEY]
    finally:
        await client.delete(MUTATING_WEBHOOK_CONFIGURATIONS, CONFIGURATION_NAME)


async def test_after_the_secret_is_deleted_the_old_ca_stays_trusted_beside_the_new(
    kube_api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    """Issue 25 item 7: a replica that re-issues into a deleted Secret publishes a bundle
    holding the new CA and the one the other replicas still serve until their next pass."""
    client = Client(kube_api)
    first, second = (
        manager(client, namespace, tmp_path / "a"),
        manager(client, namespace, tmp_path / "b"),
    )
    try:
        await first.sync()
        await second.sync()
        served_by_second = x509.load_pem_x509_certificate((tmp_path / "b" / "tls.crt").read_bytes())
        await client.delete(SECRETS, SECRET_NAME, namespace)
        await first.sync()  # a new CA and certificate, published before `second` has them
        bundle = x509.load_pem_x509_certificates(
            published_bundle(await read_configuration(client)) or b""
        )
        served_by_first = x509.load_pem_x509_certificate((tmp_path / "a" / "tls.crt").read_bytes())
        assert len(bundle) == 2
        signers = {
            name: [ca for ca in bundle if _signed_by(cert, ca)]
            for name, cert in (("first", served_by_first), ("second", served_by_second))
        }
        assert len(signers["first"]) == len(signers["second"]) == 1, "each is trusted"
        assert signers["first"] != signers["second"], "by the new CA and by the old one"
    finally:
        await client.delete(MUTATING_WEBHOOK_CONFIGURATIONS, CONFIGURATION_NAME)
