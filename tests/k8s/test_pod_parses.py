"""A pod's parse kept for its next version: whatever the versions, what comes out is what a whole parse reads."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.devices import topology_manager
from scheduler.api.objects import pod as api_pod
from scheduler.api.objects import pod_versions
from scheduler.k8s.feeds.pod_parses import PodParses
from tests.api import objects

OURS = "gpusched"


#: Where each change is made: the path to the map that holds the field, and the field.
WHERE: dict[str, tuple[tuple[str, ...], str]] = {
    "node": (("spec",), "nodeName"),
    "priority": (("spec",), "priority"),
    "claims": (("spec",), "resourceClaims"),
    "cpu": (("spec", "containers", "0", "resources", "requests"), "cpu"),
    "fpga": (("spec", "containers", "0", "resources", "requests"), "example.com/fpga"),
    "gpus": (("spec", "containers", "0", "resources", "limits"), "nvidia.com/gpu"),
    "phase": (("status",), "phase"),
    "reason": (("status",), "reason"),
    "startTime": (("status",), "startTime"),
    "qosClass": (("status",), "qosClass"),
    "conditions": (("status",), "conditions"),
    "containerStatuses": (("status",), "containerStatuses"),
    "podIP": (("status",), "podIP"),
    "message": (("status",), "message"),
    "resourceVersion": (("metadata",), "resourceVersion"),
    "managedFields": (("metadata",), "managedFields"),
    "milli": (("metadata", "annotations"), "gpusched.io/gpu-milli"),
    "runtime": (("metadata", "annotations"), "gpusched.io/expected-runtime"),
    "ids": (("metadata", "annotations"), "gpusched.io/gpu-ids"),
    "team": (("metadata", "labels"), "team"),
    "kind": ((), "kind"),
}


def version(base: dict[str, Any], changes: list[tuple[str, Any]]) -> dict[str, Any]:
    """``base`` with ``changes`` made, each (what, value); value None takes the field away."""
    raw = copy.deepcopy(base)
    for what, value in changes:
        path, name = WHERE[what]
        holder: Any = raw
        for step in path:
            holder = holder[int(step)] if isinstance(holder, list) else holder.setdefault(step, {})
        if value is None:
            holder.pop(name, None)
        else:
            holder[name] = value
    return raw


CHANGES = st.one_of(
    st.tuples(st.just("node"), st.sampled_from([None, "gpu-0", "gpu-1"])),
    st.tuples(st.just("priority"), st.sampled_from([None, 0, 10, "high"])),
    st.tuples(st.just("phase"), st.sampled_from([None, "Pending", "Running", "Succeeded", "Failed"])),
    st.tuples(st.just("reason"), st.sampled_from([None, "", "OutOfcpu", topology_manager.TOPOLOGY_AFFINITY_ERROR])),
    st.tuples(st.just("startTime"), st.sampled_from([None, "2026-12-07T10:00:00Z", "2026-12-07T10:00:05Z", "soon"])),
    st.tuples(st.just("qosClass"), st.sampled_from([None, "Guaranteed", "Burstable", "BestEffort"])),
    st.tuples(st.just("conditions"), st.sampled_from([None, [{"type": "Ready", "status": "True"}], []])),
    st.tuples(st.just("containerStatuses"), st.sampled_from([None, [{"name": "main", "ready": True}]])),
    st.tuples(st.just("podIP"), st.sampled_from([None, "10.0.0.1", "10.0.0.2"])),
    st.tuples(st.just("message"), st.sampled_from([None, "", "evicted"])),
    st.tuples(st.just("resourceVersion"), st.sampled_from(["1", "2", "3"])),
    st.tuples(st.just("managedFields"), st.sampled_from([None, [{"manager": "kubelet", "operation": "Update"}]])),
    st.tuples(st.just("milli"), st.sampled_from([None, "500", "250", "lots"])),
    st.tuples(st.just("runtime"), st.sampled_from([None, "3600", "an hour"])),
    st.tuples(st.just("team"), st.sampled_from([None, "a", "b"])),
    st.tuples(st.just("ids"), st.sampled_from([None, "0", "1,2", "one", "1,1"])),
    st.tuples(st.just("kind"), st.sampled_from([None, "Pod"])),
    st.tuples(st.just("cpu"), st.sampled_from(["1", "2", "a lot"])),
    st.tuples(st.just("fpga"), st.sampled_from([None, "1"])),
    st.tuples(st.just("claims"), st.sampled_from([None, [{"name": "gpu", "resourceClaimName": "p-gpu"}]])),
    st.tuples(st.just("gpus"), st.sampled_from([None, "1", "2"])),
)


def whole(raw: dict[str, Any]) -> tuple[str, object, object]:
    """What a whole parse makes of ``raw``, as the feed asks for it: the pod and its problems, or the error."""
    try:
        if raw["spec"].get("nodeName"):
            pod, problems = api_pod.parse_bound_pod(raw)
            return "pod", pod, [(p.field, str(p)) for p in problems]
        return "pod", api_pod.parse_pod(raw, scheduler_name=OURS), None
    except InvalidObject as exc:
        return "error", type(exc), str(exc)


def kept(parses: PodParses, raw: dict[str, Any], *, keep: bool) -> tuple[str, object, object]:
    try:
        if raw["spec"].get("nodeName"):
            pod, problems = parses.bound("default/p", raw, keep=keep)
            return "pod", pod, [(p.field, str(p)) for p in problems]
        return "pod", parses.pending("default/p", raw, scheduler_name=OURS), None
    except InvalidObject as exc:
        return "error", type(exc), str(exc)


@settings(max_examples=400, deadline=None)
@given(
    scheduler=st.sampled_from([OURS, "default-scheduler"]),
    versions=st.lists(st.tuples(st.lists(CHANGES, max_size=2), st.booleans()), min_size=1, max_size=10),
)
# One part the digest must hold, changed alone (the QoS class makes the pod's NUMA ask).
@example(scheduler=OURS, versions=[([("qosClass", "Burstable")], True), ([("qosClass", "Guaranteed")], True)])
# What only a waiting pod of ours is refused for (a run time that cannot be read): a pod on a node keeps it as a
# problem, and the same pod without its node is refused again.
@example(
    scheduler=OURS,
    versions=[([("node", "gpu-0"), ("runtime", "an hour")], True), ([("node", None)], True)],
)
# GPU indices that count a pod's GPUs (an extended resource asked, no GPU by the device plugin), given, then changed.
@example(
    scheduler=OURS,
    versions=[
        ([("gpus", None), ("fpga", "1"), ("node", "gpu-0")], True),
        ([("ids", "0")], True),
        ([("ids", "1,2")], True),
    ],
)
# Indices given to a pod of ours that waits with a claim and GPUs by the device plugin (refused without them).
@example(
    scheduler=OURS,
    versions=[
        ([("ids", "0"), ("claims", [{"name": "gpu", "resourceClaimName": "p-gpu"}])], True),
        ([("ids", None)], True),
    ],
)
def test_every_version_reads_as_a_whole_parse_reads_it(
    scheduler: str, versions: list[tuple[list[tuple[str, Any]], bool]]
) -> None:
    # Versions of one pod, each some changes from the one before (a field a parse reads or one it does not, valid or
    # not, a node given or taken): each comes out as its whole parse, pod, problems and errors alike.
    raw = objects.pod("p", gpus=1, scheduler_name=scheduler)
    parses = PodParses()
    for changes, keep in versions:
        raw = version(raw, changes)
        assert kept(parses, raw, keep=keep) == whole(raw)


def started(base: dict[str, Any], *, node: str, rv: str, running: bool) -> dict[str, Any]:
    # A watch event's version, with its kind; the binding wrote the GPUs' indices.
    changes: list[tuple[str, Any]] = [("node", node), ("resourceVersion", rv), ("kind", "Pod"), ("ids", "3")]
    if running:
        changes += [
            ("phase", "Running"),
            ("startTime", "2026-12-07T10:00:00Z"),
            ("conditions", [{"type": "Ready", "status": "True"}]),
            ("podIP", "10.0.0.1"),
        ]
    return version(base, changes)


def test_a_pod_scheduled_and_started_is_parsed_whole_once() -> None:
    # Waiting (listed: no kind), bound by us (the GPUs' indices written), then started by the kubelet: one whole
    # parse, two versions read from it.
    waiting = version(objects.pod("p", gpus=1), [("resourceVersion", "1"), ("qosClass", "Burstable")])
    del waiting["metadata"]["annotations"]  # none, until the binding writes the GPUs' indices
    parses = PodParses()
    first = parses.pending("default/p", waiting, scheduler_name=OURS)
    bound, _ = parses.bound("default/p", started(waiting, node="gpu-0", rv="2", running=False))
    running, problems = parses.bound("default/p", started(waiting, node="gpu-0", rv="3", running=True))
    assert (parses.parsed, parses.reused) == (1, 2)
    assert (first.node_name, bound.node_name, running.node_name) == ("", "gpu-0", "gpu-0")
    assert (first.gpu_ids, bound.gpu_ids, bound.annotations["gpusched.io/gpu-ids"]) == ((), (3,), "3")
    assert (running.phase, running.started, problems) == ("Running", 1796637600.0, ())
    # A change the parse reads is read whole.
    relabelled = version(started(waiting, node="gpu-0", rv="4", running=True), [("team", "a")])
    assert parses.bound("default/p", relabelled)[0].labels == {"team": "a"}
    assert parses.parsed == 2


def test_what_is_kept_is_bounded_and_the_first_listings_running_pods_are_not_kept() -> None:
    parses = PodParses(kept=2)
    for name in ("a", "b", "c"):
        parses.pending(f"default/{name}", objects.pod(name), scheduler_name=OURS)
    assert len(parses) == 2
    parses.bound("default/a", objects.pod("a", node_name="gpu-0"))  # forgotten: parsed whole
    parses.bound("default/c", objects.pod("c", node_name="gpu-0"))  # kept: read from its last parse
    assert (parses.parsed, parses.reused) == (4, 1)
    listed = PodParses()
    listed.bound("default/r", objects.pod("r", node_name="gpu-0"), keep=False)
    assert len(listed) == 0
    parses.forget("default/c")
    assert len(parses) == 1


UNREAD_TOP = sorted(pod_versions._UNREAD_TOP - {"metadata", "spec", "status"})


@pytest.mark.parametrize("what", sorted(pod_versions._UNREAD_STATUS | pod_versions._UNREAD_META) + UNREAD_TOP)
def test_what_is_left_out_of_the_digest_is_read_by_no_parse(what: str) -> None:
    # Each part left out, set to something else: the whole parse is the same (were one read, it would not be).
    raw = objects.pod("p", gpus=1, node_name="gpu-0")
    raw["status"] = {"phase": "Running"}
    changed = copy.deepcopy(raw)
    holder = (
        changed
        if what in UNREAD_TOP
        else changed["metadata"]
        if what in pod_versions._UNREAD_META
        else changed["status"]
    )
    holder[what] = [{"x": what}]
    assert pod_versions.parts_read(raw) == pod_versions.parts_read(changed)
    assert whole(changed) == whole(raw)
