"""The sandbox's command line: what it shows of the host, and where mount points are made."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePosixPath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuctrl.testing._bwrap import Entry, Mount, bwrap_argv, system_binds
from gpuctrl.testing._container import expand

# A host tree: folder -> its entries (a link points somewhere; anything else is a folder or file).
TREE: dict[str, list[Entry]] = {
    "/usr": [Entry("/usr/bin"), Entry("/usr/lib"), Entry("/usr/local")],
    "/usr/local": [Entry("/usr/local/bin"), Entry("/usr/local/share")],
    "/usr/local/bin": [Entry("/usr/local/bin/tool")],
    "/usr/lib": [Entry("/usr/lib/x"), Entry("/usr/lib/os-release", "../lib/x")],
}
ROOTS = [Entry("/usr"), Entry("/bin", "usr/bin"), Entry("/etc/passwd")]


def listing(folder: str) -> Iterable[Entry]:
    return TREE.get(folder, [])


def _pairs(arguments: list[str]) -> list[tuple[str, ...]]:
    """The arguments as (option, operand, ...) tuples."""
    arity = {"--ro-bind": 2, "--bind": 2, "--symlink": 2, "--dir": 1}
    result, index = [], 0
    while index < len(arguments):
        option = arguments[index]
        count = arity[option]
        result.append((option, *arguments[index + 1 : index + 1 + count]))
        index += 1 + count
    return result


@pytest.mark.parametrize(
    ("targets", "expected"),
    [
        pytest.param(
            [],
            [("--ro-bind", "/usr", "/usr"), ("--symlink", "usr/bin", "/bin"),
             ("--ro-bind", "/etc/passwd", "/etc/passwd")],
            id="whole-roots",
        ),
        pytest.param(
            ["/usr/local/nvidia"],
            [("--dir", "/usr"), ("--ro-bind", "/usr/bin", "/usr/bin"),
             ("--ro-bind", "/usr/lib", "/usr/lib"), ("--dir", "/usr/local"),
             ("--ro-bind", "/usr/local/bin", "/usr/local/bin"),
             ("--ro-bind", "/usr/local/share", "/usr/local/share"),
             ("--symlink", "usr/bin", "/bin"), ("--ro-bind", "/etc/passwd", "/etc/passwd")],
            id="a-mount-inside-usr-rebuilds-its-path",
        ),
        pytest.param(
            ["/etc/passwd", "/host"],
            [("--ro-bind", "/usr", "/usr"), ("--symlink", "usr/bin", "/bin")],
            id="a-root-that-is-a-target-is-left-to-the-mount",
        ),
    ],
)  # fmt: skip
def test_system_binds(targets: list[str], expected: list[tuple[str, ...]]) -> None:
    assert _pairs(system_binds(ROOTS, targets, listing)) == expected


def test_a_mount_through_a_linked_root_rebuilds_the_links_destination() -> None:
    arguments = _pairs(system_binds(ROOTS, ["/bin/sh"], listing))

    assert arguments[:2] == [("--dir", "/usr"), ("--dir", "/usr/bin")]
    assert ("--symlink", "usr/bin", "/bin") in arguments


def test_nested_and_repeated_roots_are_bound_once() -> None:
    roots = [Entry("/usr/lib"), Entry("/usr"), Entry("/usr")]

    assert _pairs(system_binds(roots, [], listing)) == [("--ro-bind", "/usr", "/usr")]


_PATHS = st.sampled_from(
    ["/usr", "/usr/local", "/usr/local/bin", "/usr/local/bin/x", "/usr/lib", "/usr/lib/x/y",
     "/usr/lib/os-release", "/bin", "/bin/sh", "/etc", "/etc/passwd", "/host", "/usr/bin"]
)  # fmt: skip


@given(targets=st.lists(_PATHS, max_size=4))
def test_no_mount_point_is_ever_made_inside_a_read_only_host_bind(targets: list[str]) -> None:
    arguments = _pairs(system_binds(ROOTS, targets, listing))

    # bwrap follows the /bin link: a mount at /bin/x lands at /usr/bin/x.
    landing = [t.replace("/bin", "/usr/bin", 1) if t.startswith("/bin/") else t for t in targets]
    for option, *operands in arguments:
        bound = PurePosixPath(operands[-1])
        for target in map(PurePosixPath, landing):
            if option in ("--ro-bind", "--symlink"):
                # Nothing a mount lands on or under comes from the host as a whole.
                assert not target.is_relative_to(bound), (target, option, bound)


def test_the_command_line_has_an_empty_root_and_mounts_outer_first() -> None:
    mounts = [
        Mount("/n/run/nvidia", "/host/run/nvidia", read_only=False),
        Mount("/n", "/host", read_only=True),
    ]

    argv = bwrap_argv(
        ["gpuctrl", "toolkit"], system=["--ro-bind", "/usr", "/usr"], mounts=mounts,
        working_dir="/", hostname="pod-1", info_fd=7,
    )  # fmt: skip

    assert argv[0] == "bwrap"
    for option in ("--die-with-parent", "--unshare-pid", "--as-pid-1"):
        assert option in argv
    assert argv[argv.index("--tmpfs") + 1] == "/"
    assert argv.index("--tmpfs") < argv.index("--ro-bind")
    assert "/host" in argv[argv.index("--ro-bind", argv.index("--proc")) :]
    host, nested = argv.index("/n"), argv.index("/n/run/nvidia")
    assert host < nested
    assert argv[nested - 1] == "--bind"
    assert argv[-3:] == ["--", "gpuctrl", "toolkit"]
    assert ["--bind", "/", "/"] not in [argv[i : i + 3] for i in range(len(argv))]


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        pytest.param("$(A)-$(B)", "1-two", id="defined"),
        pytest.param("$(C)", "$(C)", id="undefined-stays"),
        pytest.param("$$(A)", "$(A)", id="escaped"),
        pytest.param("$$", "$", id="dollar"),
        pytest.param("$A $(A", "$A $(A", id="not-a-reference"),
        pytest.param("$(A)$(A)", "11", id="twice"),
    ],
)
def test_expand_as_the_kubelet_does(text: str, expanded: str) -> None:
    assert expand(text, {"A": "1", "B": "two"}) == expanded
