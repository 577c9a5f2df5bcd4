"""Cleanup takes out install's changes and nothing else: a third party's comment above the
table after the nvidia blocks stays, folders install created go, extended attributes of the
config survive every write, and a full disk is named."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpuctrl.toolkit import Settings, Target, ToolkitError, cleanup, install

CRI = 'plugins."io.containerd.grpc.v1.cri"'
CONFIG = (
    f'version = 2\n\n[{CRI}.containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'
    f'\n[{CRI}.cni]\n  bin_dir = "/opt/cni/bin"\n'
)
SETTINGS = Settings("/usr/local/nvidia/toolkit", set_as_default=True)


@pytest.mark.parametrize("blank", ["", "\n"], ids=["right-above", "set-off"])
def test_a_comment_above_the_next_table_stays(blank: str, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    target = Target("containerd", str(config), str(tmp_path / "s"))
    install(target, SETTINGS)
    comment = f"# {blank and 'set off: '}the CNI settings below\n{blank}"
    edited = config.read_text().replace(f"[{CRI}.cni]", f"{comment}[{CRI}.cni]")
    config.write_text(edited)
    cleanup(target)
    assert config.read_text() == CONFIG.replace(f"[{CRI}.cni]", f"{comment}[{CRI}.cni]")


def test_folders_install_created_are_removed(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    drop_in = tmp_path / "a" / "b" / "99-nvidia.toml"
    target = Target("containerd", str(config), str(tmp_path / "state"), str(drop_in))
    install(target, SETTINGS)
    assert drop_in.exists()
    cleanup(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]
    assert config.read_text() == CONFIG


def test_extended_attributes_are_kept(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    try:
        os.setxattr(config, "user.gpuctrl-test", b"label")
    except OSError as err:
        pytest.skip(f"no user extended attributes on {tmp_path}: {err}")
    target = Target("containerd", str(config), str(tmp_path / "s"))
    install(target, SETTINGS)
    assert os.getxattr(config, "user.gpuctrl-test") == b"label"
    config.write_text("# edited\n" + config.read_text())  # cleanup edits rather than restores
    os.setxattr(config, "user.gpuctrl-test", b"label")
    cleanup(target)
    assert os.getxattr(config, "user.gpuctrl-test") == b"label"


def test_a_full_disk_is_named(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        config = disk / "config.toml"
        config.write_text(CONFIG + "# " + "x" * 3000 + "\n")
        (disk / "filler").write_bytes(b"x" * 4096)
        target = Target("containerd", str(config), str(tmp_path / "s"))
        before = config.read_bytes()
        with pytest.raises(ToolkitError, match=f"{config}: cannot write: No space left"):
            install(target, SETTINGS)
        assert config.read_bytes() == before
        assert sorted(p.name for p in disk.iterdir()) == ["config.toml", "filler"]
    finally:
        subprocess.run(["umount", str(disk)], check=True)
