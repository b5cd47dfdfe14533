"""One node at a time, what a pod's nodeSelector and required node affinity select, as Kubernetes' NodeAffinity
filter says: the slow twin that scheduler.cache.labels.LabelIndex.select (all nodes at once) is checked against."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.api.objects.selectors import NodeSelectorTerm


def term_matches(term: NodeSelectorTerm, node_name: str, labels: Mapping[str, str]) -> bool:
    """Every requirement of the term holds (label expressions, and ``metadata.name`` field expressions)."""
    if not term.labels and not term.fields:
        return False  # an empty term matches no node, as in Kubernetes
    names = {"metadata.name": node_name}
    return all(r.matches(labels) for r in term.labels) and all(r.matches(names) for r in term.fields)


def node_matches(
    node_name: str,
    labels: Mapping[str, str],
    node_selector: Mapping[str, str],
    affinity: Sequence[NodeSelectorTerm],
) -> bool:
    """Whether a node satisfies a pod's nodeSelector (every label) and required node affinity (any term)."""
    if any(labels.get(k) != v for k, v in node_selector.items()):
        return False
    return not affinity or any(term_matches(term, node_name, labels) for term in affinity)
