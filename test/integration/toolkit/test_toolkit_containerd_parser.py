"""containerd's own parser (Debian's containerd, `containerd config dump`) reads every version 1
and 2 config install writes - also in drop-in mode, through the imports merge - and sees the
NVIDIA runtimes, runc's options unchanged and every other setting as it was."""

from __future__ import annotations

import copy
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from gpuctrl.toolkit import Settings, Target, install, load_config

CONTAINERD = shutil.which("containerd")
DATA = Path(__file__).resolve().parents[2] / "data" / "toolkit" / "containerd"
CRI = "io.containerd.grpc.v1.cri"
SETTINGS = Settings("/usr/local/nvidia/toolkit", set_as_default=True)

pytestmark = pytest.mark.skipif(
    CONTAINERD is None,
    reason="needs Debian's containerd (bash hack/install-debian-packages.sh containerd)",
)


def _layouts(drop_in: bool) -> list[Any]:
    """The corpus layouts containerd 1.x reads: versions 1 and 2 (drop-in mode: version 2)."""
    params = [pytest.param(None, id="missing")]
    for path in sorted(DATA.glob("*.toml")):
        _, version = load_config(path.read_text())
        if version == 2 or (version == 1 and not drop_in):
            params.append(pytest.param(path.read_bytes(), id=path.stem))
    return params


def _dump(config: Path) -> dict[str, Any]:
    assert CONTAINERD is not None
    done = subprocess.run(
        [CONTAINERD, "--config", str(config), "config", "dump"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return tomllib.loads(done.stdout)


def _without_ours(dump: dict[str, Any]) -> dict[str, Any]:
    """The dump less what install adds (runtimes, default runtime) and the imports list."""
    out = copy.deepcopy(dump)
    out.pop("imports", None)
    containerd = out["plugins"][CRI]["containerd"]
    containerd.pop("default_runtime_name")
    for name in ("nvidia", "nvidia-cdi", "nvidia-legacy"):
        containerd["runtimes"].pop(name, None)
    return out


@pytest.mark.parametrize("original", _layouts(drop_in=False))
def test_containerd_reads_what_install_writes(original: bytes | None, tmp_path: Path) -> None:
    _check(original, tmp_path, drop_in=False)


@pytest.mark.parametrize("original", _layouts(drop_in=True))
def test_containerd_merges_the_drop_in(original: bytes | None, tmp_path: Path) -> None:
    _check(original, tmp_path, drop_in=True)


def _check(original: bytes | None, tmp_path: Path, drop_in: bool) -> None:
    config = tmp_path / "etc" / "config.toml"
    config.parent.mkdir()
    config.write_bytes(original or b"")
    before = _dump(config)  # a missing file means the defaults, as an empty one does
    if original is None:
        config.unlink()
    extra = str(tmp_path / "etc" / "conf.d" / "99-nvidia.toml") if drop_in else None
    install(Target("containerd", str(config), str(tmp_path / "state"), extra), SETTINGS)
    after = _dump(config)
    containerd = after["plugins"][CRI]["containerd"]
    assert containerd["default_runtime_name"] == "nvidia"
    runtimes = containerd["runtimes"]
    for name, suffix in (("nvidia", ""), ("nvidia-cdi", ".cdi"), ("nvidia-legacy", ".legacy")):
        binary = f"/usr/local/nvidia/toolkit/nvidia-container-runtime{suffix}"
        assert runtimes[name]["options"]["BinaryName"] == binary
    old = before["plugins"][CRI]["containerd"]
    assert _set(runtimes.get("runc")) == _set(old["runtimes"].get("runc"))
    default = old["default_runtime_name"]  # the source unless it is an nvidia one
    names = [*([] if default.startswith("nvidia") else [default]), "runc", "crun"]
    source = next(old["runtimes"][name] for name in names if name in old["runtimes"])
    copied = {k: v for k, v in runtimes["nvidia"]["options"].items() if k != "BinaryName"}
    assert _set(copied) == _set({k: v for k, v in source["options"].items() if k != "BinaryName"})
    assert _set(_without_ours(after)) == _set(_without_ours(before))


def _set(value: Any) -> Any:
    """``value`` without its zero values: a missing runc ``options`` table means runc's defaults,
    which ``config dump`` shows as a table of zeros."""
    if isinstance(value, dict):
        kept = {k: _set(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in ("", 0, False, [], {}, None)}
    return value
