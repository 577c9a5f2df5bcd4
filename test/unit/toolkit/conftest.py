"""Fixtures of the toolkit agent's unit tests: the corpus and the install/cleanup properties."""

from __future__ import annotations

import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuctrl.toolkit import Settings, Target, cleanup, install, load_config, load_journal
from gpuctrl.toolkit._containerd import cri_path


def runc_table(data: bytes | None) -> Any:
    """The runc runtime containerd uses with this config: the file's, or the built-in one when
    the file defines no runtimes at all (None when it defines others but no runc)."""
    text = (data or b"").decode()
    parsed, version = load_config(text)
    node: Any = parsed
    for key in (*cri_path(parsed, version), "containerd", "runtimes"):
        node = node.get(key) if isinstance(node, dict) else None
    return node.get("runc") if node else {"runtime_type": "io.containerd.runc.v2"}


def nvidia_copies(text: str, settings: Settings) -> dict[str, Any]:
    """The runtime tables install must write, by the issue's rule: each a copy of the default
    runtime (unless it is an nvidia one), else runc, else crun, else ``runtime_type`` alone,
    with ``options.BinaryName`` set."""
    data, version = load_config(text)
    node: Any = data
    for key in (*cri_path(data, version), "containerd"):
        node = node.get(key, {}) if isinstance(node, dict) else {}
    runtimes, default = node.get("runtimes", {}), node.get("default_runtime_name")
    ours = {name for name, _ in settings.runtimes()}
    first = [] if default in ours or str(default).startswith("nvidia") else [default]
    source = next(
        (runtimes[n] for n in [*first, "runc", "crun"] if n in runtimes),
        {"runtime_type": "io.containerd.runc.v2"},
    )
    return {
        name: {**source, "options": {**source.get("options", {}), "BinaryName": binary}}
        for name, binary in settings.runtimes()
    }


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
            tomllib.loads(installed.decode())
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
                    (original or b"").decode()
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
