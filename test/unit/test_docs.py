"""The user docs hold together: README.md stays short, every relative link in README.md and
docs/ leads to a file (and heading) that exists, every page is in an index, and the
ClusterPolicy reference lists exactly the fields the CRD declares, and the README the pinned
images."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from api.v1alpha1 import NVIDIA_IMAGES

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted([README, *DOCS.rglob("*.md")])
README_LIMIT = 12_000  # bytes: what a platform engineer reads in five minutes

_FENCE = re.compile(r"^```.*?^```[ \t]*$", re.DOTALL | re.MULTILINE)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*$", re.MULTILINE)


def _prose(text: str) -> str:
    """``text`` without fenced blocks: what Markdown renders as headings and links."""
    return _FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for ``heading``: lowercase, punctuation other than '-' and '_' dropped,
    each space a '-'."""
    text = heading.replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings (a repeated one gets -1, -2, ... as on GitHub)."""
    found: set[str] = set()
    for heading in _HEADING.findall(_prose(page.read_text())):
        base = slug(heading)
        anchor, n = base, 0
        while anchor in found:
            n += 1
            anchor = f"{base}-{n}"
        found.add(anchor)
    return found


def links(page: Path) -> list[str]:
    """The relative link targets of ``page`` (no URL with a scheme, nothing in code)."""
    text = _CODE_SPAN.sub("", _prose(page.read_text()))
    return [t for t in _LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def test_the_readme_names_the_pinned_images() -> None:
    table = README.read_text().split("| operand | image |", 1)[1].split("\n\n", 1)[0]
    listed = re.findall(r"^\| [^|]+ \| `([^`]+)`", table, flags=re.MULTILINE)
    assert listed == [pin.reference for pin in NVIDIA_IMAGES.values()]


def test_the_readme_is_short() -> None:
    size = len(README.read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes, over {README_LIMIT}: move to docs/"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            broken.append(f"{target}: no file {destination.relative_to(ROOT)}")
        elif anchor and (destination.suffix != ".md" or anchor not in anchors(destination)):
            broken.append(f"{target}: no heading #{anchor} in {destination.relative_to(ROOT)}")
    assert not broken, broken


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        ("The operator: ClusterPolicy reference", "the-operator-clusterpolicy-reference"),
        ("Figures on Kubernetes 1.34.4", "figures-on-kubernetes-1344"),
        ("Tests and gpuctrl.testing", "tests-and-gpuctrltesting"),
        ("`gpuctrl toolkit` and make_run", "gpuctrl-toolkit-and-make_run"),
    ],
    ids=["colon", "dots", "package", "code-and-underscore"],
)
def test_slugs_follow_github(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_every_docs_page_is_in_an_index() -> None:
    """docs/README.md lists every page of docs/, docs/design/README.md every design note."""
    indexed = {
        (index.parent / target.partition("#")[0]).resolve()
        for index in (DOCS / "README.md", DOCS / "design" / "README.md")
        for target in links(index)
    }
    pages = {p.resolve() for p in DOCS.rglob("*.md") if p != DOCS / "README.md"}
    assert not sorted(str(p.relative_to(ROOT)) for p in pages - indexed)


def _schema_fields(schema: dict[str, Any], prefix: str = "") -> set[str]:
    """The field paths under ``schema`` (``driver.repoConfig.nodeLocalPaths``), the objects
    Kubernetes defines (resources, env, tolerations, affinity, ...) as leaves."""
    fields = set()
    for name, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}{name}"
        nested = sub.get("properties") and name not in ("resources",)
        if not nested or sub.get("default") != {}:
            fields.add(path)
        if nested:
            fields |= _schema_fields(sub, f"{path}.")
    return fields


def test_the_operator_reference_lists_exactly_the_crd_fields() -> None:
    crd = yaml.safe_load((ROOT / "config/crd/gpuctrl.io_clusterpolicies.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    section = (DOCS / "operator.md").read_text().split("\n## Spec fields\n", 1)[1]
    table = section.split("\n| field |", 1)[1].split("\n\n", 1)[0]  # the first table
    documented = set(re.findall(r"^\| `([A-Za-z.]+)` \|", table, re.MULTILINE))
    declared = _schema_fields(spec)
    assert sorted(declared - documented) == [], "fields the CRD has and docs/operator.md lacks"
    assert sorted(documented - declared) == [], "fields docs/operator.md names and the CRD lacks"
