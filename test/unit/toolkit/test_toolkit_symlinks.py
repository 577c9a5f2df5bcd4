"""A config path that is a symbolic link, under --host-root: followed as the host follows it (an
absolute target is a host path), the target edited and restored, the link kept; a link that
leads outside the host root is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuctrl.cli import main

DATA = Path(__file__).resolve().parents[2] / "data" / "toolkit" / "containerd"
ORIGINAL = (DATA / "kind.toml").read_bytes()


def _toolkit(action: str, root: Path, *extra: str) -> int:
    argv = ["toolkit", action, "--host-root", str(root), "--distribution", "containerd"]
    argv += ["--config", "/etc/containerd/config.toml", "--state-dir", "/var/lib/gpuctrl"]
    argv += ["--restart-mode", "none"]
    if action != "cleanup":
        argv += ["--runtime-dir", "/usr/local/nvidia/toolkit"]
    return main([*argv, *extra])


@pytest.mark.parametrize(
    "target", ["/opt/cfg/containerd.toml", "../../opt/cfg/containerd.toml"], ids=["abs", "rel"]
)
@pytest.mark.parametrize("drop_in", [[], ["--drop-in-mode", "always"]], ids=["in-place", "drop"])
def test_link_is_followed_under_the_host_root_and_kept(
    target: str, drop_in: list[str], tmp_path: Path
) -> None:
    real = tmp_path / "opt" / "cfg" / "containerd.toml"
    real.parent.mkdir(parents=True)
    real.write_bytes(ORIGINAL)
    link = tmp_path / "etc" / "containerd" / "config.toml"
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    assert _toolkit("install", tmp_path, *drop_in) == 0
    assert link.is_symlink()
    assert os.readlink(link) == target
    assert real.read_bytes() != ORIGINAL
    assert _toolkit("cleanup", tmp_path) == 0
    assert os.readlink(link) == target
    assert real.read_bytes() == ORIGINAL
    assert not (tmp_path / "etc" / "containerd" / "conf.d").exists()


def test_link_outside_the_host_root_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "host"
    outside = tmp_path / "outside.toml"
    outside.write_bytes(ORIGINAL)
    link = root / "etc" / "containerd" / "config.toml"
    link.parent.mkdir(parents=True)
    link.symlink_to("../../../outside.toml")
    assert _toolkit("install", root) == 2
    assert "leads outside" in capsys.readouterr().err
    assert outside.read_bytes() == ORIGINAL
    assert os.readlink(link) == "../../../outside.toml"
