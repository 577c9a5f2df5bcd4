"""The control plane's binaries, built from Go modules: ``python -m gpuctrl.testing.envtest``.

`ensure_binaries` makes sure ``<cache>/envtest/<version>/`` holds etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kubectl of one Kubernetes release, building them
when it does not: Kubernetes from the ``k8s.io/kubernetes`` module at that release and etcd from
``go.etcd.io/etcd/server/v3``, both through the Go module proxy. Kubernetes' own go.mod points
its staging modules (``k8s.io/api``, ``k8s.io/apiserver``, ...) at ``./staging``, which a
dependency's replace cannot do, so the build writes a small wrapper module that pins each of them
to its published tag (``v0.<minor>.<patch>``). The binaries report their release
(``kube-apiserver --version``, ``/version``).

Promises: a folder that exists holds all five binaries and was checked (nothing is ever left
half-written: the build works in a scratch folder and renames it into place); two builds of one
release at once build it once (the second waits for the first); the build says what it does,
about how long it takes, and a line at least every minute while it runs; a failure is one line
naming the step and the log holding the details, with exit status 1 from the command line.

The release is `KUBERNETES_VERSION` unless ``$GPUCTRL_K8S_VERSION`` names another (any
``1.<minor>.<patch>`` the module proxy serves whose minor is at least `OLDEST_MINOR`). The Go
toolchain is ``$GPUCTRL_GO``, else the first ``go`` of at least `GO_MINIMUM` among ``PATH``
and ``/usr/local/go/bin`` (Debian's golang-go is too old).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

__all__ = [
    "BINARIES",
    "ETCD_VERSION",
    "GO_MINIMUM",
    "KUBERNETES_VERSION",
    "OLDEST_MINOR",
    "BuildError",
    "assets_dir",
    "ensure_binaries",
    "find_go",
    "kubernetes_version",
    "main",
]

KUBERNETES_VERSION = "1.34.4"
"""The release the tests, ``make run`` and CI run by default."""
OLDEST_MINOR = 29
"""The oldest minor release `ensure_binaries` accepts (native sidecars, CEL rules, policy/v1)."""
ETCD_VERSION = "3.6.16"
GO_MINIMUM = (1, 26)
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
VERSION_ENV = "GPUCTRL_K8S_VERSION"
ASSETS_ENV = "GPUCTRL_ENVTEST_ASSETS"
GO_ENV = "GPUCTRL_GO"

_KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
_PROGRESS_SECONDS = 60.0
_FIRST_BUILD_MINUTES = "8-12"  # measured on 2 cores: 6 min compile + module downloads
_STAGING = re.compile(r"^\s*(k8s\.io/[A-Za-z0-9_.-]+)\s+=>\s+\./staging/", re.MULTILINE)
_RELEASE = re.compile(r"^1\.(\d+)\.(\d+)$")


class BuildError(RuntimeError):
    """The binaries could not be built; the message is one line naming the step and its log."""


def kubernetes_version() -> str:
    """The release to run: ``$GPUCTRL_K8S_VERSION`` (a leading ``v`` allowed), else
    `KUBERNETES_VERSION`."""
    return os.environ.get(VERSION_ENV, "").strip().removeprefix("v") or KUBERNETES_VERSION


def assets_dir(version: str | None = None) -> Path:
    """Where the binaries of ``version`` live: ``$GPUCTRL_ENVTEST_ASSETS`` when set, else
    ``~/.cache/gpuctrl/envtest/<version>``."""
    configured = os.environ.get(ASSETS_ENV)
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "gpuctrl" / "envtest" / (version or kubernetes_version())


def ensure_binaries(
    version: str | None = None, *, folder: Path | None = None, out: TextIO = sys.stderr
) -> Path:
    """The folder holding the five `BINARIES` of ``version``, built first when missing.

    Raises `BuildError` (one line) when the release is not one we can build or a step fails.
    """
    version = version or kubernetes_version()
    match = _RELEASE.match(version)
    if match is None or int(match.group(1)) < OLDEST_MINOR:
        raise BuildError(
            f"envtest: Kubernetes {version!r} is not a release to build: give "
            f"1.<minor>.<patch> with minor >= {OLDEST_MINOR} (default {KUBERNETES_VERSION})"
        )
    folder = folder or assets_dir(version)
    if _complete(folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _locked(folder.parent / f".{folder.name}.lock", out):
        if _complete(folder):  # built by the run we waited for
            return folder
        _Build(version, folder, out).run()
    return folder


def _complete(folder: Path) -> bool:
    return all(os.access(folder / name, os.X_OK) for name in BINARIES)


@contextlib.contextmanager
def _locked(path: Path, out: TextIO) -> Iterator[None]:
    with path.open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say(out, "another build of these binaries is running; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _say(out: TextIO, message: str) -> None:
    print(f"envtest: {message}", file=out, flush=True)


class _Build:
    """One build of the binaries of ``version`` into ``folder`` (see `ensure_binaries`)."""

    def __init__(self, version: str, folder: Path, out: TextIO) -> None:
        self.version = version
        self.folder = folder
        self.out = out
        self.go = find_go()
        self.started = time.monotonic()

    def run(self) -> None:
        _say(
            self.out,
            f"building Kubernetes v{self.version} (kube-apiserver, kube-controller-manager, "
            f"kube-scheduler, kubectl) and etcd v{ETCD_VERSION} from Go modules into "
            f"{self.folder}; the first build takes about {_FIRST_BUILD_MINUTES} minutes on 2 "
            f"cores (about 1 GB of modules), later ones reuse the binaries",
        )
        prefix = f".{self.folder.name}-"
        for abandoned in self.folder.parent.glob(f"{prefix}*"):  # a killed build's, under our lock
            shutil.rmtree(abandoned, ignore_errors=True)
        scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=self.folder.parent))
        try:
            self._build_into(scratch)
            if self.folder.exists():  # an incomplete folder from elsewhere: replaced whole
                shutil.rmtree(self.folder)
            os.rename(scratch / "bin", self.folder)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        minutes = (time.monotonic() - self.started) / 60
        _say(self.out, f"ready in {self.folder} ({minutes:.1f} min)")

    def _build_into(self, scratch: Path) -> None:
        bin_dir = scratch / "bin"
        bin_dir.mkdir()
        kube = scratch / "kubernetes"
        kube.mkdir()
        said = self._go(
            "finding the k8s.io/kubernetes module",
            ["mod", "download", "-json", f"k8s.io/kubernetes@v{self.version}"],
            cwd=scratch,
        )
        module = json.loads(said)
        staging = _STAGING.findall(Path(module["GoMod"]).read_text())
        if not staging:
            raise BuildError(f"envtest: no staging modules in {module['GoMod']}")
        tag = "v0." + self.version.split(".", 1)[1]
        packages = [f"k8s.io/kubernetes/cmd/{command}" for command in _KUBE_COMMANDS]
        _write_module(
            kube,
            f"require k8s.io/kubernetes v{self.version}\n\nreplace (\n"
            + "".join(f"\t{name} => {name} {tag}\n" for name in staging)
            + ")\n",
            packages,
        )
        self._go("resolving the modules of Kubernetes", ["mod", "tidy"], cwd=kube)
        minor = self.version.split(".")[1]
        version_flags = " ".join(
            f"-X k8s.io/component-base/version.{key}={value}"
            for key, value in (
                ("gitVersion", f"v{self.version}"),
                ("gitMajor", "1"),
                ("gitMinor", minor),
                ("gitTreeState", "clean"),
            )
        )
        self._compile(", ".join(_KUBE_COMMANDS), kube, packages, version_flags, str(bin_dir) + "/")
        etcd = scratch / "etcd"
        etcd.mkdir()
        _write_module(etcd, "", ["go.etcd.io/etcd/server/v3"])
        self._go(
            f"resolving the modules of etcd v{ETCD_VERSION}",
            ["get", f"go.etcd.io/etcd/server/v3@v{ETCD_VERSION}"],
            cwd=etcd,
        )
        self._compile(
            f"etcd v{ETCD_VERSION}", etcd, ["go.etcd.io/etcd/server/v3"], "", str(bin_dir / "etcd")
        )
        self._check(bin_dir)

    def _check(self, bin_dir: Path) -> None:
        """Each binary runs and says it is the release we built."""
        expected = {
            "kube-apiserver": f"Kubernetes v{self.version}",
            "kube-controller-manager": f"Kubernetes v{self.version}",
            "kube-scheduler": f"Kubernetes v{self.version}",
            "etcd": f"etcd Version: {ETCD_VERSION}",
        }
        for name, wanted in expected.items():
            said = _output([str(bin_dir / name), "--version"])
            if wanted not in said:
                raise BuildError(f"envtest: {name} --version says {said!r}, not {wanted!r}")
        said = _output([str(bin_dir / "kubectl"), "version", "--client"])
        if f"v{self.version}" not in said:
            raise BuildError(f"envtest: kubectl version says {said!r}, not v{self.version}")

    def _compile(
        self, what: str, module: Path, packages: Sequence[str], ldflags: str, output: str
    ) -> None:
        """``go build`` ``packages`` of ``module`` into ``output`` (a file, or a folder ending
        in ``/``), stripped, with ``ldflags`` added."""
        self._go(
            f"compiling {what}",
            [
                "build",
                "-v",
                "-trimpath",
                f"-ldflags=-s -w {ldflags}".rstrip(),
                "-o",
                output,
                *packages,
            ],
            cwd=module,
        )

    def _go(self, step: str, args: Sequence[str], *, cwd: Path) -> str:
        """Run ``go args`` in ``cwd``, a progress line every minute; its standard output.

        Its standard error (``go build -v`` names each package there) goes to a log file.
        """
        _say(self.out, f"{step} ...")
        log = cwd / f"go-{args[0]}.log"
        env = {
            **os.environ,
            "GOFLAGS": "-mod=mod -buildvcs=false",
            "GOWORK": "off",
            "CGO_ENABLED": "0",
        }
        with log.open("w") as errors, tempfile.TemporaryFile("w+") as output:
            process = subprocess.Popen(
                [self.go, *args], cwd=cwd, env=env, stdout=output, stderr=errors
            )
            step_started = last = time.monotonic()
            while process.poll() is None:
                time.sleep(0.5)
                if time.monotonic() - last >= _PROGRESS_SECONDS:
                    last = time.monotonic()
                    _say(self.out, f"  still {step}: {_progress(log, step_started, last)}")
            output.seek(0)
            said = output.read()
        if process.returncode != 0:
            persistent = self.folder.parent / f"{self.folder.name}-build-failed.log"
            shutil.copyfile(log, persistent)
            raise BuildError(
                f"envtest: {step} failed (go {args[0]} exit {process.returncode}): "
                f"{_last_error(log)}; full log: {persistent}"
            )
        return said


def _write_module(folder: Path, requirements: str, packages: Sequence[str]) -> None:
    """A module in ``folder`` with ``requirements`` (go.mod text after the go line) whose
    tools.go imports ``packages``, so `go mod tidy` and `go build` resolve them."""
    (folder / "go.mod").write_text(
        f"module gpuctrl.io/envtest/{folder.name}\n\ngo 1.24.0\n\n{requirements}"
    )
    (folder / "tools.go").write_text(_tools_file(packages))


def _tools_file(packages: Sequence[str]) -> str:
    imports = "".join(f'\t_ "{package}"\n' for package in packages)
    return f"//go:build tools\n\npackage tools\n\nimport (\n{imports})\n"


def find_go() -> str:
    """The Go toolchain to build with: ``$GPUCTRL_GO``, else the first ``go`` of at least
    `GO_MINIMUM` on ``PATH`` or at ``/usr/local/go/bin/go``; raises `BuildError` when none is."""
    configured = os.environ.get(GO_ENV)
    candidates = [configured] if configured else []
    if not configured:
        on_path = shutil.which("go")
        candidates += [on_path] if on_path else []
        candidates.append("/usr/local/go/bin/go")
    found = []
    for candidate in candidates:
        if not candidate or not os.access(candidate, os.X_OK):
            continue
        said = _output([candidate, "env", "GOVERSION"]).strip()
        found.append(f"{candidate} ({said or 'unknown'})")
        numbers = re.match(r"go(\d+)\.(\d+)", said)
        if numbers and (int(numbers.group(1)), int(numbers.group(2))) >= GO_MINIMUM:
            return candidate
    wanted = ".".join(map(str, GO_MINIMUM))
    raise BuildError(
        f"envtest: no Go {wanted}+ found (tried: {', '.join(found) or 'none'}); install Go "
        f"{wanted} or newer, or point ${GO_ENV} at its go binary"
    )


def _output(argv: Sequence[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except OSError as error:
        return str(error)
    return done.stdout + done.stderr


def _progress(log: Path, started: float, now: float) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    elapsed = f"{(now - started) / 60:.0f} min"
    if not lines:
        return elapsed
    return f"{elapsed}, {len(lines)} packages done, last {lines[-1].strip()}"


def _last_error(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
    errors = [line for line in lines if line and not line.startswith(("go: downloading", "#"))]
    return errors[-1] if errors else "no output"


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: build (when missing) and print the folder of the binaries."""
    parser = argparse.ArgumentParser(
        prog="python -m gpuctrl.testing.envtest",
        description="Build the local control plane's binaries from Go modules (once) and "
        "print the folder holding them.",
    )
    parser.add_argument(
        "--version",
        default=None,
        help=f"Kubernetes release (default: ${VERSION_ENV} or {KUBERNETES_VERSION})",
    )
    options = parser.parse_args(argv)
    try:
        folder = ensure_binaries(options.version)
    except BuildError as error:
        print(error, file=sys.stderr)
        return 1
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
