"""Benchmark: `check_repo_config` on repository ConfigMaps up to the apiserver's 1 MiB limit.

Run: ``.venv/bin/python test/bench/bench_repo_check.py``. Builds a ConfigMap of one deb822
file and one ``.repo`` file with ``N`` entries each, for a cluster with ubuntu and rhel GPU
nodes, and prints seconds (best of 3) and microseconds per entry for growing ``N``. Whoever
can edit the ConfigMap chooses its size, so the time per entry must stay flat (linear work):
the last column is the ratio of the time per entry to that of the smallest size.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from api.v1alpha1 import load_cluster_policy
from controllers.render import ClusterFacts, ConfigMapFacts, NodeFacts, check_repo_config

STANZA = "Types: deb\nURIs: file:///opt/local/{i}\nSuites: ./\nSigned-By: /opt/local/k.gpg\n\n"
SECTION = "[r{i}]\nbaseurl=file:///opt/local/{i}\ngpgkey=file:///opt/local/k\n\n"


def _node(name: str, os_id: str, version: str) -> NodeFacts:
    labels = {
        "nvidia.com/gpu.present": "true",
        "feature.node.kubernetes.io/system-os_release.ID": os_id,
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": version,
    }
    return NodeFacts(name=name, labels=labels)


def measure(entries: int) -> tuple[int, float]:
    data = {
        "a.sources": "".join(STANZA.format(i=i) for i in range(entries)),
        "b.repo": "".join(SECTION.format(i=i) for i in range(entries)),
    }
    repo = {"configMapName": "r", "nodeLocalPaths": ["/opt/local"]}
    policy = load_cluster_policy({"spec": {"driver": {"repoConfig": repo}}})
    facts = ClusterFacts(
        nodes=(_node("u", "ubuntu", "22.04"), _node("r", "rhel", "9.4")),
        config_maps=(ConfigMapFacts(name="r", data=data),),
    )
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        problems = check_repo_config(policy, facts, now=datetime.now(UTC))
        best = min(best, time.perf_counter() - start)
        assert problems == [], problems
    return sum(map(len, data.values())), best


def main() -> None:
    base = None
    print(f"{'entries':>8} {'bytes':>9} {'seconds':>8} {'us/entry':>9} {'ratio':>6}")
    for entries in (500, 2000, 8000):
        size, seconds = measure(entries)
        per_entry = seconds / (2 * entries) * 1e6
        base = base or per_entry
        print(f"{entries:>8} {size:>9} {seconds:>8.3f} {per_entry:>9.1f} {per_entry / base:>6.2f}")


if __name__ == "__main__":
    main()
