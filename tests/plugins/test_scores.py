"""Score plugins choose between nodes that all fit: each one's preference, on a cluster small enough to check by
hand."""

from __future__ import annotations

import numpy as np

from scheduler.framework import typical
from tests.api import objects
from tests.core.harness import Cluster


def test_binpack_and_spread_choose_opposite_nodes() -> None:
    nodes = [objects.node("empty", cpu="16"), objects.node("half", cpu="16")]
    bound = [objects.pod("u", node_name="half", cpu="8", memory="64Gi")]
    pod = objects.pod("p", cpu="2", memory="4Gi")
    assert Cluster(nodes, ["fit", "binpack"], bound=bound).place(pod)[0] == "half"
    assert Cluster(nodes, ["fit", "spread"], bound=bound).place(pod)[0] == "empty"


def test_binpack_fills_gpus_on_the_busier_node() -> None:
    nodes = [objects.node("idle", gpus=8), objects.node("busy", gpus=8)]
    bound = [objects.pod("u", node_name="busy", gpus=4)]
    assert Cluster(nodes, ["fit", "gpu", "binpack"], bound=bound).place(objects.pod("p", gpus=2)) == ("busy", (4, 5))
    assert Cluster(nodes, ["fit", "gpu", "spread"], bound=bound).place(objects.pod("p", gpus=2)) == ("idle", (0, 1))


def test_scarce_avoidance_keeps_cpu_pods_off_gpu_nodes() -> None:
    nodes = [objects.node("a-gpu", gpus=8, gpu_memory_mib="81920"), objects.node("b-cpu")]
    cluster = Cluster(nodes, ["fit", "gpu", "scarce_avoidance"])
    assert cluster.place(objects.pod("web", cpu="4"))[0] == "b-cpu"
    assert cluster.place(objects.pod("train", cpu="4", gpus=1))[0] == "a-gpu"
    # Without it, the first node (by name) wins the tie.
    assert Cluster(nodes, ["fit", "gpu"]).place(objects.pod("web", cpu="4"))[0] == "a-gpu"


def test_fgd_prefers_the_placement_that_leaves_less_fragmentation() -> None:
    # Typical pods, half each: a 500-milli shared GPU and one whole GPU. Both nodes have one GPU; "partial" already
    # runs a 300-milli pod. The new pod asks for 200 milli.
    #
    # Fragmentation F = sum over typical pods of weight x (idle milli that pod could not use):
    #   empty:   before: 1000 free, both typical pods fit                          F = 0
    #            after:  800 free, the 500 pod fits, the whole GPU no longer does  F = 0.5 x 800 = 400
    #            drop = 0 - 400 = -400  -> score int(100 sigmoid(-0.4)) = 40
    #   partial: before: 700 free, the 500 pod fits, the whole GPU does not        F = 0.5 x 700 = 350
    #            after:  500 free, the 500 pod still fits                          F = 0.5 x 500 = 250
    #            drop = 350 - 250 = +100 -> score int(100 sigmoid(0.1)) = 52
    # FGD takes "partial" and keeps a whole GPU free; spread would take "empty".
    nodes = [objects.node("empty", gpus=1), objects.node("partial", gpus=1)]
    bound = [objects.pod("u", node_name="partial", cpu="1", milli=300)]
    typical = [{"milli": 500, "gpus": 1}, {"milli": 1000, "gpus": 1}]
    cluster = Cluster(nodes, ["fit", "gpu", {"name": "fgd", "args": {"typical": typical}}], bound=bound)
    result = cluster.schedule(objects.pod("p", cpu="1", milli=200))
    assert result.decision is not None and result.state is not None
    assert result.decision.node == "partial"
    np.testing.assert_allclose(result.state.data["fgd.delta"], [-400.0, 100.0])
    assert Cluster(nodes, ["fit", "gpu", "spread"], bound=bound).place(objects.pod("p", milli=200))[0] == "empty"


def test_fgd_learns_typical_pods_from_the_cluster() -> None:
    # With minPods 1 it learns from the one pod running: 1 CPU and 600 milli of one GPU, which becomes the only
    # typical pod. A 400-milli pod then:
    #   empty:   1000 free -> 600: the typical pod still fits, F stays 0             drop 0    -> score 50
    #   partial: 400 free (a fragment: the typical pod cannot use it), F = 400 -> 0  drop +400 -> score 59
    nodes = [objects.node("empty", gpus=1), objects.node("partial", gpus=1)]
    bound = [objects.pod("u", node_name="partial", cpu="1", milli=600)]
    cluster = Cluster(nodes, ["fit", "gpu", {"name": "fgd", "args": {"minPods": 1}}], bound=bound)
    assert cluster.place(objects.pod("p", milli=400)) == ("partial", (0,))
    (fgd,) = [scorer[0] for scorer in cluster.framework.scorers if scorer[0].name == "fgd"]
    assert fgd.shapes == [typical.Shape(1000.0, 600.0, 1, (), 1.0)]


def test_balance_puts_a_cpu_heavy_pod_where_cpu_is_left_over() -> None:
    nodes = [objects.node("cpu-busy", cpu="32", gpus=4), objects.node("gpu-busy", cpu="32", gpus=4)]
    bound = [
        objects.pod("c", node_name="cpu-busy", cpu="24"),
        objects.pod("g", node_name="gpu-busy", cpu="1", gpus=3),
    ]
    cluster = Cluster(nodes, ["fit", "gpu", "balance"], bound=bound)
    assert cluster.place(objects.pod("p", cpu="6", memory="8Gi"))[0] == "gpu-busy"
    assert cluster.place(objects.pod("q", cpu="1", gpus=2))[0] == "cpu-busy"


def test_resource_strategy_packs_gpus_and_spreads_cpu() -> None:
    nodes = [objects.node("a", cpu="32", gpus=8), objects.node("b", cpu="32", gpus=8)]
    bound = [objects.pod("u", node_name="b", cpu="1", gpus=4), objects.pod("v", node_name="a", cpu="4")]
    cluster = Cluster(nodes, ["fit", "gpu", "resource_strategy"], bound=bound)
    assert cluster.place(objects.pod("gpu-pod", cpu="1", gpus=1))[0] == "b"  # GPUs MostAllocated, weight 3
    assert cluster.place(objects.pod("cpu-pod", cpu="1"))[0] == "b"  # CPU LeastAllocated: b has more CPU free


def test_bestfit_and_dotprod_prefer_the_tighter_node() -> None:
    nodes = [objects.node("roomy", cpu="64", gpus=8), objects.node("tight", cpu="16", gpus=2)]
    pod = objects.pod("p", cpu="8", gpus=1)
    assert Cluster(nodes, ["fit", "gpu", "bestfit"]).place(pod)[0] == "tight"
    assert Cluster(nodes, ["fit", "gpu", "dotprod"]).place(pod)[0] == "tight"
