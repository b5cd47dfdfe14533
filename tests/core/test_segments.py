"""A gang in segments: each segment of ``size`` members inside one domain of a level (an NVLink clique), the
segments one after the other on the same what-if, lowest index first."""

from __future__ import annotations

from collections import Counter

import pytest

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.crds import topology
from scheduler.api.crds.podgroup import PodGroup, parse_podgroup
from scheduler.api.crds.topology import TopologyConstraint
from scheduler.api.objects import pod as api_pod
from scheduler.core import gang
from tests.api import objects
from tests.core.harness import Cluster

PROFILE = ("fit", "gpu", {"name": "gang", "weight": 50}, "topology")


def _cliques(cliques: int, nodes: int, gpus: int = 4) -> Cluster:
    """``cliques`` NVLink cliques of ``nodes`` nodes of ``gpus`` GPUs, in racks of two cliques."""
    made = []
    for c in range(cliques):
        for n in range(nodes):
            labels = {topology.LABEL_CLIQUE: f"uuid.{c}", topology.LABEL_RACK: f"rack-{c // 2}"}
            made.append(objects.node(f"c{c}-n{n}", cpu="64", gpus=gpus, labels=labels))
    return Cluster(made, PROFILE)


def _members(group: str, count: int, gpus: int) -> list[api_pod.PodRequest]:
    return [
        api_pod.parse_pod(objects.pod(f"{group}-{i}", gpus=gpus, labels={"gpusched.io/pod-group": group}))
        for i in range(count)
    ]


def _clique_of(cluster: Cluster, node: str) -> str:
    slot = cluster.cache.slot_of(node)
    assert slot is not None
    return cluster.cache.nodes[slot].info.labels[topology.LABEL_CLIQUE]


def _segmented(name: str, count: int, size: int, **level: str) -> PodGroup:
    return PodGroup("default", name, min_member=count, segment_size=size, segment_topology=TopologyConstraint(**level))


def test_each_segment_lands_inside_one_clique() -> None:
    """6 cliques of 2 nodes x 4 GPUs; a gang of 8 members x 2 GPUs in 4 segments of 2, cut by the members' index
    (not their names, which order them otherwise): the members of each segment share a clique. Without segments the
    gang fills the cliques in its members' name order, and members 0 and 1 land in different cliques."""
    cluster = _cliques(cliques=6, nodes=2)
    index = [0, 2, 4, 6, 1, 3, 5, 7]  # of members seg-a, seg-b, ...
    members = [
        api_pod.parse_pod(
            objects.pod(
                f"seg-{chr(97 + i)}",
                gpus=2,
                labels={"gpusched.io/pod-group": "seg", "batch.kubernetes.io/job-completion-index": str(index[i])},
            )
        )
        for i in range(8)
    ]
    result = gang.place_gang(cluster.scheduler, _segmented("seg", 8, 2, required=topology.LABEL_CLIQUE), members)
    assert result.status.ok, result.status.message
    by_index = {int(d.pod.labels["batch.kubernetes.io/job-completion-index"]): d.node for d in result.decisions}
    for s in range(4):
        assert _clique_of(cluster, by_index[2 * s]) == _clique_of(cluster, by_index[2 * s + 1]), by_index


def test_a_segment_no_clique_can_hold_fails_the_gang_and_holds_nothing() -> None:
    """Segments of 3 members x 4 GPUs need 12 GPUs in one clique of 8: a required segment level never fits;
    preferred, the gang is placed anyway."""
    cluster = _cliques(cliques=4, nodes=2)
    members = _members("big", 6, 4)
    result = gang.place_gang(cluster.scheduler, _segmented("big", 6, 3, required=topology.LABEL_CLIQUE), members)
    assert not result.status.ok
    assert "segment 1 of 2 (3 members, 12 GPUs) fits in no" in result.status.message
    assert cluster.binder.decisions == []
    result = gang.place_gang(cluster.scheduler, _segmented("big", 6, 3, preferred=topology.LABEL_CLIQUE), members)
    assert result.status.ok


def test_segments_stay_as_close_as_possible_and_fill_cliques_whole() -> None:
    """8 cliques (4 racks of 2) of 2 x 4 GPUs, one GPU taken in each clique but those of rack-3: 2 segments of
    8 GPUs fill both cliques of rack-3 (the only whole cliques), rather than part of others."""
    cluster = _cliques(cliques=8, nodes=2)
    for c in range(6):
        cluster.place(objects.pod(f"small-{c}", gpus=1, node_selector={topology.LABEL_CLIQUE: f"uuid.{c}"}))
    result = gang.place_gang(
        cluster.scheduler, _segmented("two", 4, 2, required=topology.LABEL_CLIQUE), _members("two", 4, 4)
    )
    assert result.status.ok
    assert Counter(_clique_of(cluster, d.node) for d in result.decisions) == Counter({"uuid.6": 2, "uuid.7": 2})


@pytest.mark.parametrize(
    ("segments", "field"),
    [
        ({"size": 0, "required": "rack"}, "spec.segments.size"),
        ({"size": 4}, "spec.segments"),
        ({"size": 4, "required": "rack", "preferred": "block"}, "spec.segments"),
        ({"size": 4, "required": "not a level!"}, "spec.segments.required"),
        ({"size": 4, "within": "rack"}, "spec.segments.within"),
    ],
)
def test_bad_segments_name_the_field(segments: dict[str, object], field: str) -> None:
    raw = {"metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 8, "segments": segments}}
    with pytest.raises(InvalidObject) as caught:
        parse_podgroup(raw)
    assert caught.value.field == field


def test_segments_are_parsed() -> None:
    raw = {"metadata": {"name": "g"}, "spec": {"minMember": 8, "segments": {"size": 4, "required": "clique"}}}
    group = parse_podgroup(raw)
    assert (group.segment_size, group.segment_topology.required) == (4, "clique")
