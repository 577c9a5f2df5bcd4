"""Bad settings are refused before anything is read or written, the copy source is runc-based
only, and a config without runtimes gets containerd 1.x's built-in runc spelled out."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from gpuctrl.cli import main
from gpuctrl.toolkit import InvalidConfig, Settings, Target, add_runtimes, install
from gpuctrl.toolkit._containerd import DEFAULT_RUNC

CRI = 'plugins."io.containerd.grpc.v1.cri"'


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--runtime-name", "runc"], "containerd's own runtime"),
        (["--runtime-name", ""], "is not a runtime name"),
        (["--runtime-name", "Gpu.Nvidia"], "is not a runtime name"),
        (["--runtime-name", "nvidia-cdi"], "another NVIDIA runtime"),
        (["--runtime-dir", "usr/local/nvidia"], "is not an absolute path"),
    ],
    ids=["runc", "empty", "not-a-label", "variant", "relative-dir"],
)
def test_bad_settings_exit_2(
    options: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_bytes(b"version = 2\n")
    argv = ["toolkit", "install", "--config", str(config), "--state-dir", str(tmp_path / "s")]
    assert main([*argv, "--runtime-dir", "/rt", *options]) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]


def test_a_name_taken_by_the_users_runtime_is_refused(tmp_path: Path) -> None:
    text = (
        f'version = 2\n[{CRI}.containerd.runtimes.gpu]\n  runtime_type = "io.containerd.runc.v2"\n'
    )
    with pytest.raises(InvalidConfig, match="'gpu' is taken"):
        add_runtimes(text, Settings("/rt", runtime_name="gpu"))


@pytest.mark.parametrize("kind", ["io.containerd.runsc.v1", "io.containerd.kata.v2"])
@pytest.mark.parametrize("runc", [True, False], ids=["with-runc", "no-runc"])
def test_a_default_that_is_not_runc_based_is_never_copied(kind: str, runc: bool) -> None:
    text = f'version = 2\n[{CRI}.containerd]\n  default_runtime_name = "sandbox"\n'
    text += f'[{CRI}.containerd.runtimes.sandbox]\n  runtime_type = "{kind}"\n'
    if runc:
        text += f'[{CRI}.containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'
        text += f"[{CRI}.containerd.runtimes.runc.options]\n  SystemdCgroup = true\n"
    edit = add_runtimes(text, Settings("/rt"))
    nvidia = tomllib.loads(edit.text)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    nvidia = nvidia["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    if runc:
        assert nvidia["options"] == {
            "SystemdCgroup": True,
            "BinaryName": "/rt/nvidia-container-runtime",
        }
        assert "a copy of 'runc' instead" in edit.notes[0]
    else:
        assert nvidia == {
            **DEFAULT_RUNC,
            "options": {**DEFAULT_RUNC["options"], "BinaryName": "/rt/nvidia-container-runtime"},
        }
        assert "a clean io.containerd.runc.v2 runtime" in edit.notes[0]
    assert kind in edit.notes[0]


def test_the_note_is_reported(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        f'version = 2\n[{CRI}.containerd]\n  default_runtime_name = "kata"\n'
        f'[{CRI}.containerd.runtimes.kata]\n  runtime_type = "io.containerd.kata.v2"\n'
    )
    report = install(Target("containerd", str(config), str(tmp_path / "s")), Settings("/rt"))
    assert any("not runc-based" in line for line in report.lines)


@pytest.mark.parametrize(
    "text", ["", "version = 2\n", "# nothing\n"], ids=["empty", "v2", "comment"]
)
def test_no_runtimes_gets_the_builtin_runc(text: str) -> None:
    """containerd 1.x drops its built-in runc once a file defines any runtime: install writes
    it with containerd's default options (as `containerd config default` prints them)."""
    data = tomllib.loads(add_runtimes(text, Settings("/rt")).text)
    runtimes = data["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    assert runtimes["runc"] == DEFAULT_RUNC
