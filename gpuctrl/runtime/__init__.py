"""gpuctrl.runtime: an asyncio controller runtime with client-go and controller-runtime semantics.

Work queues, shared informer caches, controllers with workers and backoff, a manager with
leader election, health and Prometheus metrics, and server-side apply helpers. It knows
nothing of GPUs.
"""

__all__: list[str] = []
