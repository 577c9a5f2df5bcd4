"""Project-wide test policy and shared fixtures.

A run in which no test passed is a failed run: pytest already exits 5 when it collects nothing;
this also fails a run whose every test was skipped, so CI can never go green without executing
a test. Every test under test/integration and test/e2e is marked `controlplane` by its
directory, so ``-m "not controlplane"`` selects the unit tier.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

# gpuctrl.testing's fixtures (control_plane, kube_api, namespace, gpu_nodes): opt-in, as for
# any project built on gpuctrl.
pytest_plugins = ["gpuctrl.testing.pytest_plugin"]

# Hypothesis: under CI (CI set) derandomized, so every CI run tries the same examples; local
# runs keep exploring new ones (and replay failures from the example database).
hypothesis_settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
hypothesis_settings.register_profile("dev")
hypothesis_settings.load_profile("ci" if os.environ.get("CI") else "dev")


class RequireAPass:
    """Counts passed tests; turns a successful session with none into exit code 5."""

    def __init__(self) -> None:
        self.passed = 0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and report.passed:
            self.passed += 1

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if exitstatus == pytest.ExitCode.OK and self.passed == 0:
            session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(RequireAPass(), "require-a-pass")


_CONTROL_PLANE_TIERS = tuple(Path(__file__).parent / tier for tier in ("integration", "e2e"))


# tryfirst: the marks must be on before `-m` deselects (pytest's own hook of this name).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks every test under test/integration and test/e2e `controlplane`."""
    for item in items:
        if any(item.path.is_relative_to(tier) for tier in _CONTROL_PLANE_TIERS):
            item.add_marker(pytest.mark.controlplane)


ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def doc_example() -> Callable[[str, str], dict[str, Any]]:
    """Execute the first Python block under a heading of a Markdown file of the repository
    (``doc_example("docs/runtime.md", "## A complete controller")``); return the block's
    globals. The block's source text is in them under ``__source__``."""

    def run(path: str, heading: str) -> dict[str, Any]:
        doc = ROOT / path
        section = doc.read_text().split(f"\n{heading}\n", 1)[1]
        match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
        assert match, f"no python block under {heading!r} in {path}"
        namespace: dict[str, Any] = {"__name__": "doc_example", "__source__": match.group(1)}
        exec(compile(match.group(1), str(doc), "exec"), namespace)
        return namespace

    return run
