"""CRI-O: a drop-in of gpuctrl's own in crio.conf.d, compared with golden files; crio.conf is
never touched."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctrl.cli import main

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "toolkit" / "crio"
CRIO_CONF = b'# the distribution\'s crio.conf\n[crio.runtime]\ndefault_runtime = "crun"\n'


@pytest.mark.parametrize(
    ("golden", "options"),
    [
        ("99-nvidia.toml", []),
        ("99-nvidia-default.toml", ["--set-as-default"]),
        ("99-nvidia-renamed.toml", ["--set-as-default", "--runtime-name", "gpu-nvidia"]),
    ],
    ids=["runtimes", "set-as-default", "renamed"],
)
def test_crio_drop_in_golden(
    golden: str, options: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "crio.conf"
    conf.write_bytes(CRIO_CONF)
    drop_in = tmp_path / "crio.conf.d" / "99-nvidia.toml"
    drop_in.parent.mkdir()
    runtime_dir = "/opt/nvidia runtime" if "renamed" in golden else "/usr/local/nvidia/toolkit"
    common = ["--runtime", "crio", "--config", str(conf), "--state-dir", str(tmp_path / "s")]
    argv = ["toolkit", "install", *common, "--drop-in", str(drop_in)]
    assert main([*argv, "--runtime-dir", runtime_dir, *options]) == 0
    assert drop_in.read_bytes() == (GOLDEN / golden).read_bytes()
    assert conf.read_bytes() == CRIO_CONF
    assert main([*argv, "--runtime-dir", runtime_dir, *options]) == 0
    assert "already configured" in capsys.readouterr().out
    assert main(["toolkit", "cleanup", *common]) == 0
    assert not drop_in.exists()
    assert conf.read_bytes() == CRIO_CONF
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crio.conf", "crio.conf.d"]


def test_crio_drop_in_that_existed_is_restored(tmp_path: Path) -> None:
    drop_in = tmp_path / "99-nvidia.toml"
    drop_in.write_bytes(b"# someone else's\n")
    common = ["--runtime", "crio", "--state-dir", str(tmp_path / "s")]
    install = ["toolkit", "install", *common, "--drop-in", str(drop_in), "--runtime-dir", "/rt"]
    assert main(install) == 0
    assert b"nvidia-container-runtime" in drop_in.read_bytes()
    assert main(["toolkit", "cleanup", *common]) == 0
    assert drop_in.read_bytes() == b"# someone else's\n"
