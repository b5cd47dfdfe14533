"""Gangs through ``gpusched run``: all or nothing across nodes, and a required topology level kept whole."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e.kube import Scenario, node_of

pytestmark = pytest.mark.e2e


def _members(group: str, count: int, gpus: int) -> list[dict[str, Any]]:
    return [kube_mod.pod(f"{group}-{m}", gpus=gpus, group=group) for m in range(count)]


def _bound(pods: list[Mapping[str, Any]], group: str) -> list[Mapping[str, Any]]:
    return [p for p in pods if p["metadata"]["labels"].get(kube_mod.LABEL_POD_GROUP) == group and node_of(p)]


def test_gang_binds_all_or_nothing_across_nodes(sched: Scenario) -> None:
    sched.add_nodes([kube_mod.gpu_node(f"gang-{i}") for i in range(3)])
    sched.start_gpusched()
    # Two nodes taken: 8 GPUs left, on one node; the gang needs 16.
    for i in (0, 1):
        sched.create_pod(kube_mod.pod(f"blocker-{i}", gpus=8, node_selector={"kubernetes.io/hostname": f"gang-{i}"}))
    sched.wait_bound(["blocker-0", "blocker-1"])
    sched.create_podgroup(kube_mod.podgroup("train", min_member=4))
    members = _members("train", 4, gpus=4)
    for manifest in members:
        sched.create_pod(manifest)

    event = sched.wait_event("train", "FailedScheduling", kind="PodGroup")
    assert event["type"] == "Warning"
    # Two members would fit on the free node; none may bind while the others cannot.
    sched.stays_unbound([m["metadata"]["name"] for m in members], seconds=5)

    sched.delete_pod("blocker-0")
    placed = sched.wait_bound([m["metadata"]["name"] for m in members], timeout=60)
    assert len({node_of(p) for p in placed}) == 2, "16 GPUs of 4-GPU members need two 8-GPU nodes"
    kube_mod.check_no_overcommit(sched.pods(), sched.my_nodes())

    def group_scheduled() -> dict[str, Any] | None:
        path = kube_mod.Kube.custom_path("podgroups", sched.namespace, "train")
        status = sched.kube.request("GET", path).get("status") or {}
        return status if status.get("phase") in ("Scheduled", "Running") else None

    status = kube_mod.wait_until(group_scheduled, timeout=30, what="PodGroup train phase Scheduled or Running")
    assert status.get("scheduled", 0) >= 4 or status.get("running", 0) >= 4, status


def test_required_topology_gang_lands_in_one_clique(sched: Scenario) -> None:
    # Two cliques of two nodes; half of one node in each clique is taken, so each clique has 12 GPUs free and
    # the partly used nodes (the ones a packing score likes) sit in different cliques.
    nodes = [
        kube_mod.gpu_node("clq-a0", clique="fabric.a", rack="r1", block="b1"),
        kube_mod.gpu_node("clq-a1", clique="fabric.a", rack="r1", block="b1"),
        kube_mod.gpu_node("clq-b0", clique="fabric.b", rack="r2", block="b1"),
        kube_mod.gpu_node("clq-b1", clique="fabric.b", rack="r2", block="b1"),
        kube_mod.gpu_node("clq-none"),  # no clique label: never a candidate for a clique-bound gang
    ]
    sched.add_nodes(nodes)
    clique_of = {n["metadata"]["name"]: n["metadata"]["labels"].get(kube_mod.LABEL_CLIQUE) for n in nodes}
    sched.start_gpusched()
    for node in ("clq-a0", "clq-b0"):
        sched.create_pod(kube_mod.pod(f"half-{node}", gpus=4, node_selector={"kubernetes.io/hostname": node}))
    sched.wait_bound(["half-clq-a0", "half-clq-b0"])

    # 16 GPUs: the cluster has 32 free, but no clique has more than 12: it waits.
    sched.create_podgroup(kube_mod.podgroup("wide", min_member=4, topology_required="clique"))
    wide = _members("wide", 4, gpus=4)
    for manifest in wide:
        sched.create_pod(manifest)
    sched.wait_event("wide", "FailedScheduling", kind="PodGroup")
    sched.stays_unbound([m["metadata"]["name"] for m in wide], seconds=4)
    for manifest in wide:
        sched.delete_pod(manifest["metadata"]["name"])

    # 12 GPUs: fits in either clique, and must not straddle them.
    sched.create_podgroup(kube_mod.podgroup("tight", min_member=3, topology_required="clique"))
    tight = _members("tight", 3, gpus=4)
    for manifest in tight:
        sched.create_pod(manifest)
    placed = sched.wait_bound([m["metadata"]["name"] for m in tight], timeout=60)
    cliques = {clique_of[node_of(p)] for p in placed}
    assert len(cliques) == 1 and None not in cliques, f"gang spread over cliques: {kube_mod.summary(placed)}"
    kube_mod.check_no_overcommit(sched.pods(), sched.my_nodes())


def test_a_gang_in_four_segments_lands_one_segment_per_clique(sched: Scenario) -> None:
    """Four cliques of two 4-GPU nodes; a PodGroup of 8 members x 4 GPUs in segments of 2 required on
    ``nvidia.com/gpu.clique``. The segments are cut by the members' index (the Job's completion index), which
    orders them otherwise than their names: each segment (members 2s and 2s+1) fills one clique."""
    nodes = [kube_mod.gpu_node(f"seg-c{c}-n{n}", gpus=4, clique=f"fabric.{c}") for c in range(4) for n in range(2)]
    sched.add_nodes(nodes)
    clique_of = {n["metadata"]["name"]: n["metadata"]["labels"][kube_mod.LABEL_CLIQUE] for n in nodes}
    sched.start_gpusched()
    group = kube_mod.podgroup("seg", min_member=8)
    group["spec"]["segments"] = {"size": 2, "required": kube_mod.LABEL_CLIQUE}
    sched.create_podgroup(group)
    index = [0, 2, 4, 6, 1, 3, 5, 7]
    names = [f"seg-{chr(97 + i)}" for i in range(8)]
    for name, i in zip(names, index, strict=True):
        labels = {"batch.kubernetes.io/job-completion-index": str(i)}
        sched.create_pod(kube_mod.pod(name, gpus=4, group="seg", labels=labels))
    placed = sched.wait_bound(names, timeout=60)
    by_index = {int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]): p for p in placed}
    segments = [{clique_of[node_of(by_index[2 * s + m])] for m in (0, 1)} for s in range(4)]
    assert all(len(c) == 1 for c in segments), f"a segment straddles cliques: {kube_mod.summary(placed)}"
    assert len(set().union(*segments)) == 4, "one segment per clique"
    kube_mod.check_no_overcommit(sched.pods(), sched.my_nodes())
