"""The label index selects exactly the nodes that node selectors and required affinity select one node at a time,
and follows relabelled and removed nodes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api import selectors
from scheduler.api.selectors import NodeSelectorTerm, Requirement
from scheduler.cache.labels import LabelIndex

KEYS = ("zone", "pool", "gpus")
VALUES = ("a", "b", "1", "8", "-3")

label_sets = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3)
value_lists = st.lists(st.sampled_from(VALUES), min_size=1, max_size=2, unique=True).map(tuple)
requirements = st.one_of(
    st.builds(Requirement, st.sampled_from(KEYS), st.sampled_from(["In", "NotIn"]), value_lists),
    st.builds(Requirement, st.sampled_from(KEYS), st.sampled_from(["Exists", "DoesNotExist"])),
    st.builds(
        Requirement,
        st.sampled_from(KEYS),
        st.sampled_from(["Gt", "Lt"]),
        st.sampled_from(["0", "4"]).map(lambda v: (v,)),
    ),
)
name_requirements = st.builds(
    Requirement,
    st.just("metadata.name"),
    st.sampled_from(["In", "NotIn"]),
    st.sampled_from(["n0", "n2"]).map(lambda v: (v,)),
)
terms = st.builds(
    NodeSelectorTerm,
    st.lists(requirements, max_size=2).map(tuple),
    st.lists(name_requirements, max_size=1).map(tuple),
)


@settings(max_examples=200, deadline=None)
@given(
    nodes=st.lists(label_sets, min_size=1, max_size=6),
    relabel=st.lists(st.tuples(st.integers(min_value=0, max_value=5), label_sets), max_size=3),
    removed=st.sets(st.integers(min_value=0, max_value=5), max_size=2),
    node_selector=st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2),
    affinity=st.lists(terms, max_size=2).map(tuple),
)
def test_the_index_agrees_with_selectors(
    nodes: list[dict[str, str]],
    relabel: list[tuple[int, dict[str, str]]],
    removed: set[int],
    node_selector: dict[str, str],
    affinity: tuple[NodeSelectorTerm, ...],
) -> None:
    index = LabelIndex()
    labels = dict(enumerate(nodes))
    for slot, node_labels in labels.items():
        index.assign(slot, node_labels)
    for slot, node_labels in relabel:
        if slot in labels:
            index.assign(slot, node_labels)
            labels[slot] = node_labels
    for slot in removed:
        if slot in labels:
            index.clear(slot)
            del labels[slot]
    size = len(nodes) + 2
    names = [f"n{slot}" if slot in labels else None for slot in range(size)]
    got = index.select(size, node_selector, affinity, names)
    for slot, node_labels in labels.items():
        assert index.labels(slot) == node_labels
        assert got[slot] == selectors.node_matches(f"n{slot}", node_labels, node_selector, affinity), slot


def test_a_relabelled_node_leaves_its_old_values() -> None:
    index = LabelIndex()
    index.assign(0, {"pool": "x"})
    index.assign(1, {"pool": "x"})
    index.assign(0, {"pool": "y"})
    names = ["n0", "n1"]
    np.testing.assert_array_equal(index.select(2, {"pool": "x"}, (), names), [False, True])
    np.testing.assert_array_equal(index.select(2, {"pool": "y"}, (), names), [True, False])
    index.clear(1)
    exists = (NodeSelectorTerm(labels=(Requirement("pool", "Exists"),)),)
    np.testing.assert_array_equal(index.select(2, {}, exists, names), [True, False])
