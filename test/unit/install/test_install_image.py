"""The image: the Dockerfile's shape (no container engine runs here to build it), and the wheel
it installs, built with ``pip wheel .`` and run from a clean venv as the image runs it."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest
from install_manifests import REPO

DOCKERFILE = (REPO / "Dockerfile").read_text()
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per Dockerfile instruction, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def stages() -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for instruction in instructions():
        if instruction[0] == "FROM":
            out.append([])
        if out:
            out[-1].append(instruction)
    return out


def test_multi_stage_on_a_slim_base_pinned_by_version() -> None:
    (base,) = [args for word, args in instructions() if word == "ARG" and "PYTHON_IMAGE" in args]
    assert re.fullmatch(r"PYTHON_IMAGE=python:\d+\.\d+\.\d+-slim-\w+", base), base
    build, final = stages()
    assert build[0][1] == "${PYTHON_IMAGE} AS build"
    assert final[0][1] == "${PYTHON_IMAGE}"


def test_final_stage_is_non_root_without_build_tools() -> None:
    build, final = stages()
    assert ("USER", "65532:65532") in final
    assert ("ENTRYPOINT", '["gpuctrl"]') in final
    final_text = " ".join(args for _, args in final)
    for tool in ("apt-get", "gcc", "build-essential", "pip wheel", "COPY"):
        assert tool not in final_text, tool
    # It installs only the wheels the build stage made, then removes pip itself.
    assert "--no-index --find-links=/wheels gpuctrl" in final_text
    assert "from=build" in final_text
    assert "pip uninstall --yes pip" in final_text
    assert "pip wheel --no-cache-dir --wheel-dir /wheels ." in " ".join(a for _, a in build)


def test_build_stage_copies_every_package_and_dockerignore_keeps_the_rest_out() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    build, _ = stages()
    copied = {args.split()[0] for word, args in build if word == "COPY"}
    assert packages <= copied
    assert {"pyproject.toml"} <= {p for args in copied for p in args.split()} | copied
    ignored = set((REPO / ".dockerignore").read_text().split())
    assert {".git", ".venv", "test", "**/__pycache__"} <= ignored


def _ignored(relative: Path, patterns: list[str]) -> bool:
    """Whether .dockerignore's ``patterns`` leave ``relative`` out of the build context."""
    text = relative.as_posix()
    for pattern in patterns:
        bare = pattern.removeprefix("**/")
        if fnmatch.fnmatch(text, pattern) or text == bare or text.startswith(f"{bare}/"):
            return True
        if pattern.startswith("**/") and fnmatch.fnmatch(relative.name, bare):
            return True
    return False


def build_context(target: Path) -> Path:
    """What the build stage's COPY instructions take from the context .dockerignore leaves."""
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    build, _ = stages()
    for word, args in build:
        if word != "COPY":
            continue
        *sources, _ = args.split()
        for source in sources:
            root = REPO / source
            for path in [root, *root.rglob("*")] if root.is_dir() else [root]:
                relative = path.relative_to(REPO)
                if path.is_file() and not any(
                    _ignored(Path(*relative.parts[:n]), patterns)
                    for n in range(1, len(relative.parts) + 1)
                ):
                    (target / relative).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target / relative)
    return target


def test_the_build_context_leaves_the_testing_kit_out(tmp_path: Path) -> None:
    context = build_context(tmp_path)
    assert (context / "gpuctrl" / "runtime" / "__init__.py").is_file()
    assert (context / "controllers" / "render" / "templates").is_dir()
    assert not (context / "gpuctrl" / "testing").exists()
    assert not list(context.rglob("__pycache__"))


@pytest.mark.slow
def test_wheel_builds_and_runs_from_a_clean_venv(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    context = build_context(tmp_path / "context")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels), context],
        check=True,
        capture_output=True,
    )
    assert list(wheels.glob(f"gpuctrl-{VERSION}-*.whl"))
    clean = tmp_path / "venv"
    venv.create(clean, with_pip=True)
    # As the image's final stage: only the wheels just built, no index.
    subprocess.run(
        [
            clean / "bin" / "pip",
            "install",
            "--quiet",
            "--no-index",
            "--find-links",
            wheels,
            "gpuctrl",
        ],
        check=True,
        capture_output=True,
    )
    done = subprocess.run(
        [clean / "bin" / "gpuctrl", "--version"], check=True, capture_output=True, text=True
    )
    assert done.stdout.strip() == f"gpuctrl {VERSION}"
    # The package data the operator reads at run time is in the wheel.
    probe = "from controllers.render import builtin_workload_templates as t; print(sorted(t()))"
    shown = subprocess.run(
        [clean / "bin" / "python", "-c", probe],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert shown.stdout.strip() == "['cuda.yaml', 'plugin.yaml']"
    # Every command the image runs starts without the testing kit, which is not there.
    for command in ("manager", "webhook", "toolkit", "validate"):
        subprocess.run(
            [clean / "bin" / "gpuctrl", command, "--help"], check=True, capture_output=True
        )
    missing = subprocess.run(
        [clean / "bin" / "python", "-c", "import gpuctrl.testing"],
        capture_output=True,
        cwd=tmp_path,
    )
    assert missing.returncode != 0
