"""gpuctrl.runtime's curated public API: a sorted ``__all__`` whose names all resolve."""

import re

import gpuctrl.runtime
import gpuctrl.testing


def ruff_all_order(name: str) -> tuple[int, str]:
    """ruff RUF022's "isort-style" order: SCREAMING_CASE, then CamelCase, then the rest."""
    if re.fullmatch(r"[A-Z0-9_]+", name) and len(name) > 1:
        return (0, name)
    return (1 if name[:1].isupper() else 2, name)


def test_all_is_sorted_and_unique() -> None:
    names = gpuctrl.runtime.__all__
    assert names == sorted(names, key=ruff_all_order)
    assert len(set(names)) == len(names)


def test_every_public_name_resolves() -> None:
    missing = [name for name in gpuctrl.runtime.__all__ if not hasattr(gpuctrl.runtime, name)]
    assert missing == []


def test_fake_clock_is_exported_from_gpuctrl_testing() -> None:
    assert "FakeClock" in gpuctrl.testing.__all__
    assert gpuctrl.testing.FakeClock.__module__ == "gpuctrl.testing._clock"
