"""gpuctrl's mutating admission webhook: PodPolicies applied to gpuctrl's pods.

`mutate` is the pure core (pod + PodPolicies -> JSON Patch); `PodPolicyHandler` and
`PolicySet` are the thin shell the `gpuctrl.runtime.webhook.WebhookServer` calls;
`CertificateManager` keeps the CA and serving certificate in the Secret ``gpuctrl-webhook-tls``
(`next_secret_data` decides each step purely); `ensure_configuration` keeps the
MutatingWebhookConfiguration ``gpuctrl-pod-policy``. ``gpuctrl webhook`` is `webhooks.cli`.
"""

from webhooks._certmanager import SECRET_NAME, CertificateManager
from webhooks._configuration import (
    CONFIGURATION_NAME,
    WEBHOOK_NAME,
    WEBHOOK_NAMES,
    ConfigurationKeeper,
    ensure_configuration,
    webhook_configuration,
)
from webhooks._handler import MUTATE_PATH, POD_POLICIES, PodPolicyHandler, PolicySet
from webhooks._mutate import InvalidPod, Mutation, mutate
from webhooks._pki import DEFAULT_LIFETIMES, Lifetimes, next_secret_data

__all__ = [
    "CONFIGURATION_NAME",
    "DEFAULT_LIFETIMES",
    "MUTATE_PATH",
    "POD_POLICIES",
    "SECRET_NAME",
    "WEBHOOK_NAME",
    "WEBHOOK_NAMES",
    "CertificateManager",
    "ConfigurationKeeper",
    "InvalidPod",
    "Lifetimes",
    "Mutation",
    "PodPolicyHandler",
    "PolicySet",
    "ensure_configuration",
    "mutate",
    "next_secret_data",
    "webhook_configuration",
]
