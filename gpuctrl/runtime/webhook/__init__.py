"""gpuctrl.runtime.webhook: admission webhooks served by a manager, on every replica.

`WebhookServer` serves handlers over HTTPS with certificates reloaded from files
(`CertWatcher`); handlers take an `AdmissionRequest` and answer `allowed`, `denied` or
`patched` (a JSON Patch computed from the object before and after); `new_ca` and
`new_serving_certificate` issue the certificates to serve with. The server bounds what slow or
idle clients can hold (``DEFAULT_*`` are its limits) and shuts down without refusing calls in
a rollout. It knows nothing of GPUs.
"""

from ._certs import CERT_FILE, KEY_FILE, CertWatcher
from ._pki import KeyPair, certificate_pem, new_ca, new_serving_certificate, private_key_pem
from ._review import (
    ADMISSION_API_VERSION,
    AdmissionRequest,
    AdmissionResponse,
    BadReview,
    allowed,
    denied,
    parse_review,
    patched,
    review_response,
)
from ._server import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_SHUTDOWN_DELAY,
    Handler,
    WebhookServer,
)

__all__ = [
    "ADMISSION_API_VERSION",
    "CERT_FILE",
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_DRAIN_TIMEOUT",
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_SHUTDOWN_DELAY",
    "KEY_FILE",
    "AdmissionRequest",
    "AdmissionResponse",
    "BadReview",
    "CertWatcher",
    "Handler",
    "KeyPair",
    "WebhookServer",
    "allowed",
    "certificate_pem",
    "denied",
    "new_ca",
    "new_serving_certificate",
    "parse_review",
    "patched",
    "private_key_pem",
    "review_response",
]
