"""The driver and toolkit checks against a stand-in nvidia-smi, through the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from driver_root_kit import install_smi, minimal_root

from gpuctrl.cli import main
from gpuctrl.validator import driver_command, status_path
from gpuctrl.validator._smi import driver_ready_env

GOOD_SMI = "#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-1234)'\n"
BROKEN_SMI = (
    "#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA"
    ' driver."\nexit 9\n'
)


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder first on PATH, where a test puts its stand-in nvidia-smi."""
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")
    return directory


def test_toolkit_passes_and_writes_status(
    bin_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_smi(bin_dir, GOOD_SMI)
    out = tmp_path / "validations"

    code = main(["validate", "toolkit", "--output-dir", str(out)])

    assert code == 0
    assert status_path(out, "toolkit").read_text().startswith("ran: nvidia-smi\npassed\nGPU 0")
    assert capsys.readouterr().out == "toolkit validation passed\n"
    assert sorted(p.name for p in out.iterdir()) == ["toolkit-ready"], "no temporary file left"


def test_toolkit_failure_reports_command_and_output_and_removes_stale_status(
    bin_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_smi(bin_dir, BROKEN_SMI)
    out = tmp_path / "validations"
    out.mkdir()
    status_path(out, "toolkit").write_text("from an earlier run")

    code = main(["validate", "toolkit", "--output-dir", str(out)])

    assert code == 1
    assert not status_path(out, "toolkit").exists()
    err = capsys.readouterr().err
    assert "ran: nvidia-smi\nfailed\n" in err
    assert "couldn't communicate with the NVIDIA driver" in err
    assert "exit code 9" in err


def test_driver_without_nvidia_smi_fails_saying_not_found(
    bin_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["validate", "driver", "--host-root", "/", "--driver-root", str(tmp_path / "none"),
         "--output-dir", str(tmp_path)]
    )  # fmt: skip

    assert code == 1
    assert "nvidia-smi: not found" in capsys.readouterr().err


def test_driver_wait_retries_until_nvidia_smi_appears(bin_dir: Path, tmp_path: Path) -> None:
    appear = threading.Timer(0.6, install_smi, (bin_dir, GOOD_SMI))
    appear.start()
    try:
        code = main(
            ["validate", "driver", "--wait", "--retry-interval", "0.1", "--timeout", "20",
             "--host-root", "/", "--driver-root", str(tmp_path / "none"),
             "--output-dir", str(tmp_path)]
        )  # fmt: skip
    finally:
        appear.cancel()
        appear.join()

    assert code == 0
    assert status_path(tmp_path, "driver").exists()


def test_driver_wait_gives_up_at_the_timeout(
    bin_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_smi(bin_dir, BROKEN_SMI)

    code = main(
        ["validate", "driver", "--wait", "--retry-interval", "0.1", "--timeout", "0.5",
         "--host-root", "/", "--driver-root", str(tmp_path / "none"),
         "--output-dir", str(tmp_path)]
    )  # fmt: skip

    assert code == 1
    assert "exit code 9" in capsys.readouterr().err
    assert not status_path(tmp_path, "driver").exists()


def test_driver_command_prefers_an_installed_driver_container_root(tmp_path: Path) -> None:
    host, driver = tmp_path / "host", tmp_path / "driver"

    assert driver_command(host, driver) == ("chroot", str(host), "nvidia-smi")
    assert driver_command(Path("/"), driver) == ("nvidia-smi",)
    install_smi(driver / "usr" / "bin", GOOD_SMI)
    assert driver_command(host, driver) == ("chroot", str(driver), "nvidia-smi")


def test_a_driver_containers_root_counts_only_once_its_ready_mark_is_there(tmp_path: Path) -> None:
    host, driver, mark = tmp_path / "host", tmp_path / "driver", tmp_path / ".driver-ctr-ready"
    install_smi(driver / "usr" / "bin", GOOD_SMI)  # installed, but the module may not be loaded

    assert driver_command(host, driver, mark) == ("stat", str(mark))
    mark.write_text("GDS_ENABLED: false\n")
    assert driver_command(host, driver, mark) == ("chroot", str(driver), "nvidia-smi")
    mark.unlink()
    install_smi(host / "usr" / "bin", GOOD_SMI)  # a driver of the host's own needs no mark
    assert driver_command(host, driver, mark) == ("chroot", str(driver), "nvidia-smi")


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0, reason="chroot needs root"
)
def test_driver_runs_nvidia_smi_inside_the_host_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = tmp_path / "host"
    minimal_root(host, '#!/bin/sh\nread where < /where\necho "driver answers from $where"\n')
    (host / "where").write_text("the host root\n")

    code = main(
        ["validate", "driver", "--host-root", str(host), "--driver-root", str(tmp_path / "none"),
         "--output-dir", str(tmp_path / "out")]
    )  # fmt: skip

    out = capsys.readouterr()
    assert code == 0, out.err
    assert out.out.startswith(f"ran: chroot {host} nvidia-smi\npassed\n")
    assert "driver answers from the host root" in out.out
    # The status file is the env NVIDIA's images source: the host's driver, seen at --host-root.
    assert status_path(tmp_path / "out", "driver").read_text() == (
        f"IS_HOST_DRIVER=true\nNVIDIA_DRIVER_ROOT=/\nDRIVER_ROOT_CTR_PATH={host}\n"
        f"NVIDIA_DEV_ROOT=/\nDEV_ROOT_CTR_PATH={host}\n"
    )


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0, reason="chroot needs root"
)
def test_driver_container_wait_says_it_waits_for_the_mark_and_passes_once_it_appears(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    driver, out = tmp_path / "driver", tmp_path / "out"
    minimal_root(driver, GOOD_SMI)  # its files are there: the module is still loading
    out.mkdir()
    argv = ["validate", "driver", "--host-root", str(tmp_path / "host"),
            "--driver-root", str(driver), "--output-dir", str(out),
            "--driver-container"]  # fmt: skip

    assert main(argv) == 1
    assert f"ran: stat {out / '.driver-ctr-ready'}" in capsys.readouterr().err
    assert not status_path(out, "driver").exists()
    appear = threading.Timer(0.5, (out / ".driver-ctr-ready").write_text, ("",))
    appear.start()
    try:
        code = main([*argv, "--wait", "--retry-interval", "0.1", "--timeout", "20"])
    finally:
        appear.cancel()
        appear.join()
    assert code == 0, capsys.readouterr().err
    assert status_path(out, "driver").read_text().startswith("IS_HOST_DRIVER=false\n")


def test_the_smi_checks_never_load_the_kubernetes_client() -> None:
    probe = "import sys, gpuctrl.validator.cli; print('kubernetes_asyncio' in sys.modules)"

    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )

    assert result.stdout == "False\n"


def _sourced(text: str) -> dict[str, str]:
    """The variables a shell gets from ``set -a; . driver-ready`` (as NVIDIA's entrypoints)."""
    done = subprocess.run(
        ["sh", "-c", 'set -a; . "$0"; env -0', "/dev/stdin"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
        env={},
    )
    pairs = (entry.partition("=") for entry in done.stdout.split("\0") if entry)
    return {key: value for key, _, value in pairs if key.isupper() and key != "PWD"}


@pytest.mark.parametrize(
    ("installed", "dev_in_driver_root", "expected"),
    [
        pytest.param(
            False,
            False,
            {"IS_HOST_DRIVER": "true", "NVIDIA_DRIVER_ROOT": "/", "DRIVER_ROOT_CTR_PATH": "HOST",
             "NVIDIA_DEV_ROOT": "/", "DEV_ROOT_CTR_PATH": "HOST"},
            id="host-driver",
        ),
        pytest.param(
            True,
            False,
            {"IS_HOST_DRIVER": "false", "NVIDIA_DRIVER_ROOT": "DRIVER",
             "DRIVER_ROOT_CTR_PATH": "DRIVER", "NVIDIA_DEV_ROOT": "/", "DEV_ROOT_CTR_PATH": "HOST"},
            id="driver-container",
        ),
        pytest.param(
            True,
            True,
            {"IS_HOST_DRIVER": "false", "NVIDIA_DRIVER_ROOT": "DRIVER",
             "DRIVER_ROOT_CTR_PATH": "DRIVER", "NVIDIA_DEV_ROOT": "DRIVER",
             "DEV_ROOT_CTR_PATH": "DRIVER"},
            id="driver-container-with-its-dev",
        ),
    ],
)  # fmt: skip
def test_driver_ready_is_the_env_nvidias_images_source(
    tmp_path: Path, installed: bool, dev_in_driver_root: bool, expected: dict[str, str]
) -> None:
    host, driver = tmp_path / "host", tmp_path / "run" / "nvidia" / "driver"
    driver.mkdir(parents=True)
    if installed:
        install_smi(driver / "usr" / "bin", "#!/bin/sh\n")
    if dev_in_driver_root:
        (driver / "dev").mkdir()
    names = {"HOST": str(host), "DRIVER": str(driver)}
    wanted = {key: names.get(value, value) for key, value in expected.items()}
    assert _sourced(driver_ready_env(host, driver)) == wanted
