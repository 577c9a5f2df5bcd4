"""``--restart-mode systemd``: the unit restarted is the one the node's distribution installed.

k3s and RKE2 run containerd inside their server or agent unit, microk8s as its own snap
service: there is no ``containerd`` unit to restart. Each test writes the unit files a
distribution's installer writes under a temp folder standing for the host's root; the restart
then fails there (no systemd in the temp root) with a message naming the command it ran.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctrl.cli import main
from gpuctrl.toolkit._errors import InvalidConfig
from gpuctrl.toolkit._restart import (
    choose_unit,
    installed_units,
    systemd_command,
    unit_candidates,
)

RUNTIME_DIR = "/usr/local/nvidia/toolkit"
CONFIG = 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  snapshotter = "x"\n'
CONFIGS = {
    "containerd": "/etc/containerd/config.toml",
    "k3s": "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl",
    "rke2": "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl",
    "microk8s": "/var/snap/microk8s/current/args/containerd-template.toml",
}


def _host(root: Path, *files: str) -> None:
    for path in files:
        (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / path.lstrip("/")).write_text("[Unit]\n")


def _install(root: Path, distribution: str, *extra: str) -> int:
    config = root / CONFIGS[distribution].lstrip("/")
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(CONFIG)
    argv = ["toolkit", "install", "--host-root", str(root), "--runtime-dir", RUNTIME_DIR]
    argv += ["--state-dir", "/var/lib/gpuctrl/toolkit", "--restart-mode", "systemd"]
    return main([*argv, *extra])


@pytest.mark.parametrize(
    ("distribution", "unit_files", "unit"),
    [
        ("k3s", ["/etc/systemd/system/k3s.service"], "k3s"),
        ("k3s", ["/etc/systemd/system/k3s-agent.service"], "k3s-agent"),
        ("rke2", ["/usr/local/lib/systemd/system/rke2-server.service"], "rke2-server"),
        ("rke2", ["/usr/lib/systemd/system/rke2-agent.service"], "rke2-agent"),
        (
            "microk8s",
            ["/etc/systemd/system/snap.microk8s.daemon-containerd.service"],
            "snap.microk8s.daemon-containerd",
        ),
        ("containerd", ["/lib/systemd/system/containerd.service"], "containerd"),
    ],
    ids=["k3s-server", "k3s-agent", "rke2-server", "rke2-agent", "microk8s", "containerd"],
)
def test_restarts_the_distributions_installed_unit(
    distribution: str,
    unit_files: list[str],
    unit: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _host(tmp_path, *unit_files)
    assert _install(tmp_path, distribution, "--distribution", distribution) == 1
    assert f"chroot {tmp_path} systemctl restart {unit} failed" in capsys.readouterr().err


def test_restart_unit_option_wins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _host(tmp_path, "/etc/systemd/system/k3s.service")
    assert _install(tmp_path, "k3s", "--restart-unit", "my-k3s") == 1
    assert f"chroot {tmp_path} systemctl restart my-k3s failed" in capsys.readouterr().err


def test_no_installed_unit_is_invalid_input_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _host(tmp_path, "/etc/systemd/system/containerd.service")  # not k3s's
    assert _install(tmp_path, "k3s") == 2
    err = capsys.readouterr().err
    assert "no systemd unit k3s or k3s-agent is installed" in err
    assert "--restart-unit" in err
    assert (tmp_path / CONFIGS["k3s"].lstrip("/")).read_text() == CONFIG
    assert not (tmp_path / "var/lib/gpuctrl").exists()


def test_restart_unit_without_systemd_mode_is_invalid_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    argv = ["toolkit", "install", "--config", str(config), "--runtime-dir", RUNTIME_DIR]
    argv += ["--state-dir", str(tmp_path / "state"), "--restart-unit", "k3s"]
    assert main(argv) == 2
    assert "--restart-unit needs --restart-mode systemd" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("installed", "unit"),
    [(["k3s", "k3s-agent"], "k3s"), (["k3s-agent"], "k3s-agent"), (["k3s-agent", "k3s"], "k3s")],
)
def test_choose_unit_prefers_the_first_candidate_installed(installed: list[str], unit: str) -> None:
    assert choose_unit(unit_candidates("k3s"), installed) == unit


def test_choose_unit_with_none_installed_names_the_candidates() -> None:
    with pytest.raises(InvalidConfig, match="rke2-server or rke2-agent"):
        choose_unit(unit_candidates("rke2"), ["containerd"])


def test_installed_units_looks_in_each_unit_folder(tmp_path: Path) -> None:
    _host(tmp_path, "/run/systemd/system/k3s-agent.service")
    assert installed_units(str(tmp_path), unit_candidates("k3s")) == ["k3s-agent"]
    assert installed_units(str(tmp_path), unit_candidates("rke2")) == []


@pytest.mark.parametrize(
    ("unit", "host_root", "command"),
    [
        ("k3s-agent", "/", ["systemctl", "restart", "k3s-agent"]),
        ("rke2-server", "/host", ["chroot", "/host", "systemctl", "restart", "rke2-server"]),
    ],
)
def test_systemd_command_runs_in_the_host_root(
    unit: str, host_root: str, command: list[str]
) -> None:
    assert systemd_command(unit, host_root) == command
