"""Fixtures of the toolkit agent's unit tests: the corpus and the install/cleanup properties."""

from __future__ import annotations

import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuctrl.toolkit import (
    Settings,
    Source,
    Target,
    cleanup,
    containerd_drop_in,
    import_drop_in,
    install,
    load_config,
    load_journal,
)
from gpuctrl.toolkit._containerd import DEFAULT_RUNC, RUNC_V2, cri_path


def runc_table(data: bytes | None) -> Any:
    """The runc runtime containerd uses with this config: the file's, or the built-in one when
    the file defines no runtimes at all, or is version 3 (None when a version 1/2 file defines
    others but no runc: containerd 1.x then has none)."""
    text = (data or b"").decode(errors="surrogateescape")
    parsed, version = load_config(text)
    node: Any = parsed
    for key in (*cri_path(parsed, version), "containerd", "runtimes"):
        node = node.get(key) if isinstance(node, dict) else None
    found = node.get("runc") if node else None
    return _builtin_runc(version) if found is None and (not node or version == 3) else found


def _builtin_runc(version: int) -> dict[str, Any]:
    """containerd's built-in runc: 1.x's as `containerd config default` prints it; 2.x keeps
    its own whatever the file defines, so the file's runc is never needed."""
    return {"runtime_type": RUNC_V2} if version == 3 else DEFAULT_RUNC


def nvidia_copies(text: str, settings: Settings) -> dict[str, Any]:
    """The runtime tables install must write, by the issue's rule: each a copy of the first
    runc-based runtime of the default runtime (unless it is an nvidia one), runc and crun,
    else of a clean runc runtime, with ``options.BinaryName`` set."""
    data, version = load_config(text)
    node: Any = data
    for key in (*cri_path(data, version), "containerd"):
        node = node.get(key, {}) if isinstance(node, dict) else {}
    runtimes, default = node.get("runtimes", {}), node.get("default_runtime_name")
    if version == 3:  # containerd 2.x's built-in runc, merged with the file's
        runtimes = {**runtimes, "runc": {"runtime_type": RUNC_V2, **runtimes.get("runc", {})}}
    ours = {name for name, _ in settings.runtimes()}
    first = [] if default in ours or str(default).startswith("nvidia") else [default]
    source = next(
        (
            runtimes[n]
            for n in [*first, "runc", "crun"]
            if runtimes.get(n, {}).get("runtime_type") == RUNC_V2
        ),
        _builtin_runc(version),
    )
    return {
        name: {**source, "options": {**source.get("options", {}), "BinaryName": binary}}
        for name, binary in settings.runtimes()
    }


def drop_in_pair(text: str, config: str, drop_in: str, settings: Settings) -> tuple[str, str]:
    """The main config and the drop-in install writes for a config that imports nothing else."""
    main = import_drop_in(text, config, drop_in).text
    data, version = load_config(main)
    return main, containerd_drop_in(version, [Source(config, data)], [], drop_in, settings).text


@dataclass(frozen=True)
class Node:
    """A node's containerd config folder and the agent's state folder, under a temp folder."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "etc" / "containerd" / "config.toml"

    @property
    def drop_in(self) -> Path:
        return self.root / "etc" / "containerd" / "conf.d" / "99-nvidia.toml"

    def target(self, drop_in: bool = False) -> Target:
        drop = str(self.drop_in) if drop_in else None
        return Target("containerd", str(self.config), str(self.root / "state"), drop)

    def write(self, data: bytes | None) -> None:
        self.config.parent.mkdir(parents=True, exist_ok=True)
        self.drop_in.parent.mkdir(parents=True, exist_ok=True)
        if data is not None:
            self.config.write_bytes(data)

    def read(self, path: Path | None = None) -> bytes | None:
        path = path or self.config
        return path.read_bytes() if path.exists() else None

    def journal_originals(self) -> dict[str, bytes | None] | None:
        journal = load_journal(str(self.root / "state"))
        return None if journal is None else {f.path: f.original for f in journal.files}


class Properties:
    """The properties every containerd layout must have, checked on a fresh temp node."""

    def node(self, original: bytes | None) -> tuple[Node, tempfile.TemporaryDirectory[str]]:
        folder = tempfile.TemporaryDirectory(prefix="gpuctrl-toolkit-")
        node = Node(Path(folder.name))
        node.write(original)
        return node, folder

    def round_trip(self, original: bytes | None, settings: Settings, drop_in: bool) -> None:
        """install -> cleanup restores every file byte for byte; install twice == once; runc
        is deep-equal after install and after cleanup; the result is valid TOML 1.0."""
        node, folder = self.node(original)
        with folder:
            target = node.target(drop_in)
            first = install(target, settings)
            assert first.changed
            installed = node.read()
            dropped = node.read(node.drop_in)
            assert installed is not None
            tomllib.loads(installed.decode(errors="surrogateescape"))
            assert runc_table(installed) == runc_table(original)
            again = install(target, settings)
            assert not again.changed
            assert (node.read(), node.read(node.drop_in)) == (installed, dropped)
            cleanup(target)
            assert node.read() == original
            assert node.read(node.drop_in) is None
            assert node.journal_originals() is None
            assert not [p for p in node.root.rglob("*") if p.name.endswith("gpuctrl-tmp")]

    def third_party_edit(
        self, original: bytes | None, settings: Settings, exact: bool = True
    ) -> None:
        """A comment someone adds between install and cleanup survives cleanup, which takes
        out only install's changes: byte-exact (original plus the comment) when ``exact``,
        else the same data (a runtime table install replaced comes back as one block)."""
        node, folder = self.node(original)
        with folder:
            install(node.target(), settings)
            installed = node.read() or b""
            newline = b"\r\n" if b"\r\n" in installed else b"\n"
            comment = b"# edited by the cluster admin" + newline
            node.config.write_bytes(comment + installed)
            report = cleanup(node.target())
            assert "took out only install's changes" in report.lines[0]
            if exact:
                assert node.read() == comment + (original or b"")
            else:
                assert tomllib.loads(node.config.read_text()) == tomllib.loads(
                    (original or b"").decode(errors="surrogateescape")
                )
            assert runc_table(node.read()) == runc_table(original)


@pytest.fixture(scope="session")
def properties() -> Properties:
    """The install/cleanup property checks (stateless; usable from hypothesis tests)."""
    return Properties()


@pytest.fixture
def node(tmp_path: Path) -> Node:
    """An empty temp node."""
    found = Node(tmp_path)
    found.write(None)
    return found


@pytest.fixture(scope="session")
def runc() -> Any:
    """:func:`runc_table`, for the test modules."""
    return runc_table


@pytest.fixture(scope="session")
def copies() -> Any:
    """:func:`nvidia_copies`, for the test modules."""
    return nvidia_copies


@pytest.fixture(scope="session")
def drop_in() -> Any:
    """:func:`drop_in_pair`, for the test modules."""
    return drop_in_pair
