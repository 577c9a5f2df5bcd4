"""The driver upgrade rule: each state's next step, the slots, the limits, recovery."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from api.v1alpha1 import DriverUpgradePolicySpec
from controllers._upgrade_plan import (
    CORDONED,
    DELETE,
    DONE,
    DRAIN,
    DRIVER_START_TIMEOUT,
    ENABLED,
    FAILED,
    FAILURE,
    IN_PROGRESS,
    MAX_DRIVER_RESTARTS,
    REQUESTED,
    REQUIRED,
    RESTART,
    SINCE,
    SKIP,
    STATE,
    TARGET,
    VALIDATE,
    WAIT,
    NodeFacts,
    PodFacts,
    Step,
    disable,
    plan,
)

NOW = datetime.datetime(2026, 12, 3, 12, 0, 0, tzinfo=datetime.UTC)
EARLIER = NOW - datetime.timedelta(hours=1)
DEFAULTS = DriverUpgradePolicySpec()


def pod(name: str, created: datetime.datetime = EARLIER, **fields: Any) -> PodFacts:
    return PodFacts(namespace="ml", name=name, uid=f"uid-{name}", created=created, **fields)


def driver(revision: str = "new", created: datetime.datetime = EARLIER, **fields: Any) -> PodFacts:
    fields.setdefault("ready", True)
    return dataclasses.replace(
        pod("driver", created, component="driver", revision=revision, daemon=True, **fields),
        namespace="gpuctrl",
    )


def validator(created: datetime.datetime = EARLIER, **fields: Any) -> PodFacts:
    fields.setdefault("ready", True)
    found = pod("validator", created, component="validator", daemon=True, **fields)
    return dataclasses.replace(found, namespace="gpuctrl")


def node(
    name: str = "gpu-0",
    state: str = "",
    *,
    since: datetime.datetime | None = EARLIER,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    unschedulable: bool = False,
    ready: bool = True,
    drivers: tuple[PodFacts, ...] = (driver("old"),),
    operands: tuple[PodFacts, ...] = (validator(),),
    workloads: tuple[PodFacts, ...] = (),
) -> NodeFacts:
    found = dict(annotations or {})
    if since is not None and state:
        found[SINCE] = since.isoformat()
    return NodeFacts(
        name=name,
        resource_version="7",
        labels={**({STATE: state} if state else {}), **(labels or {})},
        annotations=found,
        unschedulable=unschedulable,
        ready=ready,
        current_revision="new",
        drivers=drivers,
        operands=operands,
        workloads=workloads,
    )


def one(facts: NodeFacts, policy: DriverUpgradePolicySpec = DEFAULTS, **options: Any) -> Step:
    [step] = plan([facts], policy, NOW, **options)
    return step


def annotations(step: Step) -> dict[str, Any]:
    assert step.patch is not None
    return dict(step.patch["metadata"]["annotations"])


def test_a_node_on_the_current_revision_is_marked_done_and_one_behind_required() -> None:
    assert one(node(drivers=(driver("new"),))).next_state == DONE
    busy = node("gpu-0", WAIT, unschedulable=True, workloads=(pod("job", labels={"j": "1"}),))
    waits = DriverUpgradePolicySpec.model_validate({"waitForCompletion": {"podSelector": "j"}})
    _, behind = plan([busy, node("gpu-1", DONE)], waits, NOW)
    assert behind.next_state == REQUIRED
    assert "waiting for a slot: 1 of 1 upgrading" in behind.waiting
    marked = {ENABLED: "true"}
    assert one(node(state=DONE, drivers=(driver("new"),), annotations=marked)).patch is None


def test_nodes_carry_nvidias_upgrade_enabled_mark_while_auto_upgrade_is_on() -> None:
    done = node(state=DONE, drivers=(driver("new"),))
    marked = one(done)
    assert marked.patch == {"metadata": {"resourceVersion": "7", "annotations": {ENABLED: "true"}}}
    assert marked.next_state == DONE
    already = dataclasses.replace(done, annotations={**done.annotations, ENABLED: "true"})
    assert one(already).patch is None
    assert annotations(one(node(state=REQUIRED)))[ENABLED] == "true"
    off = disable(already)
    assert off is not None
    assert off.patch == {"metadata": {"resourceVersion": "7", "annotations": {ENABLED: None}}}
    assert disable(done) is None


def test_nodes_held_back_by_others_unavailability_say_so_and_warn() -> None:
    down = node("gpu-0", DONE, unschedulable=True, drivers=(driver("new"),))
    _, held = plan([down, node("gpu-1", DONE)], DriverUpgradePolicySpec(max_unavailable=1), NOW)
    assert held.next_state == REQUIRED
    assert held.waiting == "waiting for a slot: 1 of at most 1 nodes unavailable"
    assert held.blocked  # nothing in progress: no slot frees by itself
    busy = node("gpu-0", RESTART, unschedulable=True)
    both = DriverUpgradePolicySpec(max_parallel_upgrades=2, max_unavailable=1)
    _, queued = plan([busy, node("gpu-1", DONE)], both, NOW)
    assert "unavailable" in queued.waiting
    assert not queued.blocked  # gpu-0 frees it when done


def test_a_value_that_is_no_state_is_judged_afresh_never_started() -> None:
    current = one(node(state="upgrade-dnoe", drivers=(driver("new"),)))
    assert current.next_state == DONE
    assert current.patch is not None
    assert "spec" not in current.patch  # not taken for a node in progress: never uncordoned
    busy = node("gpu-0", RESTART, unschedulable=True)
    _, typo = plan([busy, node("gpu-1", "upgrade-dnoe")], DEFAULTS, NOW)
    assert typo.next_state == REQUIRED  # waits for its slot like any other


def test_requested_upgrades_a_current_node_and_skip_holds_one_back() -> None:
    requested = node(state=DONE, drivers=(driver("new"),), annotations={REQUESTED: "true"})
    assert one(requested).next_state == RESTART
    skipped = node(state=DONE, labels={SKIP: "true"})
    assert one(skipped).patch is None
    assert one(dataclasses.replace(skipped, labels={STATE: REQUIRED, SKIP: "true"})).patch is None


def test_starting_cordons_in_the_same_patch_and_marks_only_its_own_cordon() -> None:
    # Nothing to wait for, no GPU pod: cordoned and at the driver's restart in one patch.
    step = one(node(state=REQUIRED))
    assert step.next_state == RESTART
    assert step.patch is not None
    assert step.patch["spec"] == {"unschedulable": True}
    assert step.patch["metadata"]["resourceVersion"] == "7"
    assert annotations(step)[CORDONED] == "true"
    assert annotations(step)[TARGET] == "new"
    admin = one(node(state=REQUIRED, unschedulable=True))
    assert admin.patch is not None
    assert "spec" not in admin.patch
    assert CORDONED not in annotations(admin)


def test_done_lifts_only_gpuctrls_cordon() -> None:
    ours = node(state=VALIDATE, annotations={CORDONED: "true"}, drivers=(driver(),))
    mine = one(dataclasses.replace(ours, operands=(validator(NOW),)))
    assert mine.next_state == DONE
    assert mine.patch is not None
    assert mine.patch["spec"] == {"unschedulable": None}
    assert annotations(mine)[CORDONED] is None
    admins = dataclasses.replace(
        ours, annotations={SINCE: EARLIER.isoformat()}, operands=(validator(NOW),)
    )
    theirs = one(admins)
    assert theirs.next_state == DONE
    assert theirs.patch is not None
    assert "spec" not in theirs.patch


def test_wait_for_jobs_waits_for_the_selected_pods_then_times_out() -> None:
    policy = DriverUpgradePolicySpec.model_validate(
        {"waitForCompletion": {"podSelector": "app=train", "timeoutSeconds": 600}}
    )
    job = pod("train-0", labels={"app": "train"})
    waiting = one(node(state=WAIT, since=NOW, workloads=(job,)), policy)
    assert waiting.patch is None
    assert "ml/train-0" in waiting.waiting
    assert waiting.blocked
    assert waiting.deadline == NOW + datetime.timedelta(seconds=600)
    late = NOW - datetime.timedelta(seconds=601)
    gpu = pod("infer-0", gpu=True)
    timed_out = one(node(state=WAIT, since=late, workloads=(job, gpu)), policy)
    assert timed_out.next_state == DELETE
    finished = dataclasses.replace(job, phase="Succeeded")
    assert one(node(state=WAIT, workloads=(finished, gpu)), policy).next_state == DELETE
    assert one(node(state=WAIT, workloads=(job, gpu))).next_state == DELETE  # no selector


def test_gpu_pods_are_evicted_and_the_budget_that_refuses_is_named() -> None:
    gpu = pod("train-0", gpu=True)
    other = pod("web-0")
    blockers = {"ml/train-0": "PodDisruptionBudget in ml: train allows 0"}
    step = one(node(state=DELETE, since=NOW, workloads=(gpu, other)), blockers=blockers)
    assert step.evict == (gpu,)
    assert "train allows 0" in step.waiting
    assert step.blocked
    assert one(node(state=DELETE, workloads=(other,))).next_state == RESTART
    drain = DriverUpgradePolicySpec.model_validate({"drain": {"enable": True}})
    assert one(node(state=DELETE, workloads=(other,)), drain).next_state == DRAIN


def test_gpu_pods_the_policy_does_not_allow_deleting_fail_the_node() -> None:
    bare = pod("notebook", gpu=True, controlled=False)
    failed = one(node(state=DELETE, workloads=(bare,)))
    assert failed.next_state == FAILED
    assert "gpuPodDeletion.force" in failed.failure
    assert "ml/notebook" in failed.failure
    assert annotations(failed)[FAILURE] == failed.failure
    forced = DriverUpgradePolicySpec.model_validate({"gpuPodDeletion": {"force": True}})
    assert one(node(state=DELETE, since=NOW, workloads=(bare,)), forced).evict == (bare,)
    scratch = pod("scratch", gpu=True, empty_dir=True)
    assert "deleteEmptyDir" in one(node(state=DELETE, workloads=(scratch,))).failure


def test_pod_deletion_times_out_into_failure() -> None:
    late = NOW - datetime.timedelta(seconds=301)
    step = one(node(state=DELETE, since=late, workloads=(pod("train-0", gpu=True),)))
    assert step.next_state == FAILED
    assert "after 300s" in step.failure


def test_drain_skips_daemons_and_the_drain_skip_label() -> None:
    policy = DriverUpgradePolicySpec.model_validate({"drain": {"enable": True}})
    kept = (
        pod("agent", daemon=True),
        pod("pinned", labels={"nvidia.com/gpu-driver-upgrade-drain.skip": "true"}),
    )
    web = pod("web-0")
    assert one(node(state=DRAIN, since=NOW, workloads=(*kept, web)), policy).evict == (web,)
    assert one(node(state=DRAIN, workloads=kept), policy).next_state == RESTART


def test_restart_deletes_the_old_driver_and_waits_for_the_new_one_to_start() -> None:
    old = driver("old")
    assert one(node(state=RESTART, since=NOW, drivers=(old,))).delete == (old,)
    starting = driver("new", NOW, ready=False)
    step = one(node(state=RESTART, since=NOW, drivers=(starting,)))
    assert step.patch is None
    assert "startup probe" in step.waiting
    started = dataclasses.replace(starting, ready=True)
    assert one(node(state=RESTART, since=NOW, drivers=(started,))).next_state == VALIDATE
    # Requested on the current revision: the pod from before the step is replaced too.
    assert one(node(state=RESTART, since=NOW, drivers=(driver("new"),))).delete


def test_a_driver_that_never_comes_fails_the_node_after_its_start_budget() -> None:
    late = NOW - DRIVER_START_TIMEOUT
    going = driver("old", deleting=True)
    stuck = one(node(state=RESTART, since=late, drivers=(going,)))
    assert stuck.next_state == FAILED
    assert "gpuctrl/driver is still being deleted" in stuck.failure
    slow = one(node(state=RESTART, since=late, drivers=(driver("new", late, ready=False),)))
    assert "did not start within 1320s" in slow.failure
    waiting = one(node(state=RESTART, since=NOW, drivers=(going,)))
    assert waiting.deadline == NOW + DRIVER_START_TIMEOUT


def test_a_crash_looping_driver_fails_the_node() -> None:
    looping = driver("new", NOW, ready=False, restarts=MAX_DRIVER_RESTARTS + 1)
    step = one(node(state=RESTART, since=NOW, drivers=(looping,)))
    assert step.next_state == FAILED
    assert "restarted 11 times" in step.failure


def test_validation_restarts_the_other_operands_and_waits_for_the_validator() -> None:
    toolkit = dataclasses.replace(validator(), name="toolkit", component="toolkit")
    fresh = (driver("new", NOW),)
    step = one(node(state=VALIDATE, since=NOW, drivers=fresh, operands=(validator(), toolkit)))
    assert {str(p) for p in step.delete} == {"gpuctrl/validator", "gpuctrl/toolkit"}
    assert step.patch is None
    checking = validator(NOW, ready=False, failing_check="check cuda failed (exit code 1)")
    step = one(node(state=VALIDATE, since=NOW, drivers=fresh, operands=(checking,)))
    assert "cuda" in step.waiting
    assert step.blocked
    late = NOW - datetime.timedelta(seconds=601)
    timed_out = one(node(state=VALIDATE, since=late, drivers=fresh, operands=(checking,)))
    assert timed_out.next_state == FAILED
    assert "cuda" in timed_out.failure
    passed = one(node(state=VALIDATE, since=NOW, drivers=fresh, operands=(validator(NOW),)))
    assert passed.next_state == DONE
    no_validator = one(node(state=VALIDATE, since=NOW, drivers=fresh, operands=()), validator=False)
    assert no_validator.next_state == DONE


def test_a_failed_node_recovers_when_healthy_or_on_a_newer_revision() -> None:
    failure = {FAILURE: "driver pod restarted 11 times", TARGET: "new", CORDONED: "true"}
    broken = node(state=FAILED, annotations=failure, drivers=(driver("new", NOW, ready=False),))
    assert one(broken).patch is None
    assert one(broken).failure == failure[FAILURE]
    healthy = dataclasses.replace(
        broken, drivers=(driver("new", EARLIER),), operands=(validator(NOW),)
    )
    assert one(healthy).next_state == DONE
    newer = dataclasses.replace(broken, current_revision="newer")
    assert one(newer).next_state == RESTART  # started over (still cordoned: no new cordon)
    relabelled = node(state="", annotations={CORDONED: "true"}, drivers=(driver("new"),))
    again = one(relabelled)
    assert again.next_state == RESTART  # its label deleted: through the steps again


def _fleet(
    states: list[tuple[str, bool]], policy: DriverUpgradePolicySpec
) -> tuple[list[NodeFacts], list[Step]]:
    nodes = [
        node(f"gpu-{i:02}", state, unschedulable=cordoned or state in IN_PROGRESS)
        for i, (state, cordoned) in enumerate(states)
    ]
    return nodes, plan(nodes, policy, NOW)


@settings(max_examples=200, deadline=None)
@given(
    states=st.lists(
        st.tuples(st.sampled_from([REQUIRED, DONE, WAIT, RESTART, ""]), st.booleans()),
        min_size=1,
        max_size=30,
    ),
    parallel=st.integers(0, 6),
    unavailable=st.one_of(st.integers(0, 8), st.sampled_from(["0%", "10%", "25%", "100%"])),
)
def test_slots_never_exceed_max_parallel_nor_max_unavailable(
    states: list[tuple[str, bool]], parallel: int, unavailable: int | str
) -> None:
    policy = DriverUpgradePolicySpec(max_parallel_upgrades=parallel, max_unavailable=unavailable)
    nodes, steps = _fleet(states, policy)
    before_busy = sum(1 for n in nodes if n.state in IN_PROGRESS)
    before_down = sum(1 for n in nodes if n.unavailable)
    started = [s for s in steps if s.state not in IN_PROGRESS and s.next_state in IN_PROGRESS]
    newly_down = sum(1 for s in started if s.patch and "spec" in s.patch)
    limit = parallel or len(nodes)
    if started:
        assert before_busy + len(started) <= limit
        cap = (
            unavailable
            if isinstance(unavailable, int)
            else -(-int(unavailable[:-1]) * len(nodes) // 100)
        )
        assert newly_down == 0 or before_down + newly_down <= cap
    waiting = [s for s in steps if "waiting for a slot" in s.waiting]
    if waiting and before_busy + len(started) < limit:
        assert all("unavailable" in s.waiting for s in waiting)
