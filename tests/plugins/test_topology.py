"""Device choice and node scoring on real GPU topologies (the nvidia-smi samples): a multi-GPU pod gets the
tightest set on its node, a single GPU avoids breaking whole tight groups, and nodes where the request fits a
tight set win; nodes without the annotation keep the lowest-index devices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from scheduler.api.devices import gputopo, nvidia_smi
from scheduler.api.objects import pod as api_pod
from scheduler.framework.interface import CycleState
from scheduler.plugins import topology as topology_plugin
from tests.api import objects
from tests.core.harness import Cluster

DATA = Path(__file__).resolve().parents[1] / "api" / "data" / "nvidia-smi"
PROFILE = ("fit", "gpu", "topology")


def _annotation(sample: str) -> str:
    return gputopo.to_annotation(nvidia_smi.read((DATA / sample).read_text()))


def _node(name: str, sample: str | None, gpus: int) -> dict[str, Any]:
    annotations = {gputopo.ANNOTATION: _annotation(sample)} if sample else {}
    return objects.node(name, cpu="64", gpus=gpus, annotations=annotations)


def _bound(name: str, node: str, ids: str) -> dict[str, Any]:
    count = len(ids.split(","))
    return objects.pod(name, gpus=count, node_name=node, annotations={"gpusched.io/gpu-ids": ids})


def test_two_gpus_on_the_nvlink_pairs_node_take_a_pair() -> None:
    topo = nvidia_smi.read((DATA / "nvlink-pairs-4gpu.txt").read_text())
    # Two 2-GPU pods: each gets a whole NVLink pair, never one GPU of each.
    cluster = Cluster([_node("n", "nvlink-pairs-4gpu.txt", 4)], PROFILE)
    _, ids = cluster.place(objects.pod("p", gpus=2))
    assert topo.link[ids[0], ids[1]] == gputopo.Link.NVLINK
    _, ids = cluster.place(objects.pod("q", gpus=2))
    assert topo.link[ids[0], ids[1]] == gputopo.Link.NVLINK


def test_a_single_gpu_leaves_the_free_nvlink_pair_whole() -> None:
    topo = nvidia_smi.read((DATA / "nvlink-pairs-4gpu.txt").read_text())
    pair = next(g.gpus for g in topo.groups if g.link == gputopo.Link.NVLINK)
    other = sorted(set(range(4)) - set(pair))
    # One GPU of the other pair is busy: a one-GPU pod takes its partner, not half of the free pair.
    cluster = Cluster([_node("n", "nvlink-pairs-4gpu.txt", 4)], PROFILE, bound=[_bound("busy", "n", str(other[0]))])
    _, ids = cluster.place(objects.pod("p", gpus=1))
    assert ids == (other[1],)


def test_four_gpus_on_the_pcie_node_stay_on_one_numa_node() -> None:
    topo = nvidia_smi.read((DATA / "pcie-l40s-2numa.txt").read_text())
    numa = [g.numa for g in topo.gpus]
    cluster = Cluster([_node("n", "pcie-l40s-2numa.txt", 8)], PROFILE, bound=[_bound("busy", "n", "0")])
    _, ids = cluster.place(objects.pod("p", gpus=4))
    assert len({numa[i] for i in ids}) == 1 and numa[ids[0]] != numa[0]


def test_single_gpus_on_the_nvswitch_node_fill_one_numa_node_first() -> None:
    topo = nvidia_smi.read((DATA / "hgx-h100-nvswitch.txt").read_text())
    numa = [g.numa for g in topo.gpus]
    cluster = Cluster([_node("n", "hgx-h100-nvswitch.txt", 8)], PROFILE)
    taken = [cluster.place(objects.pod(f"p{i}", gpus=1))[1][0] for i in range(4)]
    assert len({numa[i] for i in taken}) == 1


def test_without_the_annotation_devices_are_the_lowest_free_ones() -> None:
    cluster = Cluster([_node("n", None, 4)], PROFILE, bound=[_bound("busy", "n", "1")])
    assert cluster.place(objects.pod("p", gpus=2))[1] == (0, 2)


def test_a_multi_gpu_pod_prefers_the_node_where_it_fits_an_nvlink_pair() -> None:
    # Node "a" (first by slot) has one GPU of each pair busy: 2 free GPUs joined only across sockets.
    # Node "b" has a whole pair free. The pod goes to "b" and lands on NVLink.
    topo = nvidia_smi.read((DATA / "nvlink-pairs-4gpu.txt").read_text())
    pairs = [g.gpus for g in topo.groups if g.link == gputopo.Link.NVLINK]
    halves = f"{pairs[0][0]},{pairs[1][0]}"
    cluster = Cluster(
        [_node("a", "nvlink-pairs-4gpu.txt", 4), _node("b", "nvlink-pairs-4gpu.txt", 4)],
        PROFILE,
        bound=[_bound("x", "a", halves), _bound("y", "b", ",".join(str(g) for g in pairs[0]))],
    )
    node, ids = cluster.place(objects.pod("p", gpus=2))
    assert node == "b" and topo.link[ids[0], ids[1]] == gputopo.Link.NVLINK
    # Without the topology plugin the first node is taken, and its GPUs are loosely joined.
    plain = Cluster(
        [_node("a", "nvlink-pairs-4gpu.txt", 4), _node("b", "nvlink-pairs-4gpu.txt", 4)],
        ("fit", "gpu"),
        bound=[_bound("x", "a", halves), _bound("y", "b", ",".join(str(g) for g in pairs[0]))],
    )
    assert plain.place(objects.pod("p", gpus=2))[0] == "a"


def test_nodes_of_several_models_and_unknown_ones_are_scored_each_by_its_own_topology() -> None:
    # One cycle scores all nodes together: a node without the annotation, a PCIe node and two NVLink-pair nodes
    # (one with a whole pair free, listed last). The pod goes to the node offering NVLink, on a pair.
    topo = nvidia_smi.read((DATA / "nvlink-pairs-4gpu.txt").read_text())
    pairs = [g.gpus for g in topo.groups if g.link == gputopo.Link.NVLINK]
    halves = f"{pairs[0][0]},{pairs[1][0]}"
    nodes = [
        _node("u", None, 4),
        _node("p", "pcie-l40s-2numa.txt", 8),
        _node("a", "nvlink-pairs-4gpu.txt", 4),
        _node("b", "nvlink-pairs-4gpu.txt", 4),
    ]
    bound = [_bound("x", "a", halves), _bound("y", "b", ",".join(str(g) for g in pairs[0]))]
    node, ids = Cluster(nodes, PROFILE, bound=bound).place(objects.pod("q", gpus=2))
    assert node == "b" and topo.link[ids[0], ids[1]] == gputopo.Link.NVLINK


def test_every_node_scores_as_its_topology_and_free_gpus_alone_would_make_it() -> None:
    # The cycle's scores come from a table of free-GPU masks (nodes of up to 8 GPUs) or one score per distinct
    # (topology, mask) pair (larger nodes): each must be the score of that node taken alone, for every pod size.
    rng = np.random.default_rng(7)
    samples = {"nvlink-pairs-4gpu.txt": 4, "pcie-l40s-2numa.txt": 8, "hgx-h100-nvswitch.txt": 8}
    for wide in (False, True):
        nodes, bound = [], []
        for n in range(60):
            sample = list(samples)[n % 4] if n % 4 < 3 else None
            gpus = samples[sample] if sample else 8
            if wide and n == 59:
                sample, gpus = None, 16  # one node of 16 GPUs: masks wider than the table's
            nodes.append(_node(f"n{n}", sample, gpus))
            busy = [g for g in range(gpus) if rng.random() < 0.4]
            if busy:
                bound.append(_bound(f"b{n}", f"n{n}", ",".join(map(str, busy))))
        cluster = Cluster(nodes, PROFILE, bound=bound)
        snapshot = cluster.cache.snapshot()
        index, topologies = snapshot.gpu_topology_index()
        plugin = topology_plugin.Topology({})
        alone = topology_plugin.Topology({})
        slots = np.array([cluster.cache.slot_of(f"n{n}") for n in range(60)], dtype=np.int64)
        for k in (1, 2, 3, 4):
            pod = api_pod.parse_pod(objects.pod("p", gpus=k))
            state = CycleState(pod=pod, snapshot=snapshot, request=snapshot.request_vector(pod))
            out = np.full(slots.shape[0], -1.0)
            for _ in range(2):  # the second time from the filled table
                plugin.score(state, slots, out)
                expected = []
                for slot in slots.tolist():
                    topo = snapshot.gpu_topology(slot)
                    if topo is None:
                        expected.append(0.0)
                        continue
                    free = cluster.free_devices(str(cluster.cache.names[slot]))
                    mask = sum(1 << g for g, milli in enumerate(free[: len(topo)]) if milli >= 1000)
                    expected.append(alone._device_score(topo, mask, k))
                assert out.tolist() == expected, (wide, k)
        assert index.shape[0] >= len(slots) and len(topologies) == 3
