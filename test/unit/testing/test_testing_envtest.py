"""gpuctrl.testing.envtest: which release, which Go, and what a failed build leaves (nothing)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from gpuctrl.testing import envtest
from gpuctrl.testing.envtest import BuildError, ensure_binaries, kubernetes_version

# The page that states the release the suite runs, and where its binaries are built.
DEVELOPMENT = Path(__file__).resolve().parents[3] / "docs" / "development.md"


def test_the_development_guide_names_the_release_and_etcd_the_suite_runs() -> None:
    """docs/development.md states the Kubernetes release, the etcd and the cache folder that
    `envtest` builds and the suite runs."""
    text = DEVELOPMENT.read_text()
    assert f"Kubernetes **{envtest.KUBERNETES_VERSION}**" in text
    assert f"etcd {envtest.ETCD_VERSION}" in text
    assert f"envtest/{envtest.KUBERNETES_VERSION}/" in text


@pytest.mark.parametrize(
    ("configured", "expected"),
    [("", envtest.KUBERNETES_VERSION), ("1.35.4", "1.35.4"), ("v1.36.1", "1.36.1")],
    ids=["default", "plain", "leading-v"],
)
def test_release_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, configured: str, expected: str
) -> None:
    monkeypatch.setenv(envtest.VERSION_ENV, configured)
    assert kubernetes_version() == expected
    monkeypatch.delenv(envtest.ASSETS_ENV, raising=False)
    assert envtest.assets_dir().parts[-3:] == ("gpuctrl", "envtest", expected)


@pytest.mark.parametrize("release", ["1.20.2", "1.28.9", "latest", "1.34", "2.0.0"])
def test_a_release_we_cannot_build_is_one_line_naming_it(tmp_path: Path, release: str) -> None:
    with pytest.raises(BuildError) as error:
        ensure_binaries(release, folder=tmp_path / release)
    message = str(error.value)
    assert "\n" not in message
    assert repr(release) in message
    assert f">= {envtest.OLDEST_MINOR}" in message
    assert not (tmp_path / release).exists()


def test_an_old_go_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    old = tmp_path / "go"
    old.write_text("#!/bin/sh\necho go1.19.8\n")
    old.chmod(0o755)
    monkeypatch.setenv(envtest.GO_ENV, str(old))
    with pytest.raises(BuildError, match=rf"no Go 1\.26\+ found \(tried: {re.escape(str(old))} "):
        ensure_binaries("1.34.4", folder=tmp_path / "assets")
    assert not (tmp_path / "assets").exists()


def test_a_failed_build_says_the_step_in_one_line_and_leaves_no_folder(tmp_path: Path) -> None:
    """A release the module proxy does not serve fails in the first go step, for real; the
    scratch folder a killed build of the same release left is removed too."""
    folder = tmp_path / "envtest" / "1.34.999"
    (folder.parent / ".1.34.999-killed" / "kubernetes").mkdir(parents=True)
    out = io.StringIO()
    with pytest.raises(BuildError) as error:
        ensure_binaries("1.34.999", folder=folder, out=out)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("envtest: finding the k8s.io/kubernetes module failed")
    assert "1.34.999" in message
    assert out.getvalue().startswith("envtest: building Kubernetes v1.34.999 ")
    assert sorted(p.name for p in folder.parent.iterdir()) == [
        ".1.34.999.lock",
        "1.34.999-build-failed.log",
    ]


def test_present_binaries_are_reused_without_go(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in envtest.BINARIES:
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv(envtest.GO_ENV, str(tmp_path / "no-such-go"))
    out = io.StringIO()
    assert ensure_binaries("1.34.4", folder=tmp_path, out=out) == tmp_path
    assert out.getvalue() == ""
