"""Topology: parsing names the bad level; the domain index puts unlabelled nodes outside and splits bad nesting."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.crds import topology
from scheduler.api.crds.topology import DomainIndex, TopologySpec

CRD = Path(__file__).resolve().parents[2] / "crds" / "topologies.yaml"
BLOCK, RACK, CLIQUE, HOST = topology.DEFAULT_LEVELS


def raw(*levels: dict[str, Any], name: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.gpusched.io/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": list(levels)},
    }


def test_a_topology_is_parsed_widest_level_first_with_its_names() -> None:
    parsed = topology.parse_topology(
        raw({"name": "block", "nodeLabel": BLOCK}, {"name": "rack", "nodeLabel": RACK}, {"nodeLabel": HOST})
    )
    assert parsed == TopologySpec("default", levels=(BLOCK, RACK, HOST), level_names=("block", "rack", ""))
    assert parsed.find_level("rack") == parsed.find_level(RACK) == 1
    assert parsed.find_level(HOST) == 2
    assert parsed.find_level("host") is None
    assert parsed.find_level(CLIQUE) is None


def test_without_a_topology_the_documented_default_levels_apply() -> None:
    default = topology.DEFAULT_TOPOLOGY
    assert default.levels == (
        "network.topology.gpusched.io/block",
        "network.topology.gpusched.io/rack",
        "nvidia.com/gpu.clique",
        "kubernetes.io/hostname",
    )
    assert [default.find_level(name) for name in ("block", "rack", "clique", "host")] == [0, 1, 2, 3]
    assert default.name == topology.NAME == "default"


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({}, "spec.levels", "at least one level"),
        ({"levels": []}, "spec.levels", "at least one level"),
        ({"levels": "rack"}, "spec.levels", "list"),
        ({"levels": [{"name": "rack"}]}, "spec.levels[0].nodeLabel", "needs a nodeLabel"),
        ({"levels": [{"nodeLabel": ""}]}, "spec.levels[0].nodeLabel", "needs a nodeLabel"),
        ({"levels": ["rack"]}, "spec.levels[0]", "must be a map"),
        ({"levels": [{"nodeLabel": "Not A Label/"}]}, "spec.levels[0].nodeLabel", "not a label key"),
        ({"levels": [{"nodeLabel": 7}]}, "spec.levels[0].nodeLabel", "not a label key"),
        ({"levels": [{"nodeLabel": RACK}, {"nodeLabel": RACK}]}, "spec.levels[1].nodeLabel", "already names level 0"),
        (
            {"levels": [{"name": "a", "nodeLabel": BLOCK}, {"name": "a", "nodeLabel": RACK}]},
            "spec.levels[1].name",
            "already names level 0",
        ),
        ({"levels": [{"name": "Rack", "nodeLabel": RACK}]}, "spec.levels[0].name", "not a DNS label"),
        (
            {"levels": [{"nodeLabel": "rack"}, {"name": "rack", "nodeLabel": HOST}]},
            "spec.levels[1].name",
            "nodeLabel of level 0",
        ),
        ({"levels": [{"nodeLabel": HOST}, {"nodeLabel": CLIQUE}]}, "spec.levels[0].nodeLabel", "narrowest"),
        ({"levels": [{"nodeLabel": f"l{i}"} for i in range(9)]}, "spec.levels", "at most 8"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_field(spec: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(InvalidObject) as error:
        topology.parse_topology({"metadata": {"name": "default"}, "spec": spec})
    assert error.value.field == field
    assert error.value.obj == "topology default"
    assert words in error.value.reason


def test_a_topology_not_named_default_is_refused() -> None:
    with pytest.raises(InvalidObject) as error:
        topology.parse_topology(raw({"nodeLabel": HOST}, name="prod"))
    assert (error.value.obj, error.value.field) == ("topology prod", "metadata.name")
    with pytest.raises(InvalidObject, match="needs a name"):
        topology.parse_topology({"spec": {"levels": [{"nodeLabel": HOST}]}})


def test_the_crd_says_what_the_parser_says() -> None:
    crd = yaml.safe_load(CRD.read_text())
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["group"] == topology.GROUP
    assert crd["spec"]["names"]["plural"] == topology.PLURAL
    (version,) = crd["spec"]["versions"]
    assert version["name"] == topology.VERSION
    assert version["subresources"] == {"status": {}}
    root = version["schema"]["openAPIV3Schema"]
    assert f"'{topology.NAME}'" in root["x-kubernetes-validations"][0]["rule"]
    levels = root["properties"]["spec"]["properties"]["levels"]
    assert (levels["minItems"], levels["maxItems"]) == (1, topology.MAX_LEVELS)
    assert levels["items"]["required"] == ["nodeLabel"]
    assert topology.LABEL_HOSTNAME in levels["x-kubernetes-validations"][3]["rule"]


def _crd_label_pattern() -> re.Pattern[str]:
    crd = yaml.safe_load(CRD.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return re.compile(spec["properties"]["levels"]["items"]["properties"]["nodeLabel"]["pattern"])


LABEL_PATTERN = _crd_label_pattern()


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="aZ09-_./", max_size=60))
def test_the_crd_label_pattern_agrees_with_the_parser(key: str) -> None:
    # The API server's patterns are unanchored ECMA regexes; the CRD anchors them with ^ and $.
    assert (LABEL_PATTERN.search(key) is not None) == topology.is_label_key(key)


# --- the domain index ------------------------------------------------------------------------------------------

LEVELS = (BLOCK, RACK, HOST)


def node(name: str, block: str | None = None, rack: str | None = None) -> tuple[str, dict[str, str]]:
    labels = {HOST: name}
    if block is not None:
        labels[BLOCK] = block
    if rack is not None:
        labels[RACK] = rack
    return name, labels


def test_each_node_gets_a_domain_at_each_level_and_domains_nest() -> None:
    nodes = [
        node("n3", "b2", "r3"),
        node("n0", "b1", "r1"),
        node("n1", "b1", "r1"),
        node("n2", "b1", "r2"),
        node("n4", "b2", "r3"),
    ]
    index = topology.domains(LEVELS, nodes)
    assert index.nodes == ("n3", "n0", "n1", "n2", "n4")
    assert index.ids.dtype == np.int64
    assert index.ids.shape == (5, 3)
    assert index.values[0] == ("b1", "b2")
    assert index.values[1] == ("r1", "r2", "r3")
    assert index.ids[:, 0].tolist() == [1, 0, 0, 0, 1]
    assert index.ids[:, 1].tolist() == [2, 0, 0, 1, 2]
    assert index.parents[0].tolist() == [-1, -1]
    assert index.parents[1].tolist() == [0, 0, 1]  # r1, r2 in b1; r3 in b2
    assert index.parents[2].tolist() == [0, 0, 1, 2, 2]  # hosts n0, n1 in r1; n2 in r2; n3, n4 in r3
    assert index.domain_count(HOST) == 5
    assert index.problems == ()
    assert all(index.unlabelled(level) == () for level in LEVELS)


def test_nodes_missing_a_label_are_outside_every_domain_of_that_level_and_listed() -> None:
    nodes = [node("n0", "b1", "r1"), node("n1", "b1"), node("n2", rack="r9"), node("n3", "", "r1")]
    index = topology.domains(LEVELS, nodes)
    assert index.ids[:, 0].tolist() == [0, 0, -1, -1]
    assert index.unlabelled(BLOCK) == ("n2", "n3")  # no label, empty value
    assert index.unlabelled(RACK) == ("n1",)
    assert index.unlabelled(0) == index.unlabelled(BLOCK)
    assert index.ids[1, 1] == -1
    assert (index.ids[:, 2] >= 0).all()  # every node is its own host


def test_an_odd_label_value_puts_the_node_outside_and_is_reported() -> None:
    index = topology.domains(LEVELS, [node("n0", "b1", "rack one!"), node("n1", "b1", "r1")])
    assert index.ids[:, 1].tolist() == [-1, 0]
    assert index.unlabelled(RACK) == ("n0",)
    (problem,) = index.problems
    assert (problem.obj, problem.field) == ("node n0", f"metadata.labels[{RACK}]")


def test_a_rack_in_two_blocks_is_split_and_reported_without_stopping_anything() -> None:
    nodes = [node("n0", "b1", "r1"), node("n1", "b2", "r1"), node("n2", "b2", "r1"), node("n3", None, "r1")]
    index = topology.domains(LEVELS, nodes)
    assert index.values[1] == ("r1", "r1", "r1")
    assert index.parents[1].tolist() == [-1, 0, 1]
    assert index.ids[:, 1].tolist() == [1, 2, 2, 0]
    (problem,) = index.problems
    assert problem.obj == f"domain {RACK}=r1"
    assert "3 domains of the wider level" in problem.reason
    assert f"{BLOCK}=b1 (n0)" in problem.reason
    assert f"{BLOCK}=b2 (n1, n2)" in problem.reason
    assert f"no {BLOCK} (n3)" in problem.reason


def test_the_default_levels_on_a_cluster_that_labels_only_hosts() -> None:
    nodes = [(f"n{i}", {HOST: f"n{i}"}) for i in range(3)]
    index = topology.domains(topology.DEFAULT_LEVELS, nodes)
    assert index.unlabelled(BLOCK) == index.unlabelled(CLIQUE) == ("n0", "n1", "n2")
    assert index.ids[:, 3].tolist() == [0, 1, 2]
    assert index.problems == ()


def test_the_index_is_read_only_and_rejects_bad_input() -> None:
    index = topology.domains(LEVELS, [node("n0", "b1", "r1")])
    with pytest.raises(ValueError, match="read-only"):
        index.ids[0, 0] = 5
    with pytest.raises(InvalidObject, match="listed twice"):
        topology.domains(LEVELS, [node("n0"), node("n0")])
    with pytest.raises(ValueError, match="distinct"):
        topology.domains((RACK, RACK), [])
    with pytest.raises(KeyError):
        index.unlabelled(CLIQUE)
    empty = topology.domains(LEVELS, [])
    assert empty.ids.shape == (0, 3)


@st.composite
def clusters(draw: st.DrawFn) -> list[tuple[str, dict[str, str]]]:
    count = draw(st.integers(0, 30))
    value = st.one_of(st.none(), st.sampled_from(["", "a", "b", "c", "bad value"]))
    return [
        (f"n{i}", {k: v for k, v in ((BLOCK, draw(value)), (RACK, draw(value)), (HOST, f"n{i}")) if v is not None})
        for i in range(count)
    ]


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_domains_always_nest_and_outside_means_unlabelled(nodes: list[tuple[str, dict[str, str]]]) -> None:
    index: DomainIndex = topology.domains(LEVELS, nodes)
    for i, level in enumerate(LEVELS):
        column = index.ids[:, i]
        outside = {index.nodes[row] for row in np.flatnonzero(column < 0)}
        assert outside == set(index.unlabelled(level))
        for row, domain in enumerate(column):
            if domain >= 0:
                assert index.values[i][domain] == nodes[row][1][level]
                expected_parent = index.ids[row, i - 1] if i else -1
                assert index.parents[i][domain] == expected_parent
        # the domains inside one wider domain have consecutive ids
        assert (np.diff(index.parents[i]) >= 0).all()
