"""A node folder seeded as a GPU host: containerd's config, and an nvidia-smi that runs in a
chroot of the folder, as the validator's driver check runs it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuctrl.testing import NODE_CONTAINERD_CONFIG, seed_gpu_host


@pytest.mark.skipif(os.geteuid() != 0, reason="chroot needs root")
def test_nvidia_smi_runs_in_a_chroot_of_the_seeded_folder(tmp_path: Path) -> None:
    seed_gpu_host(tmp_path)
    assert (tmp_path / "etc/containerd/config.toml").read_text() == NODE_CONTAINERD_CONFIG
    done = subprocess.run(
        [shutil.which("chroot") or "chroot", str(tmp_path), "nvidia-smi"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.stdout.startswith("NVIDIA-SMI ")
    assert "Driver Version:" in done.stdout


def test_a_given_containerd_config_is_written(tmp_path: Path) -> None:
    seed_gpu_host(tmp_path, containerd_config="version = 3\n")
    assert (tmp_path / "etc/containerd/config.toml").read_text() == "version = 3\n"
