"""pytest fixtures for code built on gpuctrl (registered through the ``pytest11`` entry point)."""
