"""Serving certificates from a folder, reloaded when the files change.

`CertWatcher` reads ``tls.crt`` and ``tls.key`` from a folder (a mounted Secret, whose files
are symlinks that the kubelet swaps, or a folder a certificate manager writes into) and
re-reads them every ``poll_interval`` seconds of its clock; a change of their bytes builds a
new TLS context. The server's context carries an SNI callback that hands every new TLS
handshake the newest context, so new connections get the new certificate while open ones
keep theirs. A pair that does not load (half-written, key and certificate not matching) is
logged (once while it lasts) and the previous one kept; the next poll tries again.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

from .._clock import Clock, SystemClock

__all__ = ["CERT_FILE", "KEY_FILE", "CertWatcher"]

log = logging.getLogger("gpuctrl.runtime.webhook")

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"


class CertWatcher:
    """The newest loadable certificate and key in ``cert_dir``; see the module docstring."""

    def __init__(
        self, cert_dir: Path, *, poll_interval: float = 1.0, clock: Clock | None = None
    ) -> None:
        self.cert_dir = Path(cert_dir)
        self.poll_interval = poll_interval
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._current: ssl.SSLContext | None = None
        self._loaded: tuple[bytes, bytes] | None = None  # the bytes `_current` was built from
        self._last_problem: str | None = None

    @property
    def loaded(self) -> bool:
        """Whether a certificate has been loaded (the server can complete handshakes)."""
        return self._current is not None

    @property
    def certificate(self) -> bytes | None:
        """The PEM of the certificate now handed to new connections."""
        return None if self._loaded is None else self._loaded[0]

    def server_context(self) -> ssl.SSLContext:
        """The context to listen with: every handshake switches to the newest certificate."""
        context = _new_context()
        context.sni_callback = self._select
        return context

    def reload(self) -> bool:
        """Read the files now; return whether a new certificate was taken into use."""
        try:
            pair = (
                (self.cert_dir / CERT_FILE).read_bytes(),
                (self.cert_dir / KEY_FILE).read_bytes(),
            )
        except FileNotFoundError:
            # Not yet written (a certificate manager, a Secret volume still syncing): not ready
            # until it is, which /readyz says; not a warning.
            self._problem(f"waiting for a serving certificate in {self.cert_dir}", logging.INFO)
            return False
        except OSError as error:
            self._problem(f"cannot read the serving certificate in {self.cert_dir}: {error}")
            return False
        if pair == self._loaded:
            return False
        context = _new_context()
        try:
            context.load_cert_chain(self.cert_dir / CERT_FILE, self.cert_dir / KEY_FILE)
        except (OSError, ssl.SSLError) as error:
            self._problem(f"the serving certificate in {self.cert_dir} does not load: {error}")
            return False
        self._current, self._loaded, self._last_problem = context, pair, None
        log.info("serving certificate loaded from %s", self.cert_dir)
        return True

    def _problem(self, message: str, level: int = logging.WARNING) -> None:
        """Log a problem once, not on every poll while it lasts."""
        if message != self._last_problem:
            log.log(level, "%s", message)
            self._last_problem = message

    async def watch(self, stop: asyncio.Event) -> None:
        """`reload` every ``poll_interval`` until ``stop`` is set."""
        while not await self._clock.wait(stop, self.poll_interval):
            self.reload()

    def _select(self, connection: ssl.SSLObject, server_name: str | None, _: object) -> None:
        if self._current is not None:
            connection.context = self._current


def _new_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
