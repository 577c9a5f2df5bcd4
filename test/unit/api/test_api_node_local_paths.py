"""The nodeLocalPaths denylist: no system folder, nothing under or above one, no image folder."""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.v1alpha1 import InvalidPolicy, load_cluster_policy
from api.v1alpha1._driver import FORBIDDEN_HOST_ROOTS, SHADOWED_IMAGE_FOLDERS

FIELD = "spec.driver.repoConfig.nodeLocalPaths[0]"
REQUIRED = (
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/boot",
    "/run",
    "/var/run",
    "/var/lib/kubelet",
    "/var/lib/containerd",
    "/var/lib/docker",
    "/root",
    "/home",
)


def _problems(path: str) -> list[str]:
    mapping: dict[str, Any] = {
        "spec": {"driver": {"repoConfig": {"configMapName": "repo", "nodeLocalPaths": [path]}}}
    }
    try:
        load_cluster_policy(mapping)
    except InvalidPolicy as error:
        return [str(p) for p in error.problems]
    return []


def test_the_denylist_covers_every_required_root() -> None:
    assert set(REQUIRED) <= set(FORBIDDEN_HOST_ROOTS)


@pytest.mark.parametrize("root", REQUIRED)
@pytest.mark.parametrize("below", ["", "/x", "/a/b/c"], ids=["itself", "child", "deep"])
def test_a_system_folder_and_anything_under_it_is_refused(root: str, below: str) -> None:
    path = root + below
    assert f"{FIELD}: {path!r} is under {root}, a system folder" in _problems(path)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        pytest.param("/", "'/' would expose the whole host", id="root"),
        pytest.param("//", "'//' is not normalised", id="double-root"),
        pytest.param("//etc", "'//etc' is not normalised", id="double-slash-etc"),
        pytest.param("/./etc", "'/./etc' is not normalised", id="dot-etc"),
        pytest.param("/etc/", "'/etc/' is not normalised", id="trailing-slash-etc"),
        pytest.param("/opt/../etc", "'/opt/../etc' is not normalised", id="dotdot-etc"),
        pytest.param("/var/lib//kubelet", "'/var/lib//kubelet' is not normalised", id="inner-//"),
        pytest.param("/home/./u", "'/home/./u' is not normalised", id="inner-dot"),
        pytest.param("/var", "'/var' holds /var/run, a system folder", id="var-holds-run"),
        pytest.param(
            "/var/lib", "'/var/lib' holds /var/lib/kubelet, a system folder", id="var-lib-holds"
        ),
        pytest.param("/usr", "'/usr' would hide the driver image's own /usr", id="usr"),
        pytest.param("/usr/src", "'/usr/src' would hide the driver image's own", id="usr-src"),
        pytest.param("/lib", "'/lib' would hide the driver image's own /lib", id="lib"),
    ],
)
def test_variants_ancestors_and_image_folders_are_refused(path: str, message: str) -> None:
    problems = _problems(path)
    assert any(p.startswith(f"{FIELD}: {message}") for p in problems), problems


@pytest.mark.parametrize(
    "path",
    [
        "/opt/local-packages",
        "/srv/repo",
        "/var/lib/local-repo",
        "/var/cache/packages",
        "/usr/src/local-repo",
        "/usr/share/local-packages",
        "/etc-packages",  # a sibling sharing a prefix, not under /etc
        "/homework",
        "/runner/repo",
        "/var/lib/kubelet-packages",
    ],
)
def test_other_folders_are_accepted(path: str) -> None:
    assert _problems(path) == []


_SEGMENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=8)


@settings(deadline=None)  # the first evaluation of a CEL rule compiles it
@given(st.sampled_from(FORBIDDEN_HOST_ROOTS), st.lists(_SEGMENT, max_size=4))
def test_nothing_under_a_forbidden_root_passes(root: str, segments: list[str]) -> None:
    path = "/".join([root, *segments])
    assert _problems(path) != []


@settings(deadline=None)  # the first evaluation of a CEL rule compiles it
@given(
    st.sampled_from(FORBIDDEN_HOST_ROOTS + SHADOWED_IMAGE_FOLDERS),
    st.sampled_from(["/", "//", "/.", "/./", "/x/..", "/x/../"]),
)
def test_no_spelling_of_a_refused_folder_passes(root: str, tail: str) -> None:
    assert _problems(root + tail) != []
    assert _problems("/" + root) != []  # a leading '//'
