"""``gpuctrl check-repo``: the repo-config checks offline, with ``gpuctrl render``'s messages."""

from pathlib import Path

import pytest
import yaml

from controllers.render import OS_IDS
from controllers.render._osfamily import FAMILIES
from gpuctrl.cli import main

ROOT = Path(__file__).parents[3]
AIRGAPPED = ROOT / "config" / "samples" / "clusterpolicy-airgapped.yaml"
NODES = ROOT / "test" / "data" / "render" / "nodes.yaml"
LOCAL = "spec.driver.repoConfig.nodeLocalPaths"


def _config_map(tmp_path: Path, data: dict[str, str], name: str = "repo") -> Path:
    path = tmp_path / f"{name}.yaml"
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}
    path.write_text(yaml.safe_dump(cm))
    return path


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], str]:
    code = main(["check-repo", *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


SOURCES = "Types: deb\nURIs: file:///opt/local-packages\nSuites: ./\n"


def test_a_good_config_map_exits_0_and_prints_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cm = _config_map(tmp_path, {"local.sources": SOURCES})
    args = ("-f", str(cm), "--os", "ubuntu", "--node-local-path", "/opt/local-packages")
    assert _run(capsys, *args) == (0, [], "")


def test_errors_exit_1_with_every_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cm = _config_map(tmp_path, {"local.sources": SOURCES, "dnf.repo": "[x]\n"})
    code, out, err = _run(capsys, "-f", str(cm), "--os", "ubuntu", "--os", "rocky")
    assert code == 1
    assert err == ""
    assert out == [
        "error: ConfigMap 'repo' key 'dnf.repo' line 1: [x] has no baseurl, mirrorlist or metalink",
        "error: ConfigMap 'repo' key 'local.sources' line 2: URIs 'file:///opt/local-packages': "
        f"the repository /opt/local-packages is inside no {LOCAL} entry, so the driver "
        "container cannot see it (add '/opt/local-packages' or a folder above it)",
    ]


def test_warnings_alone_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cm = _config_map(tmp_path, {"local.list": "deb [trusted=yes] https://mirror/ubuntu ./\n"})
    code, out, _ = _run(capsys, "-f", str(cm), "--os", "debian")
    assert code == 0
    assert out == [
        "warning: ConfigMap 'repo' key 'local.list' line 1: trusted=yes: apt installs from it "
        "without checking its signature"
    ]


def test_a_refused_node_local_path_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cm = _config_map(tmp_path, {"local.sources": SOURCES})
    code, out, _ = _run(capsys, "-f", str(cm), "--os", "ubuntu", "--node-local-path", "/etc/")
    assert code == 1
    assert out == [
        f"error: {LOCAL}[0]: '/etc/' is not normalised (no '..', '.', '//' or trailing '/')"
    ]


def test_cert_config_map_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = _config_map(tmp_path, {"local.sources": SOURCES})
    certs = _config_map(tmp_path, {"site.crt": "junk"}, name="certs")
    args = ("-f", str(repo), "--os", "ubuntu", "--node-local-path", "/opt/local-packages")
    code, out, _ = _run(capsys, *args, "--certs", str(certs))
    assert code == 1
    assert out == [
        "error: ConfigMap 'certs' key 'site.crt' line 1: no PEM certificate "
        "(-----BEGIN CERTIFICATE-----) found"
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("a: [", "cannot read", id="yaml"),
        pytest.param("kind: Secret\n", "expected one ConfigMap, found Secret", id="kind"),
        pytest.param("", "expected one ConfigMap, found none", id="empty"),
        pytest.param(
            "kind: ConfigMap\ndata: {}\n", "the ConfigMap has no metadata.name", id="name"
        ),
        pytest.param(
            "kind: ConfigMap\nmetadata: {name: r}\ndata: {a.list: [1]}\n",
            "not a ConfigMap with a name and string data (data.a.list: Input should be a valid "
            "string)",
            id="data",
        ),
    ],
)
def test_unreadable_input_exits_2_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "cm.yaml"
    path.write_text(text)
    code, out, err = _run(capsys, "-f", str(path), "--os", "ubuntu")
    assert (code, out) == (2, [])
    assert err.startswith(f"error: {path}: ")
    assert message in err


def test_an_unknown_os_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["check-repo", "-f", "x.yaml", "--os", "arch"])
    assert exited.value.code == 2
    assert "invalid choice: 'arch'" in capsys.readouterr().err


def test_os_ids_are_those_of_the_families() -> None:
    assert sorted(i for f in FAMILIES for i in f.os_ids) == list(OS_IDS)


def test_render_and_check_repo_print_the_same_messages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = {"local.sources": SOURCES, "dnf.repo": "[x]\n"}
    cm = _config_map(tmp_path, data, name="local-package-repository")
    code, checked, _ = _run(capsys, "-f", str(cm), "--os", "ubuntu", "--os", "rhel")
    assert code == 1
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "apiVersion: gpuctrl.io/v1alpha1\nkind: ClusterPolicy\nmetadata: {name: p}\nspec:\n"
        "  driver: {repoConfig: {configMapName: local-package-repository}}\n"
    )
    out_dir = tmp_path / "out"
    assert (
        main(["render", "-f", str(policy), "-f", str(cm), "-f", str(NODES), "-o", str(out_dir)])
        == 2
    )
    out, err = capsys.readouterr()
    assert out == ""
    assert not out_dir.exists()
    assert err.splitlines() == checked


def test_render_prints_warnings_and_still_renders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cm = _config_map(tmp_path, {"local.list": "deb https://mirror/ubuntu ./\n"}, name="r")
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "apiVersion: gpuctrl.io/v1alpha1\nkind: ClusterPolicy\nmetadata: {name: p}\nspec:\n"
        "  driver: {repoConfig: {configMapName: r}}\n"
    )
    assert main(["render", "-f", str(policy), "-f", str(cm), "-f", str(NODES)]) == 0
    out, err = capsys.readouterr()
    assert "kind: DaemonSet" in out
    assert err.splitlines() == [
        "warning: ConfigMap 'r' has no key that yum reads (*.repo): drivers on rhel, centos, "
        "rocky, ol, rhcos nodes keep their image's default repositories"
    ]


def test_the_airgapped_sample_checks_clean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "-f", str(AIRGAPPED), "-f", str(NODES)]) == 0
    assert capsys.readouterr().err == ""


def test_the_air_gapped_guide_example_renders_without_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    section = (ROOT / "docs" / "air-gapped.md").read_text().split(GUIDE_HEADING, 1)[1]
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "example.yaml"
    path.write_text(example)
    assert main(["render", "-f", str(path), "-f", str(NODES)]) == 0
    assert capsys.readouterr().err == ""


GUIDE_HEADING = "## Point the ClusterPolicy at it"
