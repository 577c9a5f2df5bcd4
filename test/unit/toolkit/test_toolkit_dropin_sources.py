"""Drop-in mode with other files: the drop-in carries their effective CRI settings, follows later
edits of them, is no more readable than they are, and files loaded after it that would undo it
are refused (containerd 1.x replaces a whole plugin table with an imported one)."""

from __future__ import annotations

import os
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
from toolkit_agent import running_agent, stop

from gpuctrl.cli import main
from gpuctrl.toolkit import InvalidConfig, Settings, Target, cleanup, install

CRI = "io.containerd.grpc.v1.cri"
SETTINGS = Settings("/usr/local/nvidia/toolkit", set_as_default=True)


def _node(tmp_path: Path, main: str, others: dict[str, str]) -> tuple[Path, Path, Target]:
    etc = tmp_path / "etc"
    (etc / "conf.d").mkdir(parents=True)
    config = etc / "config.toml"
    config.write_text(main.format(etc=etc))
    for name, text in others.items():
        (etc / name).write_text(text)
    drop_in = etc / "conf.d" / "99-nvidia.toml"
    return config, drop_in, Target("containerd", str(config), str(tmp_path / "s"), str(drop_in))


MAIN = (
    'version = 2\nimports = ["{etc}/conf.d/*.toml"]\n\n'
    f'[plugins."{CRI}"]\n  sandbox_image = "a:1"\n'
)
RUNC = (
    f'version = 2\n[plugins."{CRI}".containerd.runtimes.runc]\n'
    '  runtime_type = "io.containerd.runc.v2"\n'
    f'[plugins."{CRI}".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n'
)


def _cri(path: Path) -> Any:
    return tomllib.loads(path.read_text())["plugins"][CRI]


def test_drop_in_carries_the_last_earlier_cri_table(tmp_path: Path) -> None:
    """conf.d/10-runc.toml's table replaced the main file's (so sandbox_image a:1 is not in
    effect before install): the drop-in carries 10-runc's, and copies its runc."""
    _, drop_in, target = _node(tmp_path, MAIN, {"conf.d/10-runc.toml": RUNC})
    install(target, SETTINGS)
    cri = _cri(drop_in)
    assert "sandbox_image" not in cri
    runtimes = cri["containerd"]["runtimes"]
    assert runtimes["runc"]["options"] == {"SystemdCgroup": True}
    assert runtimes["nvidia"]["options"]["SystemdCgroup"] is True
    cleanup(target)
    assert not drop_in.exists()


def test_drop_in_follows_a_later_edit_of_its_source(tmp_path: Path) -> None:
    config, drop_in, target = _node(tmp_path, MAIN, {})
    install(target, SETTINGS)
    assert _cri(drop_in)["sandbox_image"] == "a:1"
    config.write_text(config.read_text().replace("a:1", "b:2"))
    report = install(target, SETTINGS)  # what `run` does every --resync-seconds
    assert report.changed
    assert _cri(drop_in)["sandbox_image"] == "b:2"
    cleanup(target)
    assert 'sandbox_image = "b:2"' in config.read_text()
    assert "99-nvidia" not in config.read_text()


def test_run_re_derives_the_drop_in(tmp_path: Path) -> None:
    config, drop_in, _ = _node(tmp_path, MAIN, {})
    argv = ["toolkit", "run", "--config", str(config), "--drop-in", str(drop_in)]
    argv += ["--state-dir", str(tmp_path / "s"), "--runtime-dir", "/rt", "--resync-seconds", "0.1"]
    with running_agent(argv) as agent:
        config.write_text(config.read_text().replace("a:1", "b:2"))
        deadline = time.monotonic() + 30
        while _cri(drop_in)["sandbox_image"] != "b:2":
            assert time.monotonic() < deadline, "the drop-in never followed the edit"
            time.sleep(0.05)
        out = stop(agent)
    assert agent.returncode == 0, out
    assert not drop_in.exists()


def test_drop_in_is_no_more_readable_than_its_sources(tmp_path: Path) -> None:
    secret = f'version = 2\n[plugins."{CRI}".registry.configs."r.example".auth]\n  password = "s"\n'
    _, drop_in, target = _node(tmp_path, MAIN, {"conf.d/10-registry.toml": secret})
    os.chmod(tmp_path / "etc" / "conf.d" / "10-registry.toml", 0o600)
    install(target, SETTINGS)
    assert drop_in.stat().st_mode & 0o777 == 0o600
    assert _cri(drop_in)["registry"]["configs"]["r.example"]["auth"]["password"] == "s"


@pytest.mark.parametrize(
    ("others", "message"),
    [
        ({"conf.d/zz.toml": RUNC}, "replaces the whole CRI table before it"),
        (
            {
                "conf.d/zz.toml": "version = 3\n[plugins.'io.containerd.cri.v1.runtime'"
                ".containerd]\n  default_runtime_name = 'runc'\n"
            },
            "overrides install's",
        ),
    ],
    ids=["v2-cri-table", "v3-default-runtime"],
)
def test_a_file_loaded_after_the_drop_in_that_undoes_it_is_refused(
    others: dict[str, str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main_text = MAIN if "v2" in message or "replaces" in message else MAIN.replace("= 2", "= 3")
    main_text = main_text.replace(f'"{CRI}"', "'io.containerd.cri.v1.images'")
    config, drop_in, target = _node(tmp_path, main_text, others)
    before = config.read_bytes()
    with pytest.raises(InvalidConfig, match=message):
        install(target, SETTINGS)
    assert config.read_bytes() == before
    assert not drop_in.exists()
    argv = ["toolkit", "install", "--config", str(config), "--drop-in", str(drop_in)]
    argv += ["--state-dir", str(tmp_path / "s"), "--runtime-dir", "/rt", "--set-as-default"]
    assert main(argv) == 2
    assert "zz.toml is loaded after" in capsys.readouterr().err


def test_a_relative_glob_that_loads_a_cri_table_is_refused(tmp_path: Path) -> None:
    """containerd 1.6 expands ``conf.d/*.toml`` against its working directory, 1.7 against the
    config's folder: their effective CRI tables differ, so no drop-in is right for both."""
    main_text = MAIN.replace('"{etc}/conf.d/*.toml"', '"conf.d/*.toml"')
    config, drop_in, target = _node(tmp_path, main_text, {"conf.d/10-runc.toml": RUNC})
    before = config.read_bytes()
    with pytest.raises(InvalidConfig, match="through a relative glob"):
        install(target, SETTINGS)
    assert config.read_bytes() == before
    assert not drop_in.exists()
