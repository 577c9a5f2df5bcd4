"""The driver upgrade rule against a model of a cluster, crashed at any write: a fleet whose
driver DaemonSet has a new revision, the rule's steps carried out one request at a time by a
manager killed before any of them (everything it held in memory lost, as a SIGKILL loses it),
sometimes beside a second copy acting on a stale read. Whatever the crashes, no more nodes
upgrade at once than allowed, an admin's cordon is never lifted, and the fleet ends upgraded,
validated and uncordoned (but where the admin's cordons alone use up maxUnavailable: then the
other nodes wait, saying why)."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from api.v1alpha1 import DriverUpgradePolicySpec, scaled_max_unavailable
from controllers._upgrade_plan import (
    CORDONED,
    DONE,
    IN_PROGRESS,
    STATE,
    NodeFacts,
    PodFacts,
    plan,
)

START = datetime.datetime(2026, 12, 3, tzinfo=datetime.UTC)
TICK = datetime.timedelta(seconds=1)


@dataclasses.dataclass
class World:
    """Nodes (labels, annotations, cordon, resourceVersion) and the pods on them; the
    DaemonSet controller recreates a deleted operand pod on the newest revision one tick later
    and it is Ready the tick after."""

    nodes: dict[str, dict[str, Any]]
    pods: dict[str, list[PodFacts]]
    now: datetime.datetime = START
    serial: int = 0

    def facts(self) -> list[NodeFacts]:
        found = []
        for name, node in self.nodes.items():
            pods = self.pods[name]
            found.append(
                NodeFacts(
                    name=name,
                    resource_version=str(node["rv"]),
                    labels=dict(node["labels"]),
                    annotations=dict(node["annotations"]),
                    unschedulable=node["unschedulable"],
                    ready=True,
                    current_revision="new",
                    drivers=[p for p in pods if p.component == "driver"],
                    operands=[p for p in pods if p.component == "validator"],
                    workloads=[p for p in pods if not p.component],
                )
            )
        return found

    def pod(self, node: str, component: str, revision: str = "new", **fields: Any) -> PodFacts:
        self.serial += 1
        namespace = "gpuctrl" if component else "ml"
        return PodFacts(
            namespace=namespace,
            name=f"{component or 'job'}-{self.serial}",
            uid=f"uid-{self.serial}",
            created=self.now,
            component=component,
            revision=revision if component == "driver" else "",
            daemon=bool(component),
            **fields,
        )

    def patch(self, name: str, patch: dict[str, Any]) -> bool:
        node = self.nodes[name]
        meta = patch["metadata"]
        if meta["resourceVersion"] != str(node["rv"]):
            return False  # 409 Conflict
        for key in ("labels", "annotations"):
            for k, v in meta.get(key, {}).items():
                if v is None:
                    node[key].pop(k, None)
                else:
                    node[key][k] = v
        if "spec" in patch:
            node["unschedulable"] = bool(patch["spec"]["unschedulable"])
        node["rv"] += 1
        return True

    def remove(self, node: str, uid: str) -> None:
        pods = self.pods[node]
        for index, pod in enumerate(pods):
            if pod.uid == uid and not pod.deleting:
                pods[index] = dataclasses.replace(pod, deleting=True, ready=False)

    def tick(self) -> None:
        """A second passes: deleted pods go, DaemonSet pods come back, new pods turn Ready."""
        self.now += TICK
        for name, pods in self.pods.items():
            kept = []
            for pod in pods:
                if pod.deleting:
                    if pod.component:
                        kept.append(self.pod(name, pod.component))
                    continue
                kept.append(pod if pod.ready or not pod.component else _ready(pod))
            self.pods[name] = kept


def _ready(pod: PodFacts) -> PodFacts:
    return dataclasses.replace(pod, ready=True)


def world(sizes: list[int], cordoned: set[int]) -> World:
    found = World({}, {})
    for index, gpu_pods in enumerate(sizes):
        name = f"gpu-{index}"
        found.nodes[name] = {
            "rv": 1,
            "labels": {STATE: DONE},
            "annotations": {},
            "unschedulable": index in cordoned,
        }
        found.pods[name] = [
            found.pod(name, "driver", "old", ready=True),
            found.pod(name, "validator", ready=True),
            *(found.pod(name, "", gpu=True) for _ in range(gpu_pods)),
        ]
    return found


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 2), min_size=1, max_size=7),
    cordoned=st.sets(st.integers(0, 6), max_size=2),
    parallel=st.integers(0, 3),
    unavailable=st.one_of(st.integers(1, 4), st.sampled_from(["25%", "50%", "100%"])),
    data=st.data(),
)
def test_crashes_at_any_write_never_break_the_limits_nor_the_outcome(
    sizes: list[int],
    cordoned: set[int],
    parallel: int,
    unavailable: int | str,
    data: st.DataObject,
) -> None:
    policy = DriverUpgradePolicySpec(max_parallel_upgrades=parallel, max_unavailable=unavailable)
    cluster = world(sizes, {i for i in cordoned if i < len(sizes)})
    admins = {n for n, node in cluster.nodes.items() if node["unschedulable"]}
    stale: list[NodeFacts] | None = None
    chaos = 20 * len(sizes)  # ticks with crashes and a stale copy; then a manager that stays
    for tick in range(chaos + 30 * len(sizes)):
        facts = cluster.facts()
        if all(f.state == DONE and f.driver and f.driver.revision == "new" for f in facts):
            break
        steps = plan(facts, policy, cluster.now)
        crash_after = None
        if tick < chaos:
            if stale is not None and data.draw(st.booleans(), label="a stale second copy"):
                steps += plan(stale, policy, cluster.now)
            crash_after = data.draw(st.integers(0, 3 * len(steps)), label="requests sent")
        sent = 0
        for step in steps:
            requests: list[tuple[str, Any]] = [("evict", p) for p in step.evict]
            requests += [("delete", p) for p in step.delete]
            if step.patch is not None:
                requests.append(("patch", step.patch))
            for kind, what in requests:
                if sent == crash_after:
                    break
                sent += 1
                if kind == "patch":
                    cluster.patch(step.node, what)
                else:
                    cluster.remove(step.node, what.uid)
        stale = facts
        busy = [f for f in cluster.facts() if f.state in IN_PROGRESS]
        assert len(busy) <= (parallel or len(sizes)), [f.state for f in busy]
        for name in admins:
            assert cluster.nodes[name]["unschedulable"], f"the admin's cordon on {name} lifted"
        cluster.tick()
    final = cluster.facts()
    if len(admins) >= scaled_max_unavailable(unavailable, len(sizes)):
        # The admin's cordons use up maxUnavailable: the others wait, and say so.
        waiting = [s for s in plan(final, policy, cluster.now) if s.node not in admins]
        assert all("nodes unavailable" in s.waiting for s in waiting), waiting
        final = [f for f in final if f.name in admins]
    assert {f.name: f.state for f in final} == {f.name: DONE for f in final}
    for found in final:
        assert found.driver is not None
        assert found.driver.revision == "new"
        assert found.unschedulable == (found.name in admins)
        assert CORDONED not in found.annotations
        assert not [p for p in found.workloads if p.gpu and not p.deleting]
