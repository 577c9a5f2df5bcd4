"""gpuctrl.runtime: an asyncio controller runtime with client-go and controller-runtime semantics.

Work queues, shared informer caches, controllers with workers and backoff, a manager with
leader election, health and Prometheus metrics, and server-side apply helpers. It knows
nothing of GPUs.
"""

from ._builder import ControllerOptions, Owns, Watch, build_controller
from ._cache import Cache
from ._client import DEFAULT_REQUEST_TIMEOUT, METADATA_ONLY, Client, retry_on_conflict
from ._clock import Clock, SystemClock, TimerHandle
from ._controller import Controller, Reconciler
from ._enqueue import Mapper, request_for_object, requests_for_owner
from ._errors import (
    AlreadyExists,
    ApiError,
    BadRequest,
    CacheNotStarted,
    CannotListen,
    Conflict,
    Forbidden,
    Gone,
    GpuctrlError,
    Invalid,
    LeaderElectionLost,
    NotFound,
    QueueShutDown,
    ServerError,
    TerminalError,
    TooManyRequests,
    Unauthorized,
    api_error,
)
from ._events import EVENTS, EventRecorder, EventSink
from ._http import parse_bind_address
from ._informer import EventHandler, Informer, Transform, drop_managed_fields
from ._kubeconfig import new_api_client, pod_namespace
from ._leader import LEASES, LeaderElection, LeaderElector, default_identity
from ._log import LOG_CONTEXT, ContextFilter, JSONFormatter, configure_logging
from ._manager import Manager, Runnable
from ._metrics import METRICS_REGISTRY, QueueMetricsProvider
from ._objects import FrozenDict, freeze, object_key, thaw
from ._ownership import set_controller_reference
from ._predicates import (
    Event,
    Predicate,
    annotations_changed,
    any_of,
    generation_changed,
    labels_changed,
    resource_version_changed,
)
from ._ratelimiter import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_controller_rate_limiter,
)
from ._ratelimiting import WorkQueue
from ._reconcile import Request, Result
from ._resources import Resource
from ._status import StatusWriter, set_condition
from ._store import NAMESPACE_INDEX, IndexFunc, Store
from ._timestamps import kube_micro_time, kube_time

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT",
    "EVENTS",
    "LEASES",
    "LOG_CONTEXT",
    "METADATA_ONLY",
    "METRICS_REGISTRY",
    "NAMESPACE_INDEX",
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "BucketRateLimiter",
    "Cache",
    "CacheNotStarted",
    "CannotListen",
    "Client",
    "Clock",
    "Conflict",
    "ContextFilter",
    "Controller",
    "ControllerOptions",
    "Event",
    "EventHandler",
    "EventRecorder",
    "EventSink",
    "Forbidden",
    "FrozenDict",
    "Gone",
    "GpuctrlError",
    "IndexFunc",
    "Informer",
    "Invalid",
    "ItemExponentialFailureRateLimiter",
    "JSONFormatter",
    "LeaderElection",
    "LeaderElectionLost",
    "LeaderElector",
    "Manager",
    "Mapper",
    "MaxOfRateLimiter",
    "NotFound",
    "Owns",
    "Predicate",
    "QueueMetricsProvider",
    "QueueShutDown",
    "RateLimiter",
    "Reconciler",
    "Request",
    "Resource",
    "Result",
    "Runnable",
    "ServerError",
    "StatusWriter",
    "Store",
    "SystemClock",
    "TerminalError",
    "TimerHandle",
    "TooManyRequests",
    "Transform",
    "Unauthorized",
    "Watch",
    "WorkQueue",
    "annotations_changed",
    "any_of",
    "api_error",
    "build_controller",
    "configure_logging",
    "default_controller_rate_limiter",
    "default_identity",
    "drop_managed_fields",
    "freeze",
    "generation_changed",
    "kube_micro_time",
    "kube_time",
    "labels_changed",
    "new_api_client",
    "object_key",
    "parse_bind_address",
    "pod_namespace",
    "request_for_object",
    "requests_for_owner",
    "resource_version_changed",
    "retry_on_conflict",
    "set_condition",
    "set_controller_reference",
    "thaw",
]
