"""Topology constraints: PodGroup ``spec.topology``, the pod annotations, and resolving levels by name or label."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.crds import topology
from scheduler.api.crds.podgroup import parse_podgroup
from scheduler.api.crds.topology import DEFAULT_TOPOLOGY, TopologyConstraint
from scheduler.api.objects.pod import parse_pod
from tests.api import objects


def _group(topo: Any) -> dict[str, Any]:
    return {"metadata": {"name": "g", "namespace": "ml"}, "spec": {"minMember": 2, "topology": topo}}


def test_a_podgroup_names_levels_by_name_or_node_label() -> None:
    group = parse_podgroup(_group({"required": "nvidia.com/gpu.clique", "preferred": "block"}))
    assert group.topology == TopologyConstraint(required="nvidia.com/gpu.clique", preferred="block")
    assert topology.resolve(DEFAULT_TOPOLOGY, group.topology, obj="podgroup ml/g") == (2, 0)


def test_a_podgroup_without_topology_has_no_constraint() -> None:
    group = parse_podgroup({"metadata": {"name": "g"}, "spec": {"minMember": 1}})
    assert not group.topology
    assert topology.resolve(DEFAULT_TOPOLOGY, group.topology, obj="podgroup default/g") == (None, None)


@pytest.mark.parametrize(
    ("topo", "field"),
    [
        ({"required": 3}, "spec.topology.required"),
        ({"preferred": "not a label!"}, "spec.topology.preferred"),
        ({"required": "rack", "preferred": "rack"}, "spec.topology.preferred"),
        ({"requird": "rack"}, "spec.topology.requird"),
        ("rack", "spec.topology"),
    ],
)
def test_malformed_topology_names_the_field(topo: Any, field: str) -> None:
    with pytest.raises(InvalidObject) as info:
        parse_podgroup(_group(topo))
    assert info.value.field == field
    assert "podgroup ml/g" in str(info.value)


def test_an_unknown_level_is_an_error_naming_the_field_and_the_known_levels() -> None:
    group = parse_podgroup(_group({"preferred": "rakc"}))
    with pytest.raises(InvalidObject) as info:
        topology.resolve(DEFAULT_TOPOLOGY, group.topology, obj="podgroup ml/g")
    assert info.value.field == "spec.topology.preferred"
    assert "'rakc' is not a level" in str(info.value) and "block, rack, clique, host" in str(info.value)


def test_a_custom_topology_resolves_its_own_names() -> None:
    spec = topology.parse_topology(
        {
            "metadata": {"name": "default"},
            "spec": {"levels": [{"name": "pod", "nodeLabel": "example.com/pod"}, {"nodeLabel": "example.com/rail"}]},
        }
    )
    constraint = TopologyConstraint(required="example.com/rail", preferred="pod")
    assert topology.resolve(spec, constraint, obj="podgroup ml/g") == (1, 0)
    with pytest.raises(InvalidObject):
        topology.resolve(spec, TopologyConstraint(required="rack"), obj="podgroup ml/g")


def test_a_plain_pod_takes_its_constraint_from_annotations() -> None:
    pod = parse_pod(
        objects.pod(
            "p",
            gpus=4,
            annotations={"gpusched.io/topology-required": "rack", "gpusched.io/topology-preferred": "clique"},
        )
    )
    assert pod.topology == TopologyConstraint(required="rack", preferred="clique")
    assert not parse_pod(objects.pod("q", gpus=1)).topology


def test_a_pod_annotation_naming_an_unknown_level_names_the_annotation() -> None:
    pod = parse_pod(objects.pod("p", gpus=1, annotations={"gpusched.io/topology-required": "row"}))
    with pytest.raises(InvalidObject) as info:
        topology.resolve(DEFAULT_TOPOLOGY, pod.topology, obj=f"pod {pod.key}")
    assert info.value.field == "metadata.annotations[gpusched.io/topology-required]"


def test_a_malformed_pod_annotation_is_refused() -> None:
    with pytest.raises(InvalidObject) as info:
        parse_pod(objects.pod("p", gpus=1, annotations={"gpusched.io/topology-preferred": "a b"}))
    assert info.value.field == "metadata.annotations[gpusched.io/topology-preferred]"


def _brute_holds(free: list[int], needs: list[int]) -> bool:
    if not needs:
        return True
    first, rest = needs[0], needs[1:]
    for i, room in enumerate(free):
        if room >= first and _brute_holds([*free[:i], room - first, *free[i + 1 :]], rest):
            return True
    return False


@given(
    st.lists(st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 8]), max_size=5),
    st.lists(st.sampled_from([1, 2, 4, 8]), max_size=6),
)
@settings(max_examples=300, deadline=None)
def test_holds_is_exact_for_power_of_two_members(free: list[int], needs: list[int]) -> None:
    assert topology.holds(free, needs) == _brute_holds(free, needs)


def test_domain_free_sums_each_domains_free_gpus_and_skips_outside_nodes() -> None:
    column = np.array([0, 0, 1, -1, 2], dtype=np.int64)
    free = np.array([8, 3, 4, 8, 0], dtype=np.int64)
    assert topology.domain_free(column, free).tolist() == [11, 4, 0]
