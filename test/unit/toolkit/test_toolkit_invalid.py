"""Every kind of invalid input: exit code 2, a message naming the file and what is wrong, and
every file left exactly as it was (no journal either)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctrl.cli import main

INVALID = Path(__file__).resolve().parents[2] / "data" / "toolkit" / "invalid"
CONTAINERD = INVALID.parent / "containerd"

# file -> a fragment the message must contain; each is a different kind of bad input
EXPECTED = {
    "both-cri-tables.toml": 'plugins."io.containerd.grpc.v1.cri" in a version 1 config',
    "default-not-a-string.toml": "default_runtime_name is not a string",
    "dotted-keys.toml": "runtimes.runc is written as dotted keys",
    "inline-table.toml": "written as dotted keys or an inline table",
    "k0s-managed.toml": "k0s regenerates this file",
    "k3s-generated.toml": "k3s regenerates this file from its template",
    "k3s-template.toml.tmpl": "Go template",
    "not-toml.toml": "line 2, column",
    "plugins-not-a-table.toml": "key plugins is not a table",
    "toml-1.1-inline-newline.toml": "not valid TOML 1.0",
    "unknown-version.toml": "key version: 7",
}


def test_every_invalid_file_has_an_expectation() -> None:
    assert sorted(p.name for p in INVALID.iterdir()) == sorted(EXPECTED)


def _run(tmp_path: Path, config: Path, *extra: str) -> int:
    return main(
        [
            "toolkit",
            "install",
            "--config",
            str(config),
            "--runtime-dir",
            "/usr/local/nvidia/toolkit",
            "--state-dir",
            str(tmp_path / "state"),
            "--set-as-default",
            *extra,
        ]
    )


@pytest.mark.parametrize("action", ["install", "plan", "run"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_invalid_config_exit_2_and_untouched(
    name: str, action: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    original = (INVALID / name).read_bytes()
    config.write_bytes(original)
    argv = ["toolkit", action, "--config", str(config), "--runtime-dir", "/rt"]
    code = main([*argv, "--state-dir", str(tmp_path / "state"), "--set-as-default"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{config}: " in err
    assert EXPECTED[name] in err
    assert config.read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]


@pytest.mark.parametrize(
    ("layout", "imports", "message"),
    [
        ("no-version.toml", None, "version 1 configs (no 'version' key) cannot use drop-in"),
        (
            "kind.toml",
            'imports = [\n  "/etc/containerd/extra.toml",\n]\n',
            "line 1: key imports: gpuctrl edits it only when it is on one line",
        ),
    ],
    ids=["version-1", "multi-line-imports"],
)
def test_invalid_for_drop_in_mode(
    layout: str,
    imports: str | None,
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "config.toml"
    original = (imports or "").encode() + (CONTAINERD / layout).read_bytes()
    config.write_bytes(original)
    code = _run(tmp_path, config, "--drop-in", str(tmp_path / "conf.d" / "99-nvidia.toml"))
    assert code == 2
    assert message in capsys.readouterr().err
    assert config.read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]


def test_damaged_journal_is_a_failure_not_invalid_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_bytes(b"version = 2\n")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "toolkit-journal.json").write_text("{not json")
    assert _run(tmp_path, config) == 1
    assert "damaged journal" in capsys.readouterr().err
    assert config.read_bytes() == b"version = 2\n"


def test_cleanup_of_another_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_bytes(b"version = 2\n")
    assert _run(tmp_path, config) == 0
    other = tmp_path / "other.toml"
    argv = ["toolkit", "cleanup", "--config", str(other), "--state-dir", str(tmp_path / "state")]
    assert main(argv) == 2
    assert "the journal in" in capsys.readouterr().err
    assert (tmp_path / "state" / "toolkit-journal.json").exists()
