"""``gpuctrl toolkit``: plan, install, cleanup and run, as the command line."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from toolkit_agent import running_agent
from toolkit_agent import stop as stop_agent

from gpuctrl.cli import main

DATA = Path(__file__).resolve().parents[2] / "data" / "toolkit" / "containerd"
INSTALLER = (DATA / "installer-systemd-cgroup.toml").read_bytes()


def _argv(action: str, tmp_path: Path, *extra: str) -> list[str]:
    common = ["--config", str(tmp_path / "config.toml"), "--state-dir", str(tmp_path / "state")]
    if action != "cleanup":
        common += ["--runtime-dir", "/usr/local/nvidia/toolkit", "--set-as-default"]
    return ["toolkit", action, *common, *extra]


def test_plan_prints_the_diff_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.toml").write_bytes(INSTALLER)
    assert main(_argv("plan", tmp_path)) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"--- {tmp_path / 'config.toml'}\n+++ ")
    assert '-      default_runtime_name = "runc"\n+      default_runtime_name = "nvidia"\n' in out
    assert '+        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia-cdi]\n' in out
    assert (tmp_path / "config.toml").read_bytes() == INSTALLER
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]


def test_install_reports_and_cleanup_restores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.toml").write_bytes(INSTALLER)
    assert main(_argv("install", tmp_path, "--runtime-name", "gpu")) == 0
    out = capsys.readouterr().out
    assert "added [plugins.io.containerd.grpc.v1.cri" not in out
    assert 'added [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpu]' in out
    assert (
        "set plugins.\"io.containerd.grpc.v1.cri\".containerd.default_runtime_name = 'gpu'" in out
    )
    assert "(was 'runc')" in out
    assert main(_argv("plan", tmp_path, "--runtime-name", "gpu")) == 0
    assert capsys.readouterr().out == ""
    assert main(_argv("cleanup", tmp_path)) == 0
    assert "restored the original" in capsys.readouterr().out
    assert (tmp_path / "config.toml").read_bytes() == INSTALLER
    assert main(_argv("cleanup", tmp_path)) == 0
    assert "nothing to clean up" in capsys.readouterr().out


def test_second_install_after_someone_edited_keeps_the_first_original(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_bytes(INSTALLER)
    assert main(_argv("install", tmp_path)) == 0
    config.write_bytes(config.read_bytes() + b'\n[plugins."io.containerd.other"]\n  on = true\n')
    assert main(_argv("install", tmp_path, "--runtime-dir", "/opt/nvidia")) == 0
    assert b'"/opt/nvidia/nvidia-container-runtime.cdi"' in config.read_bytes()
    assert main(_argv("cleanup", tmp_path)) == 0
    assert config.read_bytes() == INSTALLER + b'\n[plugins."io.containerd.other"]\n  on = true\n'


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT])
def test_run_cleans_up_on_each_stop_signal(stop: signal.Signals, tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_bytes(INSTALLER)
    with running_agent(_argv("run", tmp_path)) as agent:
        assert b"nvidia-container-runtime.legacy" in (tmp_path / "config.toml").read_bytes()
        out = stop_agent(agent, stop)
    assert agent.returncode == 0, out
    assert "restored the original" in out
    assert (tmp_path / "config.toml").read_bytes() == INSTALLER


def test_the_ready_file_exists_only_while_installed_and_waiting(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_bytes(INSTALLER)
    ready = tmp_path / "run" / "gpuctrl" / "toolkit-ready"
    with running_agent(_argv("run", tmp_path, "--ready-file", str(ready))) as agent:
        assert ready.read_text() == "installed\n"
        out = stop_agent(agent)
    assert agent.returncode == 0, out
    assert not ready.exists()
    # An install that fails leaves no ready file behind, also a stale one.
    ready.write_text("stale\n")
    (tmp_path / "config.toml").write_text("not [toml")
    assert main(_argv("run", tmp_path, "--ready-file", str(ready))) == 2
    assert not ready.exists()


def test_drop_in_already_covered_by_a_glob_leaves_the_main_file_alone(tmp_path: Path) -> None:
    config, drop_in = tmp_path / "config.toml", tmp_path / "conf.d" / "99-nvidia.toml"
    glob = f'imports = ["{tmp_path}/conf.d/*.toml"]\n'.encode()
    original = INSTALLER.replace(b"version = 2\n", b"version = 2\n" + glob)
    config.write_bytes(original)
    assert main(_argv("install", tmp_path, "--drop-in", str(drop_in))) == 0
    assert config.read_bytes() == original
    assert b"nvidia-container-runtime.legacy" in drop_in.read_bytes()
    assert main(_argv("cleanup", tmp_path)) == 0
    assert config.read_bytes() == original
    assert not drop_in.exists()


def test_a_relative_glob_does_not_count_as_importing_the_drop_in(tmp_path: Path) -> None:
    """containerd 1.6 expands a relative glob against its working directory, not the config's
    folder: install imports the drop-in by its absolute path as well."""
    config, drop_in = tmp_path / "config.toml", tmp_path / "conf.d" / "99-nvidia.toml"
    original = INSTALLER.replace(b"version = 2\n", b'version = 2\nimports = ["conf.d/*.toml"]\n')
    config.write_bytes(original)
    assert main(_argv("install", tmp_path, "--drop-in", str(drop_in))) == 0
    assert f'imports = ["conf.d/*.toml", "{drop_in}"]'.encode() in config.read_bytes()
    assert main(_argv("cleanup", tmp_path)) == 0
    assert config.read_bytes() == original


def test_drop_in_cleanup_keeps_edits_to_the_main_file(tmp_path: Path) -> None:
    config, drop_in = tmp_path / "config.toml", tmp_path / "conf.d" / "99-nvidia.toml"
    original = (DATA / "containerd-1.7-default.toml").read_bytes()
    config.write_bytes(original)
    assert main(_argv("install", tmp_path, "--drop-in", str(drop_in))) == 0
    assert f'imports = ["{drop_in}"]'.encode() in config.read_bytes()
    config.write_bytes(b"# ops was here\n" + config.read_bytes())
    assert main(_argv("cleanup", tmp_path)) == 0
    assert config.read_bytes() == b"# ops was here\n" + original
    assert not drop_in.exists()


def test_install_with_other_files_than_the_journal_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, drop_in = tmp_path / "config.toml", tmp_path / "conf.d" / "99-nvidia.toml"
    config.write_bytes(INSTALLER)
    assert main(_argv("install", tmp_path, "--drop-in", str(drop_in))) == 0
    installed = config.read_bytes()
    assert main(_argv("install", tmp_path)) == 2
    assert f"also manages {drop_in}" in capsys.readouterr().err
    assert config.read_bytes() == installed
    assert drop_in.exists()
