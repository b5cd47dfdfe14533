"""The dashboard's pages from the read-only view: the map readable at 5,000 nodes, its label filter, names hidden
from a viewer who may not see their namespace, and the static comparison page of the simulator."""

from __future__ import annotations

import dataclasses
import re

from scheduler.dashboard import pages, view


def node(
    name: str, *, block: str, rack: str | None, states: str, queue: str = "team", labels: dict[str, str] | None = None
) -> view.NodeView:
    """``states``: one letter a GPU, w whole, s shared, i idle, x stranded."""
    words = {"w": view.WHOLE, "s": view.SHARED, "i": view.IDLE, "x": view.STRANDED}
    cells = tuple(
        view.GpuCell(
            state=words[c],
            queue=queue if c in "ws" else "",
            pods=(f"ns-{name}/pod-{i}",) if c in "ws" else (),
        )
        for i, c in enumerate(states)
    )
    return view.NodeView(
        name=name, labels=labels or {"pool": block}, domains=(block,) if rack is None else (block, rack), cells=cells
    )


def big_cluster(nodes: int) -> view.ClusterMap:
    return view.ClusterMap(
        levels=("block", "rack"),
        nodes=tuple(
            node(f"n{i:05d}", block=f"b{i // 1000}", rack=f"r{i // 40}", states="wwwwiiix" if i % 2 else "iiiiiiii")
            for i in range(nodes)
        ),
    )


def test_a_small_cluster_shows_every_node_grouped_by_its_domains() -> None:
    cluster = view.ClusterMap(
        levels=("block", "rack"),
        nodes=(
            node("a", block="b1", rack="r1", states="wsix"),
            node("b", block="b1", rack="r2", states="iiii"),
        ),
    )
    text = pages.cluster_map(cluster, view.Redacted())
    assert re.findall(r"class=domain>([^<]*)<", text) == ["block=b1 / rack=r1", "block=b1 / rack=r2"]
    assert 'data-node="a"' in text and 'data-node="b"' in text
    assert "data-whole=1 data-shared=1 data-idle=5 data-stranded=1" in text
    assert "ns-a/pod-0" in text  # the pods holding a GPU, in its tooltip


def test_five_thousand_nodes_aggregate_to_one_row_per_block_and_open_one() -> None:
    cluster = big_cluster(5000)
    text = pages.cluster_map(cluster, view.Redacted())
    assert "data-node=" not in text
    rows = re.findall(r'<tr data-group="([^"]*)"', text)
    assert rows == [f"block=b{i}" for i in range(5)]
    assert "data-gpus=40000" in text and "data-whole=10000" in text and "data-stranded=2500" in text
    assert len(text) < 50_000
    one = pages.cluster_map(cluster, view.Redacted(), within="block=b3")
    # 1,000 nodes are still too many: the block's racks, one row each.
    assert re.findall(r'<tr data-group="([^"]*)"', one)[:2] == ["rack=r75", "rack=r76"]
    rack = pages.cluster_map(cluster, view.Redacted(), within="rack=r75")
    assert rack.count("data-node=") == 40


def test_without_topology_labels_runs_of_nodes_in_name_order() -> None:
    cluster = view.ClusterMap(
        levels=("block",),
        nodes=tuple(node(f"n{i:04d}", block="", rack=None, states="ii") for i in range(1000)),
    )
    text = pages.cluster_map(cluster, view.Redacted())
    rows = re.findall(r'<tr data-group="([^"]*)"', text)
    assert rows[0] == "#n0000-n0099" and len(rows) == 10
    assert pages.cluster_map(cluster, view.Redacted(), within="#n0100-n0199").count("data-node=") == 100


def test_the_label_filter_keeps_matching_nodes() -> None:
    cluster = view.ClusterMap(
        levels=("block", "rack"),
        nodes=(
            node("a", block="b1", rack="r1", states="ii", labels={"pool": "train", "gpu": "h100"}),
            node("b", block="b1", rack="r1", states="ii", labels={"pool": "serve", "gpu": "h100"}),
            node("c", block="b1", rack="r1", states="ii", labels={"pool": "train"}),
        ),
    )
    assert [n.name for n in pages.label_filter(cluster.nodes, "pool=train")] == ["a", "c"]
    assert [n.name for n in pages.label_filter(cluster.nodes, "pool=train,gpu")] == ["a"]
    assert "data-nodes=1 " in pages.cluster_map(cluster, view.Redacted(), label="pool=serve")


def test_a_viewer_sees_no_names_from_namespaces_it_may_not_list() -> None:
    cluster = view.ClusterMap(levels=("block",), nodes=(node("a", block="b", rack=None, states="w"),))
    viewer = view.Redacted(namespaces=frozenset({"mine"}))
    text = pages.cluster_map(cluster, viewer)
    assert "ns-a/pod-0" not in text and "(hidden)" in text
    jobs = [
        view.WaitingJob("pod/mine/p", "mine", "p", "pod", "q", "active", 1, "no room"),
        view.WaitingJob("pod/theirs/secret", "theirs", "secret", "pod", "q", "active", 2, "no room"),
    ]
    waiting = pages.waiting(jobs, viewer)
    assert "mine/p" in waiting and "secret" not in waiting and "1 more in namespaces you may not list" in waiting


def test_names_are_escaped() -> None:
    cluster = view.ClusterMap(levels=("block",), nodes=(node("<b>x</b>", block="<i>", rack=None, states="i"),))
    text = pages.cluster_map(cluster, view.Redacted())
    assert "<b>x" not in text and "&lt;b&gt;x&lt;/b&gt;" in text


def test_the_comparison_page_has_a_map_per_policy_and_no_script() -> None:
    small = view.ClusterMap(levels=("block",), nodes=(node("a", block="b", rack=None, states="wi"),))
    text = pages.comparison([("fgd", small), ("default", small)], title="a trace")
    assert re.findall(r'data-policy="([^"]*)"', text) == ["fgd", "default"]
    assert "<script>" not in text and "<form" not in text


def test_a_node_with_numa_zones_shows_each_zone_left_over_allocatable_and_the_policy() -> None:
    def amounts(cpu: str, gpus: str) -> tuple[view.ZoneAmount, ...]:
        return (
            view.ZoneAmount("cpu", cpu, "32"),
            view.ZoneAmount("memory", "256Gi", "256Gi"),
            view.ZoneAmount("nvidia.com/gpu", gpus, "4"),
        )

    zoned = dataclasses.replace(
        node("a", block="b1", rack=None, states="wwwiiiii"),
        zones=(view.ZoneView("node-0", amounts("29", "1")), view.ZoneView("node-1", amounts("32", "4"))),
        numa_policy="single-numa-node (container scope)",
    )
    cluster = view.ClusterMap(levels=("block",), nodes=(zoned, node("b", block="b1", rack=None, states="iiii")))
    text = pages.cluster_map(cluster, view.Redacted())
    assert text.count("class=zones") == 1  # b publishes no zones
    assert 'data-policy="single-numa-node (container scope)"' in text
    rows = re.findall(r'<tr data-zone="([^"]+)">(.*?)</tr>', text)
    assert [(zone, re.findall(r">([^<]+)</td>", cells)[1:]) for zone, cells in rows] == [
        ("node-0", ["cpu 29/32", "memory 256Gi/256Gi", "nvidia.com/gpu 1/4"]),
        ("node-1", ["cpu 32/32", "memory 256Gi/256Gi", "nvidia.com/gpu 4/4"]),
    ]
