"""The label index selects exactly the nodes that node selectors and required affinity select one node at a time,
and follows relabelled and removed nodes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.objects.selectors import NodeSelectorTerm, Requirement
from scheduler.cache.labels import LabelIndex
from tests.cache import node_selection

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
        assert got[slot] == node_selection.node_matches(f"n{slot}", node_labels, node_selector, affinity), slot


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


# --- what a nodeSelector and required node affinity select -------------------------------------------------------

LABELS = {"zone": "a", "gpus": "8", "pool": "train"}


def selects(
    name: str, labels: dict[str, str], node_selector: dict[str, str], affinity: tuple[NodeSelectorTerm, ...]
) -> bool:
    """Whether the index of one node ``name`` with ``labels`` selects it."""
    index = LabelIndex()
    index.assign(0, labels)
    return bool(index.select(1, node_selector, affinity, [name])[0])


def test_terms_are_ored_and_requirements_within_a_term_anded() -> None:
    zone_b = NodeSelectorTerm(labels=(Requirement("zone", "In", ("b",)),))
    zone_a_train = NodeSelectorTerm(labels=(Requirement("zone", "In", ("a",)), Requirement("pool", "In", ("train",))))
    zone_a_infer = NodeSelectorTerm(labels=(Requirement("zone", "In", ("a",)), Requirement("pool", "In", ("infer",))))
    assert selects("n1", LABELS, {}, (zone_b, zone_a_train))
    assert not selects("n1", LABELS, {}, (zone_b, zone_a_infer))


def test_an_empty_term_matches_no_node_and_no_terms_match_every_node() -> None:
    assert not selects("n1", LABELS, {}, (NodeSelectorTerm(),))
    assert selects("n1", LABELS, {}, ())


def test_match_fields_select_by_node_name() -> None:
    term = NodeSelectorTerm(fields=(Requirement("metadata.name", "In", ("n1",)),))
    assert selects("n1", LABELS, {}, (term,))
    assert not selects("n2", LABELS, {}, (term,))


def test_node_selector_needs_every_label() -> None:
    assert selects("n1", LABELS, {"zone": "a", "pool": "train"}, ())
    assert not selects("n1", LABELS, {"zone": "a", "pool": "infer"}, ())
    assert not selects("n1", LABELS, {"rack": "1"}, ())
