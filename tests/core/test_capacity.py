"""Waits or never fits: a pod that fits nowhere is told which, from the cycle's own filter results and the nodes'
capacity, and what would change it."""

from __future__ import annotations

import numpy as np

from scheduler.api.objects import pod as api_pod
from scheduler.core import capacity, gang
from scheduler.core.cycle import EMPTY, Context
from tests.api import objects
from tests.core.harness import Cluster


def _message(cluster: Cluster, raw: dict[str, object], context: Context = EMPTY) -> str:
    result = cluster.scheduler.place(api_pod.parse_pod(raw), cluster.cache.snapshot(), context)
    assert result.decision is None
    return result.status.message


def test_a_pod_that_fits_an_empty_node_waits() -> None:
    cluster = Cluster([objects.node("a", gpus=8)], bound=[objects.pod("busy", gpus=8, node_name="a")])
    assert _message(cluster, objects.pod("p", gpus=4)) == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def test_a_node_held_for_another_job_is_one_it_may_use_later() -> None:
    cluster = Cluster([objects.node("a", gpus=8)])
    held = Context(reserved=np.ones(cluster.cache.arrays.slots, dtype=bool))
    assert _message(cluster, objects.pod("p", gpus=4), held) == (
        "0/1 nodes are available: 1 node(s) reserved for a waiting job."
    )


def test_shared_gpu_memory_beyond_every_device_never_fits() -> None:
    cluster = Cluster([objects.node("a", gpus=2, gpu_memory_mib="40960")])
    message = _message(cluster, objects.pod("p", gpus=1, milli=500, gpu_memory="80Gi"))
    assert message.endswith(
        "Never fits as the cluster is: it asks 80Gi of memory on one GPU and the GPUs of nodes have at most 40Gi; it"
        " fits once a node large enough joins, or it asks for less."
    ), message


def test_a_required_affinity_label_no_node_has_is_named() -> None:
    cluster = Cluster([objects.node("a", labels={"zone": "a"}), objects.node("b", labels={"zone": "b"})])
    terms = [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["c"]}]}]
    assert _message(cluster, objects.pod("p", affinity=terms)).endswith(
        "it fits there once a node is labelled zone=c (no node has that label)."
    )
    # A label some node has, on a node too small: the size is what never fits, not the label.
    terms = [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]
    assert "it asks cpu 64 and the nodes it may use have at most 32" in _message(
        cluster, objects.pod("q", cpu="64", affinity=terms)
    )


def test_nodes_with_room_behind_a_taint_say_what_to_tolerate() -> None:
    taint = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    cluster = Cluster([objects.node("small", gpus=4), objects.node("big", gpus=8, taints=[taint])])
    message = _message(cluster, objects.pod("p", gpus=8))
    assert message == (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint {dedicated: ml}."
        " Never fits as the cluster is: it asks 8 GPUs on one node and the nodes it may use have at most 4; of the"
        " nodes with room for it, 1 node(s) had untolerated taint {dedicated: ml}; it fits there once it tolerates"
        " dedicated=ml:NoSchedule (or the taint is removed)."
    )


def test_a_gang_never_fits_when_its_members_cannot_have_nodes_at_once() -> None:
    cluster = Cluster([objects.node("a", gpus=8), objects.node("b", gpus=4)])
    members = [api_pod.parse_pod(objects.pod(f"m{i}", gpus=8)) for i in range(2)]
    assert gang.never_fits(cluster.cache.snapshot(), members) == (
        f"{capacity.NEVER}: the job needs 16 whole GPUs and the cluster has 12 in all (at most 8 on a node); it fits"
        " once nodes join, or it asks for fewer members or GPUs."
    )
    members = [api_pod.parse_pod(objects.pod(f"m{i}", gpus=6)) for i in range(2)]
    assert "2 member(s) need 6+ whole GPUs on one node and the nodes have room for 1 such group(s)" in (
        gang.never_fits(cluster.cache.snapshot(), members)
    )
    members = [api_pod.parse_pod(objects.pod(f"m{i}", gpus=4)) for i in range(3)]
    assert gang.never_fits(cluster.cache.snapshot(), members) == ""


def test_the_taint_named_follows_the_nodes_updates() -> None:
    from scheduler.api.objects import node as api_node

    cluster = Cluster([objects.node("a", gpus=8, taints=[{"key": "one", "value": "1", "effect": "NoSchedule"}])])
    assert "untolerated taint {one: 1}" in _message(cluster, objects.pod("p", gpus=1))
    cluster.cache.upsert_node(
        api_node.parse_node(objects.node("a", gpus=8, taints=[{"key": "two", "value": "", "effect": "NoExecute"}]))
    )
    message = _message(cluster, objects.pod("p", gpus=1))
    assert "untolerated taint {two: }" in message and "one" not in message
    assert message.endswith("it fits there once it tolerates two:NoExecute (or the taint is removed).")
    cluster.cache.remove_node("a")
    cluster.cache.upsert_node(api_node.parse_node(objects.node("b", gpus=8)))
    assert cluster.place(objects.pod("p", gpus=1))[0] == "b"
