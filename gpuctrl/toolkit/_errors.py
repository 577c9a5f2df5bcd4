"""The toolkit agent's errors.

::

    ToolkitError            anything that stops install / cleanup (exit code 1)
    └── InvalidConfig       input gpuctrl cannot edit safely; nothing was written (exit code 2)
"""

from __future__ import annotations

__all__ = ["InvalidConfig", "ToolkitError"]


class ToolkitError(Exception):
    """Install, cleanup or the runtime restart failed; the message says what and where."""


class InvalidConfig(ToolkitError):
    """A configuration file that gpuctrl refuses to edit; raised before anything is written.

    The message names the file (when known) and the line or key that is the problem.
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def with_path(self, path: str) -> InvalidConfig:
        """The same error, naming ``path`` as the file it is about."""
        return InvalidConfig(self.message, path)

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message
