"""The I/O shell of certificate management: the shared Secret, the files, the caBundle.

`CertificateManager` runs on every replica (it needs no leader: replicas share the Secret
``gpuctrl-webhook-tls`` through compare-and-swap writes, so a replica that loses a race
simply adopts the winner's certificates). Every ``interval`` seconds of its clock it reads
the Secret and the webhook configuration, writes the step `next_secret_data` asks for,
keeps the configuration's caBundle equal to the Secret's bundle, and copies the serving
certificate into the server's cert folder (where the server's `CertWatcher` loads it).
Certificates issued into an empty or deleted Secret keep the CAs the configuration trusts in
the bundle, so replicas still serving the old certificate are not refused meanwhile (to stop
trusting an old CA at once, clear the configuration's caBundle as well).

The install ships the Secret empty, and the webhook's ServiceAccount may not create Secrets; a
Secret that is absent is created only where the credentials allow it (a local control plane),
and otherwise reported as missing. A Secret of any type but ``Opaque`` is never read from or
written to (`UnusableSecret`): one of type ``kubernetes.io/service-account-token`` would carry
another account's token.

Time: the certificates' dates are read from the injected clock - the wall time at start plus
however far the clock moved beyond real time since - so a `FakeClock` can age them.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpuctrl.runtime import (
    AlreadyExists,
    Client,
    Clock,
    Conflict,
    Forbidden,
    NotFound,
    Resource,
    SystemClock,
)
from gpuctrl.runtime.webhook import CERT_FILE, KEY_FILE
from webhooks._configuration import ensure_configuration, published_bundle, read_configuration
from webhooks._pki import (
    BUNDLE_KEY,
    CERT_KEY,
    DEFAULT_LIFETIMES,
    KEY_KEY,
    Lifetimes,
    next_secret_data,
)

__all__ = ["SECRET_NAME", "SECRET_TYPE", "CertificateManager", "UnusableSecret", "secret_data"]

log = logging.getLogger("gpuctrl.webhook.certificates")

SECRET_NAME = "gpuctrl-webhook-tls"
SECRET_TYPE = "Opaque"
SECRETS = Resource("v1", "Secret", "secrets")
_ATTEMPTS = 5  # compare-and-swap rounds per pass before waiting for the next one


class UnusableSecret(Exception):
    """The Secret cannot be used: it is missing and may not be created, or it is of another type
    than `SECRET_TYPE`. The message is one line naming the Secret and what to do."""


class CertificateManager:
    """Keeps the webhook's CA and serving certificate in ``namespace``'s Secret, the serving
    pair in ``cert_dir`` (calling ``on_files`` after each change) and the caBundle of the
    webhook configuration current (creating the configuration when ``client_config`` is given;
    see `ensure_configuration`). ``names`` are the serving certificate's DNS names and IPs."""

    needs_leader = False

    def __init__(
        self,
        client: Client,
        namespace: str,
        cert_dir: Path,
        names: Sequence[str],
        *,
        client_config: dict[str, Any] | None = None,
        on_files: Callable[[], object] = lambda: None,
        lifetimes: Lifetimes = DEFAULT_LIFETIMES,
        interval: float = 10.0,
        clock: Clock | None = None,
    ) -> None:
        self._client = client
        self._namespace = namespace
        self._cert_dir = Path(cert_dir)
        self._names = list(names)
        self._client_config = client_config
        self._on_files = on_files
        self._lifetimes = lifetimes
        self._interval = interval
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._started = (self._clock.now(), time.monotonic())

    def now(self) -> datetime.datetime:
        """The wall time the certificates are dated by (see the module docstring)."""
        clock_start, real_start = self._started
        ahead = (self._clock.now() - clock_start) - (time.monotonic() - real_start)
        return datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=ahead)

    async def start(self, stop: asyncio.Event) -> None:
        """Run a pass now and every ``interval`` until ``stop`` is set; a pass that fails is
        logged (`UnusableSecret` as one line) and retried at the next one."""
        while True:
            try:
                await self.sync()
            except UnusableSecret as error:
                log.error("%s", error)
            except Exception:
                log.exception("certificate pass failed; retrying in %s s", self._interval)
            if await self._clock.wait(stop, self._interval):
                return

    async def sync(self) -> None:
        """One pass: Secret step, caBundle, files (see the module docstring); raises
        `UnusableSecret` before writing anything when the Secret cannot be used."""
        for _ in range(_ATTEMPTS):
            data = await self._step()
            if data is not None:
                break
        else:
            log.info("the Secret %s kept changing; retrying later", SECRET_NAME)
            return
        await ensure_configuration(
            self._client, data[BUNDLE_KEY], self._client_config, self._namespace
        )
        self._write_files(data)

    async def _step(self) -> dict[str, bytes] | None:
        """The Secret's data after this pass's step, or None when another replica won a race."""
        try:
            secret = await self._client.get(SECRETS, SECRET_NAME, self._namespace)
        except NotFound:
            secret = None
        data = secret_data(secret)
        published = published_bundle(await read_configuration(self._client))
        if secret is None or not data:
            # Shipped empty, or deleted: take every step at once. The CAs the apiserver trusts
            # now stay in the bundle (until they expire), so a replica still serving the old
            # certificate until its next pass is still trusted.
            seed = {BUNDLE_KEY: published} if published else {}
            if secret is None:
                return await self._create(self._settle(seed))
            return await self._replace(secret, self._settle(seed), "issued")
        trusted = published if published is not None else data.get(BUNDLE_KEY, b"")
        following = next_secret_data(data, self.now(), self._names, trusted, self._lifetimes)
        if following is None:
            return data
        return await self._replace(secret, following, "renewed")

    def _settle(self, data: dict[str, bytes]) -> dict[str, bytes]:
        while (
            following := next_secret_data(
                data, self.now(), self._names, data.get(BUNDLE_KEY, b""), self._lifetimes
            )
        ) is not None:
            data = following
        return data

    async def _create(self, data: dict[str, bytes]) -> dict[str, bytes] | None:
        try:
            await self._client.create(SECRETS, _secret(self._namespace, data))
        except AlreadyExists:
            return None
        except Forbidden as error:
            raise UnusableSecret(
                f"the Secret {self._namespace}/{SECRET_NAME} is missing and this account may "
                "not create it: apply the install again, which ships it empty"
            ) from error
        log.info("created the Secret %s/%s", self._namespace, SECRET_NAME)
        return data

    async def _replace(
        self, secret: dict[str, Any], data: dict[str, bytes], done: str
    ) -> dict[str, bytes] | None:
        try:
            await self._client.replace(SECRETS, {**secret, "data": _encode(data)})
        except Conflict:
            return None
        log.info("%s certificates in the Secret %s/%s", done, self._namespace, SECRET_NAME)
        return data

    def _write_files(self, data: dict[str, bytes]) -> None:
        changed = False
        for name, key in ((KEY_FILE, KEY_KEY), (CERT_FILE, CERT_KEY)):
            path = self._cert_dir / name
            if path.exists() and path.read_bytes() == data[key]:
                continue
            self._cert_dir.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{name}.tmp")
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data[key])
            os.replace(temporary, path)
            changed = True
        if changed:
            self._on_files()


def secret_data(secret: dict[str, Any] | None) -> dict[str, bytes]:
    """The decoded data of the Secret as read (empty when it is None or has none); raises
    `UnusableSecret`, reading no data, when its type is not `SECRET_TYPE`."""
    if secret is None:
        return {}
    kind = secret.get("type") or SECRET_TYPE  # the apiserver stores an unset type as Opaque
    if kind != SECRET_TYPE:
        metadata = secret.get("metadata", {})
        raise UnusableSecret(
            f"the Secret {metadata.get('namespace')}/{metadata.get('name')} is of type {kind}, "
            f"not {SECRET_TYPE}: refusing to use it; delete it and apply the install again"
        )
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def _encode(data: dict[str, bytes]) -> dict[str, str]:
    return {k: base64.b64encode(v).decode() for k, v in data.items()}


def _secret(namespace: str, data: dict[str, bytes]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": SECRET_NAME,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "gpuctrl"},
        },
        "type": SECRET_TYPE,
        "data": _encode(data),
    }
