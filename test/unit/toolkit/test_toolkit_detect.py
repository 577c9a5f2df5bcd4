"""``gpuctrl toolkit --host-root``: the node's containerd layout detected under the host's root.

Each test builds a distribution's layout under a temp folder standing for the host's root, as
the agent's DaemonSet mounts it at /host. Host paths (config, drop-in, socket, state dir) are
opened under the root; what goes INTO the config (the runtimes' BinaryName, the drop-in's
import) is the host's path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctrl.cli import main
from gpuctrl.toolkit._detect import detect_distribution, resolve_containerd

RUNTIME_DIR = "/usr/local/nvidia/toolkit"
STATE_DIR = "/var/lib/gpuctrl/toolkit"
CONFIG = 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  snapshotter = "x"\n'

# distribution, a folder its installer creates, config, socket, restart mode (reference layouts)
LAYOUTS = [
    (
        "containerd",
        "/etc/containerd",
        "/etc/containerd/config.toml",
        "/run/containerd/containerd.sock",
        "signal",
    ),
    (
        "k3s",
        "/var/lib/rancher/k3s/agent/etc/containerd",
        "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl",
        "/run/k3s/containerd/containerd.sock",
        "systemd",
    ),
    (
        "rke2",
        "/var/lib/rancher/rke2/agent/etc/containerd",
        "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl",
        "/run/k3s/containerd/containerd.sock",
        "systemd",
    ),
    (
        "microk8s",
        "/var/snap/microk8s/current/args",
        "/var/snap/microk8s/current/args/containerd-template.toml",
        "/var/snap/microk8s/common/run/containerd.sock",
        "systemd",
    ),
]
IDS = [layout[0] for layout in LAYOUTS]
# The unit file each distribution's installer writes, for --restart-mode systemd.
UNIT_FILES = {
    "k3s": "/etc/systemd/system/k3s.service",
    "rke2": "/usr/local/lib/systemd/system/rke2-server.service",
    "microk8s": "/etc/systemd/system/snap.microk8s.daemon-containerd.service",
}


def _host(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def _node_with(root: Path, folder: str, config: str, text: str = CONFIG) -> Path:
    _host(root, folder).mkdir(parents=True, exist_ok=True)
    _host(root, config).write_text(text)
    return _host(root, config)


def _install(root: Path, *extra: str) -> int:
    argv = ["toolkit", "install", "--host-root", str(root), "--runtime-dir", RUNTIME_DIR]
    return main([*argv, "--state-dir", STATE_DIR, *extra])


@pytest.mark.parametrize(("distribution", "folder", "config", "socket", "mode"), LAYOUTS, ids=IDS)
def test_detects_each_distribution(
    distribution: str, folder: str, config: str, socket: str, mode: str, tmp_path: Path
) -> None:
    _node_with(tmp_path, folder, config)
    assert detect_distribution(str(tmp_path)) == distribution
    found = resolve_containerd(str(tmp_path), "nvidia")
    assert (found.config_path, found.socket_path, found.restart_mode) == (config, socket, mode)


@pytest.mark.parametrize(("distribution", "folder", "config", "socket", "mode"), LAYOUTS, ids=IDS)
def test_install_edits_the_detected_config_with_host_paths_and_restarts_as_detected(
    distribution: str,
    folder: str,
    config: str,
    socket: str,
    mode: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    edited = _node_with(tmp_path, folder, config)
    if mode == "systemd":
        unit_file = UNIT_FILES[distribution]
        _node_with(tmp_path, unit_file.rsplit("/", 1)[0], unit_file, "[Unit]\n")
    # Nothing serves the runtime in the temp root: the detected restart fails, naming how.
    assert _install(tmp_path) == 1
    err = capsys.readouterr().err
    if mode == "signal":
        assert f"cannot signal containerd through {tmp_path}{socket}" in err
    else:
        unit = UNIT_FILES[distribution].rsplit("/", 1)[1].removesuffix(".service")
        assert f"chroot {tmp_path} systemctl restart {unit} failed" in err
    text = edited.read_text()
    assert f'BinaryName = "{RUNTIME_DIR}/nvidia-container-runtime"' in text
    assert str(tmp_path) not in text
    assert (_host(tmp_path, STATE_DIR)).is_dir()
    assert main(["toolkit", "cleanup", "--host-root", str(tmp_path), "--state-dir", STATE_DIR,
                 "--restart-mode", "none"]) == 0  # fmt: skip
    assert edited.read_text() == CONFIG


def test_explicit_options_win_over_the_detected_layout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    detected = _node_with(tmp_path, *LAYOUTS[1][1:3])  # a k3s node
    custom = _node_with(tmp_path, "/etc/custom", "/etc/custom/config.toml")
    options = ["--config", "/etc/custom/config.toml", "--socket", "/run/custom.sock"]
    assert _install(tmp_path, *options, "--restart-mode", "signal") == 1
    assert f"cannot signal containerd through {tmp_path}/run/custom.sock" in capsys.readouterr().err
    assert "nvidia-container-runtime" in custom.read_text()
    assert detected.read_text() == CONFIG


def test_explicit_distribution_skips_detection(tmp_path: Path) -> None:
    _node_with(tmp_path, *LAYOUTS[1][1:3])  # a k3s node, told it is plain containerd
    plain = _node_with(tmp_path, *LAYOUTS[0][1:3])
    assert _install(tmp_path, "--distribution", "containerd", "--restart-mode", "none") == 0
    assert "nvidia-container-runtime" in plain.read_text()


def test_drop_in_mode_always_imports_the_drop_in_by_its_host_path(tmp_path: Path) -> None:
    config = _node_with(tmp_path, *LAYOUTS[0][1:3])
    assert _install(tmp_path, "--drop-in-mode", "always", "--restart-mode", "none") == 0
    drop_in = _host(tmp_path, "/etc/containerd/conf.d/99-nvidia.toml")
    assert f'"{RUNTIME_DIR}/nvidia-container-runtime"' in drop_in.read_text()
    assert 'imports = ["/etc/containerd/conf.d/99-nvidia.toml"]' in config.read_text()


@pytest.mark.parametrize(
    ("imports", "uses_drop_in"),
    [
        ('imports = ["/etc/containerd/conf.d/*.toml"]\n', True),
        ('imports = ["conf.d/*.toml"]\n', False),  # containerd 1.6 would not load it
        ("", False),
    ],
    ids=["config-imports-conf.d", "relative-glob", "no-imports"],
)
def test_drop_in_mode_auto_follows_the_configs_imports(
    imports: str, uses_drop_in: bool, tmp_path: Path
) -> None:
    original = CONFIG.replace("version = 2\n", f"version = 2\n{imports}")
    config = _node_with(tmp_path, *LAYOUTS[0][1:3], text=original)
    assert _install(tmp_path, "--restart-mode", "none") == 0
    drop_in = _host(tmp_path, "/etc/containerd/conf.d/99-nvidia.toml")
    assert drop_in.exists() == uses_drop_in
    assert (config.read_text() == original) == uses_drop_in


def test_relative_path_under_host_root_is_invalid_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _install(tmp_path, "--config", "etc/config.toml") == 2
    assert "config_path" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
