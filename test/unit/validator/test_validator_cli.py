"""The validate command's input errors (exit 2, before any API call) and status files."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctrl.cli import main
from gpuctrl.validator import clear_status, status_path, write_status


def _cuda(tmp_path: Path, *extra: str) -> int:
    return main(
        ["validate", "cuda", "--node", "n1", "--namespace", "gpu-operator",
         "--kubeconfig", str(tmp_path / "kubeconfig"), "--output-dir", str(tmp_path), *extra]
    )  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "complaint"),
    [
        pytest.param("labels: [a, b]\n", "labels", id="wrong-type"),
        pytest.param("lables: {a: b}\n", "lables", id="unknown-key"),
        pytest.param("labels: {a: b\n", "overrides file", id="not-yaml"),
        pytest.param("timeoutSeconds: 0\n", "timeoutSeconds", id="out-of-range"),
        pytest.param("labels: {bad key: x}\n", "labels[bad key]: 'bad key'", id="label-key"),
        pytest.param("labels: {team: a b}\n", "labels[team]: 'a b'", id="label-value"),
    ],
)
def test_bad_overrides_file_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], overrides: str, complaint: str
) -> None:
    path = tmp_path / "overrides.yaml"
    path.write_text(overrides)

    assert _cuda(tmp_path, "--overrides-file", str(path)) == 2

    err = capsys.readouterr().err
    assert str(path) in err
    assert complaint in err


@pytest.mark.parametrize(
    ("overrides", "complaint"),
    [
        pytest.param('{"labels": ["a"]}', "labels", id="wrong-type"),
        pytest.param('{"labels": {"a": "b"}', "--overrides", id="not-json"),
        pytest.param('{"labels": {"a/b/c": "x"}}', "labels[a/b/c]", id="label-key"),
    ],
)
def test_bad_overrides_text_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], overrides: str, complaint: str
) -> None:
    assert _cuda(tmp_path, "--overrides", overrides) == 2

    err = capsys.readouterr().err
    assert err.startswith("gpuctrl validate cuda: --overrides: ")
    assert complaint in err
    assert "ConfigMap" not in err


def test_missing_overrides_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cuda(tmp_path, "--overrides-file", str(tmp_path / "absent.yaml")) == 2
    assert "absent.yaml" in capsys.readouterr().err


def test_half_a_downward_api_identity_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUCTRL_POD_NAME", "validator-abcde")
    monkeypatch.delenv("GPUCTRL_POD_UID", raising=False)

    assert _cuda(tmp_path) == 2
    assert "GPUCTRL_POD_UID is not set" in capsys.readouterr().err


def test_unreadable_kubeconfig_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "kubeconfig").write_text("this: is not a kubeconfig\n")

    assert _cuda(tmp_path) == 2
    assert "kubeconfig" in capsys.readouterr().err


def test_status_file_is_replaced_whole_and_cleared(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b"
    clear_status(out, "cuda")  # nothing there yet: fine

    write_status(out, "cuda", "first\n")
    write_status(out, "cuda", "second\n")

    assert status_path(out, "cuda").read_text() == "second\n"
    assert [p.name for p in out.iterdir()] == ["cuda-ready"]
    clear_status(out, "cuda")
    assert list(out.iterdir()) == []
