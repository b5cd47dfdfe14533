"""The fit filter: a pod goes only where its resources, GPUs, selectors and tolerations allow, and when it fits
nowhere the message says why, node by node, as kube-scheduler's does."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.framework.interface import Code
from tests.api import objects
from tests.core.harness import Cluster


def _message(cluster: Cluster, raw: dict[str, Any]) -> str:
    result = cluster.schedule(raw)
    assert result.decision is None
    assert result.status.code == Code.UNSCHEDULABLE
    return result.status.message


def test_resources_must_fit() -> None:
    cluster = Cluster([objects.node("small", cpu="2", memory="4Gi"), objects.node("big", cpu="16", memory="64Gi")])
    assert cluster.place(objects.pod("p", cpu="4", memory="8Gi"))[0] == "big"
    assert cluster.place(objects.pod("q", cpu="12"))[0] == "big"
    assert _message(cluster, objects.pod("r", cpu="3")) == "0/2 nodes are available: 2 Insufficient cpu."
    # More than any node has, even empty: it does not wait for room that cannot come.
    assert _message(cluster, objects.pod("s", cpu=None, memory="100Gi")) == (
        "0/2 nodes are available: 2 Insufficient memory. Never fits as the cluster is: it asks memory 100Gi and"
        " nodes have at most 64Gi; it fits once a node large enough joins, or it asks for less."
    )


def test_the_pods_allocatable_counts() -> None:
    cluster = Cluster([objects.node("a", pods="2")])
    cluster.place(objects.pod("p1"))
    cluster.place(objects.pod("p2"))
    assert _message(cluster, objects.pod("p3")) == "0/1 nodes are available: 1 Insufficient pods."


def test_an_unknown_extended_resource_fits_nowhere_and_is_named() -> None:
    cluster = Cluster([objects.node("a"), objects.node("b"), objects.node("c", extra={"rdma/hca": "1"})])
    never = (
        "0/3 nodes are available: 3 Insufficient example.com/foo. Never fits as the cluster is: it asks"
        " example.com/foo 1 and nodes have none; it fits once a node large enough joins, or it asks for less."
    )
    assert _message(cluster, objects.pod("p", extra={"example.com/foo": "1"})) == never
    assert _message(cluster, objects.pod("q", extra={"example.com/foo": "1"})) == never
    # Nothing else broke: the next pods schedule, known extended resources included.
    assert cluster.place(objects.pod("r", extra={"rdma/hca": "1"}))[0] == "c"
    assert cluster.place(objects.pod("s"))[0] == "a"


def test_the_diagnosis_counts_nodes_per_reason() -> None:
    cluster = Cluster(
        [
            objects.node("a100x1", gpus=1, product="NVIDIA-A100-SXM4-80GB"),
            objects.node("h100x8", gpus=8, product="NVIDIA-H100-80GB-HBM3"),
            objects.node("cpu"),
        ]
    )
    assert _message(cluster, objects.pod("p", gpus=2, models="A100")) == (
        "0/3 nodes are available: 2 Insufficient nvidia.com/gpu, 1 GPU model not allowed. Never fits as the cluster"
        " is: it asks 2 GPUs on one node and the nodes it may use have at most 1; of the nodes with room for it, 1"
        " GPU model not allowed; it fits there once it allows their GPU model (it asks A100)."
    )


def test_the_gpu_model_filter() -> None:
    cluster = Cluster(
        [
            objects.node("a10", gpus=4, product="NVIDIA-A10"),
            objects.node("unlabelled", gpus=4),
            objects.node("a100", gpus=4, product="NVIDIA-A100-SXM4-80GB"),
            objects.node("h100", gpus=4, product="NVIDIA-H100-80GB-HBM3"),
        ]
    )
    assert cluster.place(objects.pod("p", gpus=1, models="A100"))[0] == "a100"
    assert cluster.place(objects.pod("q", milli=500, models="H100|A100"))[0] in {"a100", "h100"}
    assert cluster.place(objects.pod("r", gpus=1))[0] == "a10"  # no models: any GPU
    assert _message(cluster, objects.pod("s", gpus=1, models="V100")) == (
        "0/4 nodes are available: 4 GPU model not allowed. Never fits as the cluster is: of the nodes with room for"
        " it, 4 GPU model not allowed; it fits there once it allows their GPU model (it asks V100)."
    )


def test_whole_gpus_need_fully_free_devices() -> None:
    cluster = Cluster(
        [objects.node("a", gpus=2)],
        bound=[objects.pod("busy", node_name="a", milli=100, annotations={"gpusched.io/gpu-ids": "0"})],
    )
    assert _message(cluster, objects.pod("p", gpus=2)) == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    assert cluster.place(objects.pod("q", gpus=1)) == ("a", (1,))


def test_a_shared_gpu_needs_one_device_with_the_share_and_the_memory() -> None:
    cluster = Cluster(
        [objects.node("a", gpus=2, gpu_memory_mib="16384")],
        bound=[
            objects.pod("x", node_name="a", milli=600, gpu_memory="4Gi", annotations={"gpusched.io/gpu-ids": "0"}),
            objects.pod("y", node_name="a", milli=200, gpu_memory="14Gi", annotations={"gpusched.io/gpu-ids": "1"}),
        ],
    )
    # Device 0: 400 milli and 12Gi free; device 1: 800 milli and 2Gi free.
    assert _message(cluster, objects.pod("p", milli=900)) == "0/1 nodes are available: 1 no GPU with enough free share."
    assert _message(cluster, objects.pod("q", milli=500, gpu_memory="8Gi")) == (
        "0/1 nodes are available: 1 Insufficient GPU memory."
    )
    assert cluster.place(objects.pod("r", milli=300, gpu_memory="8Gi")) == ("a", (0,))


def test_gpu_memory_is_no_constraint_on_a_node_whose_device_memory_is_unknown() -> None:
    cluster = Cluster([objects.node("a", gpus=1)])
    assert cluster.place(objects.pod("p", milli=300, gpu_memory="40Gi")) == ("a", (0,))
    assert cluster.place(objects.pod("q", milli=300, gpu_memory="40Gi")) == ("a", (0,))


def test_taints_keep_out_pods_that_do_not_tolerate_them() -> None:
    taint = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    # Both nodes fit a tolerant pod: ties go to the first node by name.
    cluster = Cluster(
        [
            objects.node("a-tainted", taints=[taint]),
            objects.node("b-soft", taints=[{"key": "spot", "effect": "PreferNoSchedule"}], cpu="4"),
        ]
    )
    assert cluster.place(objects.pod("p"))[0] == "b-soft"  # PreferNoSchedule does not filter
    tolerant = [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]
    assert cluster.place(objects.pod("q", tolerations=tolerant))[0] == "a-tainted"
    assert _message(cluster, objects.pod("r", cpu="8")) == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: ml}. Never fits as"
        " the cluster is: it asks cpu 8 and the nodes it may use have at most 4; of the nodes with room for it, 1"
        " node(s) had untolerated taint {dedicated: ml}; it fits there once it tolerates dedicated=ml:NoSchedule (or"
        " the taint is removed)."
    )
    assert cluster.place(objects.pod("s", cpu="8", tolerations=[{"operator": "Exists"}]))[0] == "a-tainted"


def test_a_taint_removed_by_a_node_update_no_longer_filters() -> None:
    from scheduler.api.objects import node as api_node

    cluster = Cluster([objects.node("a", taints=[{"key": "k", "effect": "NoExecute"}])])
    assert "untolerated taint" in _message(cluster, objects.pod("p"))
    cluster.cache.upsert_node(api_node.parse_node(objects.node("a")))
    assert cluster.place(objects.pod("p"))[0] == "a"


def test_node_selector() -> None:
    cluster = Cluster([objects.node("a"), objects.node("b", labels={"pool": "gpu"}), objects.node("c")])
    assert cluster.place(objects.pod("p", node_selector={"pool": "gpu"}))[0] == "b"
    assert _message(cluster, objects.pod("q", node_selector={"pool": "cpu"})) == (
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. Never fits as the cluster is:"
        " of the nodes with room for it, 3 node(s) didn't match Pod's node affinity/selector; it fits there once a"
        " node is labelled pool=cpu (no node has that label)."
    )


@pytest.mark.parametrize(
    ("terms", "where"),
    [
        ([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}], {"b1"}),
        ([{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a", "b"]}]}], {"none"}),
        ([{"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}], {"none"}),
        ([{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}], {"a1", "b1"}),
        ([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["b1"]}]}], {"a1", "none"}),
        ([{"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["4"]}]}], {"b1"}),
        ([{"matchExpressions": [{"key": "gpus", "operator": "Lt", "values": ["8"]}]}], {"a1"}),
        ([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["none"]}]}], {"none"}),
        (
            [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]},
                {
                    "matchExpressions": [
                        {"key": "zone", "operator": "Exists"},
                        {"key": "gpus", "operator": "Lt", "values": ["5"]},
                    ]
                },
            ],
            {"a1"},
        ),
    ],
)
def test_required_node_affinity(terms: list[dict[str, Any]], where: set[str]) -> None:
    nodes = [
        objects.node("a1", labels={"zone": "a", "gpus": "4"}),
        objects.node("b1", labels={"zone": "b", "gpus": "8"}),
        objects.node("none"),
    ]
    cluster = Cluster(nodes, ["fit", "spread"])  # spread: the pods visit every node they may use
    placed = {cluster.place(objects.pod(f"p{i}", affinity=terms))[0] for i in range(4)}
    assert placed == where


def test_cordoned_nodes_take_nothing() -> None:
    cluster = Cluster([objects.node("a", unschedulable=True), objects.node("b", cpu="1")])
    # A cordon is lifted after maintenance: the pod waits for it (no "Never fits").
    assert _message(cluster, objects.pod("p", cpu="2")) == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) were unschedulable."
    )


def test_an_empty_cluster() -> None:
    assert _message(Cluster([]), objects.pod("p")) == "0/0 nodes are available."


def test_a_removed_node_is_not_counted() -> None:
    cluster = Cluster([objects.node("a", cpu="1"), objects.node("b", cpu="1")])
    cluster.cache.remove_node("a")
    assert _message(cluster, objects.pod("p", cpu="2")).startswith("0/1 nodes are available: 1 Insufficient cpu.")


def test_the_parallel_twin_is_chosen_by_the_nodes_not_by_the_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    # The cache's arrays grow by doubling: 70 nodes live in 128 slots. Which twin runs must follow the 70 (a
    # cluster of 5,000 nodes in 8,192 slots ran fit on every core, on a machine where that is slower).
    from scheduler.kernels import _jit
    from scheduler.kernels import fit as fit_kernel

    cluster = Cluster([objects.node(f"n{i:02d}") for i in range(70)])
    assert cluster.cache.arrays.slots == 128
    serial, parallel = fit_kernel._FIT
    called: list[str] = []

    def spy(name: str, twin: Any) -> Any:
        def run(*args: Any) -> Any:
            called.append(name)
            return twin(*args)

        return run

    monkeypatch.setattr(fit_kernel, "_FIT", (spy("serial", serial), spy("parallel", parallel)))
    monkeypatch.setattr(_jit, "PARALLEL_MIN_NODES", 100)
    assert cluster.place(objects.pod("p", cpu="1"))[0] is not None
    monkeypatch.setattr(_jit, "PARALLEL_MIN_NODES", 70)
    assert cluster.place(objects.pod("q", cpu="1"))[0] is not None
    assert called == ["serial", "parallel"]


def test_nodes_that_share_their_taints_are_each_filtered_by_them() -> None:
    # The filter asks once per distinct set of taints: nodes of one pool share theirs, and some nodes have none.
    gpu = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    dedicated = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    nodes = [objects.node(f"pool-{i}", cpu="4", taints=[gpu]) for i in range(3)]
    nodes += [objects.node(f"ml-{i}", cpu="4", taints=[gpu, dedicated]) for i in range(2)]
    soft = {**gpu, "effect": "PreferNoSchedule"}
    nodes += [objects.node("plain", cpu="4"), objects.node("soft", cpu="4", taints=[soft])]
    cluster = Cluster(nodes)
    gpu_only = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert _message(cluster, objects.pod("big", cpu="8", tolerations=gpu_only)).startswith(
        "0/7 nodes are available: 5 Insufficient cpu, 2 node(s) had untolerated taint {dedicated: ml}."
    )
    # kube-scheduler names each node's first taint not tolerated.
    assert _message(cluster, objects.pod("none", cpu="8")).startswith(
        "0/7 nodes are available: 5 node(s) had untolerated taint {nvidia.com/gpu: }, 2 Insufficient cpu."
    )
    placed = {cluster.place(objects.pod(f"g{i}", cpu="3", tolerations=gpu_only))[0] for i in range(5)}
    assert placed == {"pool-0", "pool-1", "pool-2", "plain", "soft"}  # never ml-*
    assert cluster.place(objects.pod("all", cpu="3", tolerations=[{"operator": "Exists"}]))[0].startswith("ml-")
