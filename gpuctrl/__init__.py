"""gpuctrl: an asyncio controller runtime for Kubernetes and a GPU operator built on it.

The framework lives in :mod:`gpuctrl.runtime` and :mod:`gpuctrl.testing`; the node agents
in :mod:`gpuctrl.toolkit` and :mod:`gpuctrl.validator`; the command line in :mod:`gpuctrl.cli`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gpuctrl")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["__version__"]
