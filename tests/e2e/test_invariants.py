"""The fault test's invariant checks (invariants.py) on crafted states: each holds on a sound state and names the
objects of a violating one. No cluster needed: these run in well under a second."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e import invariants as inv


def _pod(
    name: str,
    *,
    node: str = "",
    gpus: int = 0,
    milli: int | str | None = None,
    ids: str | None = None,
    group: str = "",
    queue: str = "",
    cpu: str = "1",
    memory: str = "1Gi",
    phase: str = "Running",
    conditions: list[dict[str, str]] | None = None,
    ns: str = "ns",
) -> dict[str, Any]:
    labels = {}
    if group:
        labels[inv.LABEL_POD_GROUP] = group
    if queue:
        labels[inv.LABEL_QUEUE] = queue
    annotations = {}
    if milli is not None:
        annotations[inv.ANNOTATION_GPU_MILLI] = str(milli)
    if ids is not None:
        annotations[inv.ANNOTATION_GPU_IDS] = ids
    requests = {"cpu": cpu, "memory": memory}
    if gpus:
        requests[inv.GPU] = str(gpus)
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": annotations},
        "spec": {"schedulerName": "gpusched", "nodeName": node, "containers": [{"resources": {"requests": requests}}]},
        "status": {"phase": phase if node else "Pending", "conditions": conditions or []},
    }


def _node(name: str, gpus: int = 8) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"allocatable": {inv.GPU: str(gpus)}}}


def _group(name: str, min_member: int, queue: str = "", ns: str = "ns") -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": min_member}
    if queue:
        spec["queue"] = queue
    return {"metadata": {"name": name, "namespace": ns}, "spec": spec}


def _queue(
    name: str, *, limit: dict[str, str] | None = None, parent: str = "", allocated: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if limit:
        spec["limit"] = limit
    if parent:
        spec["parent"] = parent
    return {"metadata": {"name": name}, "spec": spec, "status": {"allocated": allocated or {}}}


def test_quantity_reads_kubernetes_quantities() -> None:
    assert inv.quantity("500m") == 0.5
    assert inv.quantity("2Gi") == 2 * 2**30
    assert inv.quantity("8") == 8.0
    assert inv.quantity("0.25") == 0.25
    assert inv.quantity(3) == 3.0
    with pytest.raises(ValueError):
        inv.quantity("lots")


def test_node_overcommit() -> None:
    nodes = [_node("n0"), _node("n1")]
    ok = [_pod("a", node="n0", gpus=4), _pod("b", node="n0", gpus=4), _pod("c", node="n1", gpus=8)]
    assert inv.node_overcommit(ok, nodes) == []
    # Finished and unbound pods hold nothing.
    assert (
        inv.node_overcommit([*ok, _pod("done", node="n0", gpus=8, phase="Succeeded"), _pod("p", gpus=8)], nodes) == []
    )
    (bad,) = inv.node_overcommit([*ok, _pod("d", node="n1", gpus=1)], nodes)
    assert "n1" in bad and "9 whole GPUs" in bad and "ns/d=1" in bad
    (ghost,) = inv.node_overcommit([_pod("e", node="gone", gpus=1)], nodes)
    assert "gone" in ghost and "does not exist" in ghost


def test_gpu_sharing() -> None:
    nodes = [_node("n0", 4)]
    ok = [
        _pod("w", node="n0", gpus=2, ids="0,1"),
        _pod("s1", node="n0", milli=500, ids="2"),
        _pod("s2", node="n0", milli=500, ids="2"),
        _pod("s3", node="n0", milli=300, ids="3"),
    ]
    assert inv.gpu_sharing(ok, nodes) == []
    twice = inv.gpu_sharing([*ok, _pod("w2", node="n0", gpus=1, ids="1")], nodes)
    assert any("GPU 1: given whole to 2 pods" in v and "ns/w2" in v for v in twice)
    assert any("GPU 1: 2000 thousandths" in v for v in twice)
    (over,) = inv.gpu_sharing([*ok, _pod("s4", node="n0", milli=100, ids="2")], nodes)
    assert "GPU 2: 1100 thousandths" in over and "ns/s4=100" in over
    (mixed,) = inv.gpu_sharing([*ok, _pod("s5", node="n0", milli=800, ids="0")], nodes)
    assert "GPU 0: 1800" in mixed
    assert any("index 7 outside 0..3" in v for v in inv.gpu_sharing([_pod("x", node="n0", gpus=1, ids="7")], nodes))
    assert any("asks for 2 GPU(s)" in v for v in inv.gpu_sharing([_pod("y", node="n0", gpus=2, ids="0")], nodes))
    assert any("unreadable" in v for v in inv.gpu_sharing([_pod("z", node="n0", gpus=1, ids="a,b")], nodes))


def test_partial_gangs() -> None:
    groups = [_group("g", 3), _group("h", 2)]
    whole = [_pod(f"g-{i}", node="n0", gpus=1, group="g") for i in range(3)] + [_pod("g-3", group="g")]
    none = [_pod(f"h-{i}", group="h") for i in range(2)]
    assert inv.partial_gangs(whole + none, groups) == []
    (bad,) = inv.partial_gangs([*whole, _pod("h-0", node="n1", group="h"), _pod("h-1", group="h")], groups)
    assert "podgroup ns/h: 1 of minMember 2 bound" in bad and "h-0@n1" in bad


def test_queue_usage_follows_the_podgroup_then_the_label() -> None:
    groups = [_group("g", 2, queue="team")]
    pods = [
        _pod("g-0", node="n0", gpus=2, group="g", queue="other"),  # the group's queue wins over the label
        _pod("g-1", node="n0", gpus=2, group="g"),
        _pod("l", node="n0", gpus=1, queue="other", cpu="500m"),
        _pod("s", node="n0", milli=250),  # default queue, a quarter GPU
        _pod("orphan", node="n0", gpus=1, group="missing", queue="other"),  # no PodGroup: its label
        _pod("waiting", gpus=8, queue="team"),
    ]
    usage = inv.leaf_usage(pods, groups)
    assert usage["team"][inv.GPU] == 4
    assert usage["other"][inv.GPU] == 2 and usage["other"][inv.CPU] == 1.5
    assert usage["default"][inv.GPU] == 0.25


def test_a_shared_pod_whose_share_cannot_be_read_whole_counts_a_whole_gpu_in_its_queue() -> None:
    # As the scheduler counts it (docs/operator.md): the fault test edits bound pods' annotations.
    unreadable_memory = _pod("m", node="n0", milli=500, queue="q")
    unreadable_memory["metadata"]["annotations"][inv.ANNOTATION_GPU_MEMORY] = "lots"
    pods = [
        unreadable_memory,
        _pod("a", node="n0", milli="abc", queue="q"),
        _pod("ok", node="n0", milli=250, queue="q"),
    ]
    assert inv.leaf_usage(pods, [])["q"][inv.GPU] == 2.25
    assert inv.shared_milli(unreadable_memory) == 500  # what the GPU's sharing check reads: the share it bound


def test_queues_over_limit_counts_subtrees() -> None:
    queues = [
        _queue("parent", limit={inv.GPU: "4"}),
        _queue("a", parent="parent"),
        _queue("b", parent="parent", limit={inv.GPU: "3"}),
    ]
    ok = [_pod("a0", node="n0", gpus=2, queue="a"), _pod("b0", node="n0", gpus=2, queue="b")]
    assert inv.queues_over_limit(ok, [], queues) == []
    bad = inv.queues_over_limit([*ok, _pod("b1", node="n0", gpus=2, queue="b")], [], queues)
    assert "queue parent: holds 6 nvidia.com/gpu, above its limit 4" in bad
    assert "queue b: holds 4 nvidia.com/gpu, above its limit 3" in bad
    # A cycle among queues does not hang the check.
    cyc = [_queue("x", parent="y"), _queue("y", parent="x", limit={inv.GPU: "1"})]
    assert inv.queues_over_limit([_pod("p", node="n0", gpus=2, queue="x")], [], cyc) == [
        "queue y: holds 2 nvidia.com/gpu, above its limit 1"
    ]


def test_queue_status_diff() -> None:
    pods = [
        _pod("a", node="n0", gpus=2, queue="a", cpu="1", memory="1Gi"),
        _pod("s", node="n0", milli=500, queue="a", cpu="250m", memory="1Gi"),
    ]
    good = [
        _queue("p", allocated={inv.GPU: "2.5", inv.CPU: "1250m", inv.MEMORY: str(2 * 2**30)}),
        _queue("a", parent="p", allocated={inv.GPU: "2.5", inv.CPU: "1250m", inv.MEMORY: str(2 * 2**30)}),
        _queue("idle", allocated={}),
    ]
    assert inv.queue_status_diff(pods, [], good) == []
    stale = [
        _queue("a", allocated={inv.GPU: "1", inv.CPU: "1250m", inv.MEMORY: str(2 * 2**30)}),
        _queue("idle", allocated={inv.GPU: "3"}),
    ]
    diffs = inv.queue_status_diff(pods, [], stale)
    assert diffs == [
        "queue a: nvidia.com/gpu status 1 vs pods 2.5 (diff -1.5)",
        "queue idle: nvidia.com/gpu status 3 vs pods 0 (diff +3)",
    ]
    assert inv.queue_status_diff(pods, [], stale, skip=["a", "idle"]) == []


def test_pods_of_refused_queues_bound() -> None:
    pods = [_pod("a", node="n0", queue="loop"), _pod("b", queue="loop"), _pod("c", node="n0", queue="ok")]
    assert inv.pods_of_refused_queues_bound(pods, [], ["loop"]) == ["pod ns/a bound to n0 in refused queue loop"]


def test_pending_without_reason() -> None:
    unschedulable = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    pods = [
        _pod("bound", node="n0"),
        _pod("cond", conditions=unschedulable),
        _pod("event"),
        _pod("member", group="g"),
        _pod("silent"),
    ]
    events = [
        {"involvedObject": {"kind": "Pod", "namespace": "ns", "name": "event"}, "reason": "QueueNotFound"},
        {"involvedObject": {"kind": "PodGroup", "namespace": "ns", "name": "g"}, "reason": "FailedScheduling"},
        {"involvedObject": {"kind": "Pod", "namespace": "ns", "name": "silent"}, "reason": "Scheduled"},
    ]
    (bad,) = inv.pending_without_reason(pods, events)
    assert bad.startswith("pod ns/silent:") and "Scheduled" in bad
    # A gang waiting for members says so in its PodGroup's status only.
    waiting = [_pod("w-0", group="w")]
    (silent,) = inv.pending_without_reason(waiting, [], [_group("w", 2)])
    assert silent.startswith("pod ns/w-0:")
    group = _group("w", 2)
    group["status"] = {"conditions": [{"type": "Scheduled", "status": "False", "reason": "WaitingForMembers"}]}
    assert inv.pending_without_reason(waiting, [], [group]) == []


def test_bound_twice() -> None:
    history = {
        "u1": {"name": "ns/a", "nodes": {"n0"}, "gpu_ids": {"0,1"}},
        "u2": {"name": "ns/b", "nodes": {"n0", "n1"}, "gpu_ids": {"2"}},
        "u3": {"name": "ns/c", "nodes": {"n2"}, "gpu_ids": {"0", "1"}},
    }
    assert inv.bound_twice(history) == [
        "pod ns/b (uid u2): bound to 2 nodes ['n0', 'n1']",
        "pod ns/c (uid u3): GPU ids changed while bound: ['0', '1']",
    ]


def test_tracebacks_in_json_and_raw_logs() -> None:
    record = {
        "event": "scheduling task died",
        "logger": "scheduler.k8s.run",
        "exception": "Traceback (most recent call last):\n  File x\nValueError: boom",
    }
    lines = [
        json.dumps({"event": "bound", "pod": "ns/a"}),
        json.dumps(record),
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "RuntimeError: raw boom",
    ]
    found = inv.tracebacks(lines)
    assert len(found) == 2
    assert "scheduling task died" in found[0] and "ValueError: boom" in found[0]
    assert "RuntimeError: raw boom" in found[1]
    assert inv.tracebacks(lines[:1]) == []
