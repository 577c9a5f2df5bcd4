"""Every package's curated public API: a sorted, unique ``__all__`` that is the whole surface."""

from __future__ import annotations

import importlib
import re
from types import ModuleType

import pytest

PACKAGES = (
    "api.v1alpha1",
    "controllers.render",
    "gpuctrl.runtime",
    "gpuctrl.runtime.webhook",
    "gpuctrl.testing",
    "gpuctrl.toolkit",
    "gpuctrl.validator",
    "webhooks",
)


def ruff_all_order(name: str) -> tuple[int, str]:
    """ruff RUF022's "isort-style" order: SCREAMING_CASE, then CamelCase, then the rest."""
    if re.fullmatch(r"[A-Z0-9_]+", name) and len(name) > 1:
        return (0, name)
    return (1 if name[:1].isupper() else 2, name)


@pytest.fixture(params=PACKAGES)
def package(request: pytest.FixtureRequest) -> ModuleType:
    return importlib.import_module(request.param)


def test_all_is_sorted_and_unique(package: ModuleType) -> None:
    names = list(package.__all__)
    assert names == sorted(names, key=ruff_all_order)
    assert len(set(names)) == len(names)


def test_every_public_name_resolves(package: ModuleType) -> None:
    assert [name for name in package.__all__ if getattr(package, name, None) is None] == []


def test_nothing_public_is_left_out_of_all(package: ModuleType) -> None:
    # Submodules are reachable as attributes but are not part of the curated surface.
    public = {
        name
        for name, value in vars(package).items()
        if name.isidentifier() and not name.startswith("_") and not isinstance(value, ModuleType)
    }
    assert public - set(package.__all__) == set()
