"""Every real-world containerd layout in test/data/toolkit/containerd, against every property."""

from __future__ import annotations

import os
import re
import tomllib
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuctrl.toolkit import (
    Settings,
    _fs,
    add_runtimes,
    cleanup,
    install,
    load_config,
    load_journal,
    revert_changes,
)
from gpuctrl.toolkit._containerd import cri_path

DATA = Path(__file__).resolve().parents[2] / "data" / "toolkit" / "containerd"
CORPUS: dict[str, bytes | None] = {p.stem: p.read_bytes() for p in sorted(DATA.glob("*.toml"))}
CORPUS["missing"] = None
VERSION_1 = {"no-version"}  # containerd 1.x reads these without a version key
LAYOUTS = [pytest.param(data, id=name) for name, data in CORPUS.items()]
DROP_IN_LAYOUTS = [pytest.param(data, id=n) for n, data in CORPUS.items() if n not in VERSION_1]
# The modes the operator renders: legacy (the default runtime), CDI (containerd's CDI support,
# the default left alone), and neither (the policy's setAsDefault: false without CDI).
BOTH = pytest.mark.parametrize(
    "default", [True, False, "cdi"], ids=["set-as-default", "keep-default", "cdi"]
)


def _settings(default: bool | str) -> Settings:
    if default == "cdi":
        return Settings("/usr/local/nvidia/toolkit", enable_cdi=True)
    return Settings("/usr/local/nvidia/toolkit", set_as_default=bool(default))


@BOTH
@pytest.mark.parametrize("original", LAYOUTS)
def test_pure_edit_is_idempotent_and_reverts_exactly(
    original: bytes | None, default: bool | str, runc: Callable[[bytes | None], Any], copies: Any
) -> None:
    text, settings = (original or b"").decode(errors="surrogateescape"), _settings(default)
    edit = add_runtimes(text, settings)
    runtimes = _runtimes(edit.text)
    assert {name: runtimes[name] for name, _ in settings.runtimes()} == copies(text, settings)
    if copies(edit.text, settings) == copies(text, settings):
        # Else --set-as-default moved the default off a runtime that is not runc: editing
        # install's own output would copy runc instead, which is why the agent always edits
        # the original recorded in its journal (install twice == once: test_install_cleanup_*).
        again = add_runtimes(edit.text, settings)
        assert (again.text, again.changes) == (edit.text, ())
    assert revert_changes(edit.text, edit.changes) == text
    assert runc(edit.text.encode(errors="surrogateescape")) == runc(original)
    assert runtimes["nvidia"]["options"]["BinaryName"].endswith("/nvidia-container-runtime")
    assert runtimes["nvidia-cdi"]["options"]["BinaryName"].endswith(".cdi")
    assert runtimes["nvidia-legacy"]["options"]["BinaryName"].endswith(".legacy")
    data, version = load_config(edit.text)
    plugin = data
    for key in cri_path(data, version):
        plugin = plugin[key]
    assert plugin.get("enable_cdi") is (True if settings.enable_cdi else plugin.get("enable_cdi"))
    assert ("default_runtime_name" in plugin["containerd"]) >= settings.set_as_default


@pytest.mark.parametrize("original", LAYOUTS)
def test_install_keeps_every_line_of_the_user(original: bytes | None) -> None:
    """Format-preserving: the new file holds every original line, in order, unchanged but one
    (``default_runtime_name``); CRLF files stay CRLF."""
    text = (original or b"").decode(errors="surrogateescape")
    new = add_runtimes(text, _settings(True)).text
    old_lines = [line for line in text.splitlines() if "default_runtime_name" not in line]
    assert _in_order(old_lines, new.splitlines())
    if "\r\n" in text:
        assert new.count("\n") == new.count("\r\n")


@BOTH
@pytest.mark.parametrize("original", LAYOUTS)
def test_install_cleanup_round_trip(
    original: bytes | None, default: bool | str, properties: Any
) -> None:
    properties.round_trip(original, _settings(default), drop_in=False)


@pytest.mark.parametrize("original", DROP_IN_LAYOUTS)
def test_drop_in_round_trip(original: bytes | None, properties: Any) -> None:
    properties.round_trip(original, _settings(True), drop_in=True)


@pytest.mark.parametrize("original", LAYOUTS)
def test_third_party_edit_survives_cleanup(original: bytes | None, properties: Any) -> None:
    properties.third_party_edit(original, _settings(True))


@pytest.mark.parametrize("original", DROP_IN_LAYOUTS)
def test_drop_in_keeps_main_file_and_never_exceeds_its_version(
    original: bytes | None, drop_in: Any
) -> None:
    text = (original or b"").decode(errors="surrogateescape")
    main, drop = drop_in(text, "/etc/containerd/config.toml", "/d/99.toml", _settings(True))
    data, added = tomllib.loads(drop), tomllib.loads(main)
    assert data["version"] == added.get("version", 2)
    kept = [line for line in text.splitlines() if not line.startswith("imports")]
    assert _in_order(kept, main.splitlines())
    assert "/d/99.toml" in added["imports"]


def test_default_runtime_copied_and_previous_default_restored(node: Any) -> None:
    node.write((DATA / "default-crun.toml").read_bytes())
    install(node.target(), _settings(True))
    runtimes = _runtimes(node.config.read_text())
    assert (
        runtimes["nvidia"]["options"]["BinaryName"]
        == "/usr/local/nvidia/toolkit/nvidia-container-runtime"
    )
    assert runtimes["nvidia"]["options"]["SystemdCgroup"] is True  # crun's, not runc's
    installed = node.read()
    install(node.target(), _settings(True))  # the default is ours now; crun stays the source
    assert node.read() == installed
    node.config.write_text("# ops\n" + node.config.read_text())
    cleanup(node.target())
    assert 'default_runtime_name = "crun"' in node.config.read_text()


@pytest.mark.parametrize(
    ("name", "default"),
    [("nvidia", "nvidia"), ("gpu", "nvidia"), ("gpu", "gpu")],
    ids=["ours", "nvidia-prefix", "renamed"],
)
def test_nvidia_default_is_not_copied(name: str, default: str, node: Any) -> None:
    """A default runtime that is an nvidia one (left by NVIDIA's toolkit or an earlier install:
    one of ours, or any nvidia*) is not the source: the runtimes copy runc's options instead
    (its SystemdCgroup = true), and cleanup restores the file."""
    text = (DATA / "nvidia-toolkit-leftover.toml").read_bytes().decode(errors="surrogateescape")
    original = re.sub(r'(runtimes\.|")nvidia([.\]"])', rf"\g<1>{default}\2", text).encode(
        errors="surrogateescape"
    )
    node.write(original)
    settings = Settings("/opt/nvidia", runtime_name=name, set_as_default=True)
    install(node.target(), settings)
    runtimes = _runtimes(node.config.read_text())
    runc = runtimes["runc"]
    assert runc["options"] == {"SystemdCgroup": True}
    for runtime, binary in settings.runtimes():
        assert runtimes[runtime] == runc | {"options": {**runc["options"], "BinaryName": binary}}
    cleanup(node.target())
    assert node.read() == original


def test_default_changed_by_someone_else_is_kept(node: Any) -> None:
    node.write((DATA / "kind.toml").read_bytes())
    install(node.target(), _settings(True))
    text = node.config.read_text().replace(
        'default_runtime_name = "nvidia"', 'default_runtime_name = "test-handler"'
    )
    node.config.write_text(text)
    cleanup(node.target())
    after = tomllib.loads(node.config.read_text())
    containerd = after["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert containerd["default_runtime_name"] == "test-handler"
    assert set(containerd["runtimes"]) == {"runc", "test-handler"}


def test_cleanup_without_journal_changes_nothing(node: Any) -> None:
    node.write(b"version = 2\n")
    report = cleanup(node.target())
    assert not report.changed
    assert "nothing to clean up" in report.lines[0]
    assert node.read() == b"version = 2\n"


def test_file_mode_and_owner_are_kept(node: Any) -> None:
    node.write((DATA / "kind.toml").read_bytes())
    os.chmod(node.config, 0o600)
    owner = (4321, 4321) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    os.chown(node.config, *owner)
    install(node.target(), _settings(True))
    stat = node.config.stat()
    assert (stat.st_mode & 0o777, stat.st_uid, stat.st_gid) == (0o600, *owner)
    node.config.write_text("# ops\n" + node.config.read_text())  # cleanup edits, not restores
    cleanup(node.target())
    stat = node.config.stat()
    assert (stat.st_mode & 0o777, stat.st_uid, stat.st_gid) == (0o600, *owner)


class _Crash(BaseException):
    """A simulated power cut: nothing after it runs (not even ``except Exception`` handlers)."""


def _crashing_os(steps: list[str], crash_at: int) -> types.SimpleNamespace:
    """``os`` for the atomic-write module, that crashes at its ``crash_at``-th durable step."""

    def step(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            steps.append(name)
            if len(steps) == crash_at:
                raise _Crash(name)
            return real(*args)

        return call

    fake = types.SimpleNamespace(**{k: getattr(os, k) for k in dir(os) if not k.startswith("__")})
    fake.fsync = step("fsync", lambda fd: None)  # durability is not what is tested here
    fake.replace = step("replace", os.replace)
    fake.unlink = step("unlink", os.unlink)
    return fake


def _steps(monkeypatch: pytest.MonkeyPatch, action: Callable[[], object]) -> int:
    steps: list[str] = []
    monkeypatch.setattr(_fs, "os", _crashing_os(steps, 0))
    action()
    return len(steps)


def _crash(monkeypatch: pytest.MonkeyPatch, crash_at: int, action: Callable[[], object]) -> None:
    monkeypatch.setattr(_fs, "os", _crashing_os([], crash_at))
    with pytest.raises(_Crash):
        action()
    monkeypatch.setattr(_fs, "os", _crashing_os([], 0))


@pytest.mark.parametrize(
    ("original", "drop_in"),
    [pytest.param(data, False, id=f"{name}-in-place") for name, data in CORPUS.items()]
    + [pytest.param(p.values[0], True, id=f"{p.id}-drop-in") for p in DROP_IN_LAYOUTS],
)
def test_crash_at_every_write_step(
    original: bytes | None, drop_in: bool, node: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Crash install (then cleanup) at each fsync/rename/unlink: every file is always the
    original or the complete new version, the journal always holds the true original, and
    running the command again finishes the job."""
    node.write(original)
    target, settings = node.target(drop_in), _settings(True)
    install_steps = _steps(monkeypatch, lambda: install(target, settings))
    installed = (node.read(), node.read(node.drop_in))
    cleanup_steps = _steps(monkeypatch, lambda: cleanup(target))
    assert (node.read(), node.read(node.drop_in)) == (original, None)
    for crash_at in range(1, install_steps + 1):
        _crash(monkeypatch, crash_at, lambda: install(target, settings))
        _assert_whole(node, original, installed)
        install(target, settings)  # again: finishes the job from the recorded original
        assert (node.read(), node.read(node.drop_in)) == installed
        assert not list(node.root.rglob(f"*{_fs.TMP_SUFFIX}"))  # a killed write's are gone
        cleanup(target)
        assert (node.read(), node.read(node.drop_in)) == (original, None)
    for crash_at in range(1, cleanup_steps + 1):
        install(target, settings)
        _crash(monkeypatch, crash_at, lambda: cleanup(target))
        _assert_whole(node, original, installed)
        cleanup(target)
        assert (node.read(), node.read(node.drop_in)) == (original, None)
        assert load_journal(target.state_dir) is None


def _assert_whole(node: Any, original: bytes | None, installed: tuple[Any, Any]) -> None:
    assert node.read() in (original, installed[0])
    assert node.read(node.drop_in) in (None, installed[1])
    originals = node.journal_originals()
    if originals is not None:
        assert originals[str(node.config)] == original
    else:  # no journal: nothing may have been changed yet (or all is undone)
        assert node.read() == original


def _in_order(lines: list[str], within: list[str]) -> bool:
    rest = iter(within)
    return all(any(line == other for other in rest) for line in lines)


def _runtimes(text: str) -> dict[str, Any]:
    data, version = load_config(text)
    _, cri = cri_path(data, version)
    return dict(data["plugins"][cri]["containerd"]["runtimes"])
