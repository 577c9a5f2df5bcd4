"""The invariant, checked by containerd's own parser (`containerd config dump`, no daemon) of
containerd 1.6, 1.7 and 2.1 (Debian bookworm, trixie, forky; unpacked by
hack/containerd-versions.sh): for every layout, in place and in drop-in mode, the configuration
containerd loads after install is the one before plus the NVIDIA runtimes (and the default
runtime, and containerd's CDI support on), and after cleanup the one before. Layouts with
several files (drop-ins of others in conf.d, a glob import, credentials in a 0600 file) check
that no other file's setting is lost."""

from __future__ import annotations

import copy
import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from gpuctrl.toolkit import InvalidConfig, Settings, Target, cleanup, install, load_config

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "test" / "data" / "toolkit" / "containerd"
CACHE = Path(
    os.environ.get("GPUCTRL_CONTAINERD_CACHE", Path.home() / ".cache" / "gpuctrl" / "containerd")
)
SUITES = {"bookworm": "1.6", "trixie": "1.7", "forky": "2.1"}
SETTINGS = Settings("/usr/local/nvidia/toolkit", set_as_default=True, enable_cdi=True)
NVIDIA = ("nvidia", "nvidia-cdi", "nvidia-legacy")
CRI = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}

# Layouts of several files: {relative path: text}; "{etc}" is the config folder.
V2 = 'version = 2\nimports = ["{etc}/conf.d/*.toml"]\n'
SPREAD = {
    "config.toml": V2 + '\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "my/pause:1"\n',
    "conf.d/10-runc.toml": (
        'version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "my/pause:2"\n'
        '\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
        '  runtime_type = "io.containerd.runc.v2"\n\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
        "  SystemdCgroup = true\n"
    ),
}
REGISTRY = {
    "config.toml": V2,
    "conf.d/10-registry.toml": (
        'version = 2\n\n[plugins."io.containerd.grpc.v1.cri".registry]\n'
        '  config_path = "/etc/containerd/certs.d"\n\n'
        '[plugins."io.containerd.grpc.v1.cri".registry.configs."r.example".auth]\n'
        '  username = "robot"\n  password = "s3cret"\n'
    ),
}
V3 = "version = 3\nimports = ['{etc}/conf.d/*.toml']\n"
SPREAD_V3 = {
    "config.toml": V3 + "\n[plugins.'io.containerd.cri.v1.images'.pinned_images]\n"
    "  sandbox = 'my/pause:1'\n",
    "conf.d/10-runc.toml": (
        "version = 3\n\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]"
        "\n  SystemdCgroup = true\n"
    ),
}
MULTI = {"spread-v2": SPREAD, "registry-0600": REGISTRY, "spread-v3": SPREAD_V3}


def _binaries() -> dict[str, Path]:
    found = {s: CACHE / s / "usr" / "bin" / "containerd" for s in SUITES}
    if not all(p.exists() for p in found.values()):
        subprocess.run(["bash", str(ROOT / "hack" / "containerd-versions.sh")], check=True)
    return found


@pytest.fixture(scope="module")
def binaries() -> dict[str, Path]:
    """containerd of each suite, unpacked by the project's script if missing."""
    return _binaries()


def _layouts() -> list[Any]:
    params = [pytest.param({"config.toml": None}, id="missing")]
    for path in sorted(DATA.glob("*.toml")):
        params.append(pytest.param({"config.toml": path.read_bytes()}, id=path.stem))
    params += [pytest.param(files, id=name) for name, files in MULTI.items()]
    # containerd 1.6 expands a relative glob against its working directory (here the test's),
    # 1.7 and 2.1 against the config's folder: the drop-in is loaded either way.
    relative = 'version = 2\nimports = ["conf.d/*.toml"]\n'
    params.append(pytest.param({"config.toml": relative.encode()}, id="relative-glob"))
    return params


def _dump(binary: Path, config: Path) -> dict[str, Any] | None:
    """What containerd loads from ``config``; None when it refuses it."""
    done = subprocess.run(
        [str(binary), "--config", str(config), "config", "dump"],
        capture_output=True,
        check=False,
        timeout=60,
    )
    if done.returncode != 0:
        return None
    data = tomllib.loads(done.stdout.decode(errors="replace"))
    data.pop("imports", None)  # the list of files loaded, which install extends
    return data


def _write(etc: Path, files: dict[str, bytes | str | None]) -> None:
    for name, content in files.items():
        path = etc / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is not None:
            text = content if isinstance(content, bytes) else content.format(etc=etc).encode()
            path.write_bytes(text)
            if "registry" in name:  # it holds credentials
                os.chmod(path, 0o600)


@pytest.mark.parametrize("drop_in", [False, True], ids=["in-place", "drop-in"])
@pytest.mark.parametrize("files", _layouts())
@pytest.mark.parametrize("suite", list(SUITES), ids=[f"containerd-{v}" for v in SUITES.values()])
def test_effective_config_is_before_plus_the_runtimes(
    suite: str,
    files: dict[str, Any],
    drop_in: bool,
    binaries: dict[str, Path],
    tmp_path: Path,
) -> None:
    binary, etc = binaries[suite], tmp_path / "etc"
    _write(etc, files)
    config = etc / "config.toml"
    main = config.read_bytes() if config.exists() else None
    version = load_config((main or b"").decode(errors="surrogateescape"))[1] if main else 2
    if (suite == "forky" and version == 1) or (suite != "forky" and version == 3):
        pytest.skip(f"containerd {SUITES[suite]} does not read version {version} configs")
    if main is None:
        config.write_bytes(b"")
    before = _dump(binary, config)
    if before is None:
        pytest.skip(f"containerd {SUITES[suite]} refuses this layout itself")
    if main is None:
        config.unlink()
    if drop_in and version == 1:
        pytest.skip("version 1 configs have no imports")
    extra = str(etc / "conf.d" / "99-nvidia.toml") if drop_in else None
    target = Target("containerd", str(config), str(tmp_path / "state"), extra)
    if len(files) > 1 and not drop_in:  # in place, another file's CRI settings would win
        with pytest.raises(InvalidConfig, match="--drop-in"):
            install(target, SETTINGS)
        assert config.read_bytes() == main
        return
    install(target, SETTINGS)
    after = _dump(binary, config)
    assert after is not None, "containerd refuses what install wrote"
    cri = CRI[3 if suite == "forky" else 2]
    # containerd 2.x keeps its built-in runc, and merges into it the runc install writes for a
    # version 2 file without runtimes (for 1.x): keys 2.x dropped (CriuPath, NoPivotRoot)
    # appear with their zero values.
    _assert_before_plus_runtimes(before, after, cri, zeros=suite == "forky" and version == 2)
    if extra and any("registry" in name for name in files):
        assert os.stat(extra).st_mode & 0o777 == 0o600
    cleanup(target)
    assert (config.read_bytes() if config.exists() else None) == main
    if main is None:
        config.write_bytes(b"")
    assert _dump(binary, config) == before
    assert not (etc / "conf.d" / "99-nvidia.toml").exists()


def _assert_before_plus_runtimes(
    before: dict[str, Any], after: dict[str, Any], cri: str, zeros: bool
) -> None:
    containerd = after["plugins"][cri]["containerd"]
    assert containerd["default_runtime_name"] == "nvidia"
    # containerd 1.6 has no CDI support: it drops the key (docs/operator.md says so).
    assert after["plugins"][cri].get("enable_cdi", "1.6") in (True, "1.6")
    runtimes = containerd["runtimes"]
    old = before["plugins"][cri]["containerd"]
    default = old["default_runtime_name"]
    names = [*([] if default.startswith("nvidia") else [default]), "runc", "crun"]
    runc_based = [
        n for n in names if old["runtimes"].get(n, {}).get("runtime_type", "").endswith("runc.v2")
    ]
    for name, suffix in zip(NVIDIA, ("", ".cdi", ".legacy"), strict=True):
        binary = f"/usr/local/nvidia/toolkit/nvidia-container-runtime{suffix}"
        assert runtimes[name]["options"]["BinaryName"] == binary
        if runc_based:
            source = old["runtimes"][runc_based[0]]
            # containerd 2.x fills in ``sandboxer`` only for its built-in runc
            skip = ("options", "sandboxer")
            copied = {k: v for k, v in runtimes[name].items() if k not in skip}
            assert _set(copied) == _set({k: v for k, v in source.items() if k not in skip})
            options = {k: v for k, v in runtimes[name]["options"].items() if k != "BinaryName"}
            assert _set(options) == _set(
                {k: v for k, v in source.get("options", {}).items() if k != "BinaryName"}
            )
    stripped = copy.deepcopy(after)
    stripped_containerd = stripped["plugins"][cri]["containerd"]
    stripped_containerd["default_runtime_name"] = default
    if "enable_cdi" in before["plugins"][cri]:
        stripped["plugins"][cri]["enable_cdi"] = before["plugins"][cri]["enable_cdi"]
    for name in NVIDIA:
        if name not in old["runtimes"]:
            stripped_containerd["runtimes"].pop(name)
        else:
            stripped_containerd["runtimes"][name] = old["runtimes"][name]
    if zeros and "runc" in old["runtimes"]:
        assert _set(stripped_containerd["runtimes"]["runc"]) == _set(old["runtimes"]["runc"])
        stripped_containerd["runtimes"]["runc"] = old["runtimes"]["runc"]
    assert stripped == before


def _set(value: Any) -> Any:
    """``value`` without its zero values (containerd prints absent options as zeros)."""
    if isinstance(value, dict):
        kept = {k: _set(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in ("", 0, False, [], {}, None)}
    return value
