"""Input containerd 1.x accepts never crashes the agent, whatever the options: install works,
cleanup restores the bytes, and with --host-root (drop-in mode detected from the config) too."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from gpuctrl.cli import main

CRI = 'plugins."io.containerd.grpc.v1.cri"'
RUNC = (
    f"[{CRI}.containerd.runtimes.runc]\n"
    '  runtime_type = "io.containerd.runc.v2"\n'
    f"[{CRI}.containerd.runtimes.runc.options]\n"
    "  SystemdCgroup = true\n"
)
ACCEPTED = {
    "bom": b"\xef\xbb\xbfversion = 2\n" + RUNC.encode(),
    "latin-1-comment": b"version = 2\n# caf\xe9\n" + RUNC.encode(),
    "latin-1-string": b'version = 2\nroot = "/var/lib/caf\xe9"\n' + RUNC.encode(),
    "braces-in-comment-and-string": b'version = 2\n# {{ not a template }}\nk = "{{"\n'
    + RUNC.encode(),
    "multi-line-literal-default": (
        f"version = 2\n[{CRI}.containerd]\n  default_runtime_name = '''runc'''\n{RUNC}"
    ).encode(),
    "array-of-tables-under-runc": (
        f'version = 2\n{RUNC}[[{CRI}.containerd.runtimes.runc.hooks]]\n  path = "/x"\n'
        f'[[{CRI}.containerd.runtimes.runc.hooks]]\n  path = "/y"\n'
    ).encode(),
}


@pytest.mark.parametrize("mode", ["in-place", "drop-in", "host-root"])
@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted_input_round_trips(
    name: str, mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = ACCEPTED[name]
    if mode == "host-root":
        original = original.replace(
            b"version = 2\n", b'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n', 1
        )
        config = tmp_path / "etc" / "containerd" / "config.toml"
        common = ["--host-root", str(tmp_path), "--config", "/etc/containerd/config.toml"]
        common += ["--state-dir", "/state", "--restart-mode", "none"]
        drop_in = tmp_path / "etc" / "containerd" / "conf.d" / "99-nvidia.toml"
    else:
        config = tmp_path / "config.toml"
        common = ["--config", str(config), "--state-dir", str(tmp_path / "s")]
        drop_in = tmp_path / "conf.d" / "99-nvidia.toml"
        common += ["--drop-in", str(drop_in)] if mode == "drop-in" else []
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_bytes(original)
    argv = ["toolkit", "install", *common, "--runtime-dir", "/rt", "--set-as-default"]
    assert main(argv) == 0, capsys.readouterr().err
    written = (drop_in if mode != "in-place" else config).read_bytes()
    data = tomllib.loads(written.decode(errors="surrogateescape").removeprefix("\ufeff"))
    runtimes = data["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    assert runtimes["nvidia"]["options"]["SystemdCgroup"] is True
    if "hooks" in name:
        assert runtimes["nvidia"]["hooks"] == [{"path": "/x"}, {"path": "/y"}]
    cleanup = ["toolkit", "cleanup", *[a for a in common if a != "--drop-in"]]
    assert main([a for a in cleanup if a != str(drop_in)]) == 0
    assert config.read_bytes() == original
    assert not drop_in.exists()


def test_a_template_file_with_braces_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """In a k3s/RKE2 template, ``{{`` is a Go template action even inside a TOML string."""
    template = tmp_path / "config.toml.tmpl"
    template.write_bytes(b'version = 2\nk = "{{ .NodeConfig }}"\n')
    argv = ["toolkit", "install", "--config", str(template), "--state-dir", str(tmp_path / "s")]
    assert main([*argv, "--runtime-dir", "/rt"]) == 2
    assert "Go template" in capsys.readouterr().err
