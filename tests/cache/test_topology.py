"""The cache's topology: each node's domain per level as arrays, kept right through relabelling, node removal
and a new Topology; each node's GPU topology from its annotation; per-GPU usage rebuilt after a restart."""

from __future__ import annotations

from typing import Any

import numpy as np

from scheduler.api.crds import topology
from scheduler.api.devices import gputopo
from scheduler.api.objects import node as api_node
from scheduler.api.objects import pod as api_pod
from scheduler.cache.state import Cache
from tests.api import objects

BLOCK, RACK, CLIQUE = topology.LABEL_BLOCK, topology.LABEL_RACK, topology.LABEL_CLIQUE


def _node(name: str, **labels: str) -> dict[str, Any]:
    keys = {"block": BLOCK, "rack": RACK, "clique": CLIQUE}
    return objects.node(name, gpus=8, labels={keys[k]: v for k, v in labels.items()})


def _ids(cache: Cache, node: str) -> list[int]:
    slot = cache.slot_of(node)
    assert slot is not None
    return cache.domain_ids()[slot].tolist()


def _cache(*raws: dict[str, Any]) -> Cache:
    cache = Cache()
    for raw in raws:
        cache.upsert_node(api_node.parse_node(raw))
    return cache


def test_each_node_has_a_domain_per_level_and_unlabelled_nodes_are_outside() -> None:
    cache = _cache(
        _node("a", block="b1", rack="r1", clique="c1"),
        _node("b", block="b1", rack="r1", clique="c2"),
        _node("c", block="b1", rack="r2"),
        _node("d"),
    )
    ids = cache.domain_ids()
    assert ids.shape[1] == 4
    assert _ids(cache, "a")[:3] == [0, 0, 0]
    assert _ids(cache, "b")[:3] == [0, 0, 1]
    assert _ids(cache, "c")[:3] == [0, 1, -1]
    assert _ids(cache, "d")[:3] == [-1, -1, -1]
    # Every node has a hostname: one host domain each.
    assert len({_ids(cache, n)[3] for n in "abcd"}) == 4
    assert cache.domains().unlabelled(CLIQUE) == ("c", "d")
    # Empty slots are outside everything.
    present = [cache.slot_of(n) for n in "abcd"]
    assert (np.delete(ids, present, axis=0) == -1).all()


def test_relabelling_a_node_moves_it_to_its_new_domain() -> None:
    cache = _cache(_node("a", block="b1", rack="r1"), _node("b", block="b1", rack="r2"))
    assert _ids(cache, "a")[1] != _ids(cache, "b")[1]
    cache.upsert_node(api_node.parse_node(_node("a", block="b1", rack="r2")))
    assert _ids(cache, "a")[1] == _ids(cache, "b")[1]
    cache.upsert_node(api_node.parse_node(_node("a", block="b1")))
    assert _ids(cache, "a")[1] == -1


def test_removed_nodes_leave_their_domains_and_new_nodes_join() -> None:
    cache = _cache(_node("a", rack="r1"), _node("b", rack="r2"))
    slot = cache.slot_of("a")
    cache.remove_node("a")
    assert cache.domain_ids()[slot].tolist() == [-1, -1, -1, -1]
    cache.upsert_node(api_node.parse_node(_node("c", rack="r1")))
    assert cache.domains().domain_count(RACK) == 2


def test_a_new_topology_changes_the_levels() -> None:
    cache = _cache(objects.node("a", labels={"example.com/pod": "p1"}), objects.node("b"))
    spec = topology.parse_topology(
        {"metadata": {"name": "default"}, "spec": {"levels": [{"name": "pod", "nodeLabel": "example.com/pod"}]}}
    )
    cache.set_topology(spec)
    assert cache.domain_ids().shape[1] == 1
    assert _ids(cache, "a") == [0] and _ids(cache, "b") == [-1]
    cache.set_topology(topology.DEFAULT_TOPOLOGY)
    assert cache.domain_ids().shape[1] == 4


PAIRS = gputopo.to_annotation(
    gputopo.GpuTopology.of(
        [
            gputopo.Gpu(0, numa=0, nvlink=((1, 2),)),
            gputopo.Gpu(1, numa=0, nvlink=((0, 2),)),
            gputopo.Gpu(2, numa=1, nvlink=((3, 2),)),
            gputopo.Gpu(3, numa=1, nvlink=((2, 2),)),
        ]
    )
)


def test_a_nodes_gpu_topology_comes_from_its_annotation() -> None:
    cache = _cache(objects.node("a", gpus=4, annotations={gputopo.ANNOTATION: PAIRS}), objects.node("b", gpus=4))
    topo = cache.gpu_topology(cache.slot_of("a") or 0)
    assert topo is not None and topo.link[0, 1] == gputopo.Link.NVLINK
    assert cache.gpu_topology(cache.slot_of("b") or 0) is None
    assert not cache.gpu_topology_problems


def test_a_bad_annotation_is_reported_and_the_gpus_are_treated_as_unknown() -> None:
    cache = _cache(
        objects.node("a", gpus=4, annotations={gputopo.ANNOTATION: "{nope"}),
        objects.node("b", gpus=8, annotations={gputopo.ANNOTATION: PAIRS}),
    )
    assert cache.gpu_topology(cache.slot_of("a") or 0) is None
    assert cache.gpu_topology(cache.slot_of("b") or 0) is None
    assert set(cache.gpu_topology_problems) == {"a", "b"}
    assert "describes 4 GPUs but the node has 8" in str(cache.gpu_topology_problems["b"])
    assert cache.gpu_topology_problems["a"].field == f"metadata.annotations[{gputopo.ANNOTATION}]"
    # Fixing the annotation clears the problem.
    cache.upsert_node(api_node.parse_node(objects.node("a", gpus=4, annotations={gputopo.ANNOTATION: PAIRS})))
    assert "a" not in cache.gpu_topology_problems and cache.gpu_topology(cache.slot_of("a") or 0) is not None


def test_per_gpu_usage_is_rebuilt_from_gpu_ids_after_a_restart() -> None:
    node = objects.node("a", gpus=8)
    pods = [
        objects.pod("x", gpus=2, node_name="a", annotations={"gpusched.io/gpu-ids": "6,7"}),
        objects.pod("y", gpus=1, node_name="a", annotations={"gpusched.io/gpu-ids": "3"}),
        objects.pod("z", milli=500, node_name="a", annotations={"gpusched.io/gpu-ids": "5"}),
    ]
    restarted = _cache(node)
    for raw in pods:
        restarted.upsert_pod(api_pod.parse_pod(raw))
    slot = restarted.slot_of("a") or 0
    assert restarted.arrays.gpu_free[slot, :8].tolist() == [1000, 1000, 1000, 0, 1000, 500, 0, 0]
    # The pods arrive before the node after a restart too: the same devices once the node is seen.
    early = Cache()
    for raw in pods:
        early.upsert_pod(api_pod.parse_pod(raw))
    early.upsert_node(api_node.parse_node(node))
    assert early.arrays.gpu_free[early.slot_of("a") or 0, :8].tolist() == [1000, 1000, 1000, 0, 1000, 500, 0, 0]
