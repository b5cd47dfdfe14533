"""An inverted index of node labels, so that a pod's node selector and required affinity become boolean masks
over every node with a few set operations instead of a Python loop per node."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from scheduler.api import selectors

B = npt.NDArray[np.bool_]


class LabelIndex:
    """label key -> value -> node slots, kept in step with the cache's nodes."""

    def __init__(self) -> None:
        self._by_key: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
        self._labels: dict[int, Mapping[str, str]] = {}

    def assign(self, slot: int, labels: Mapping[str, str]) -> None:
        self.clear(slot)
        self._labels[slot] = dict(labels)
        for key, value in labels.items():
            self._by_key[key][value].add(slot)

    def clear(self, slot: int) -> None:
        for key, value in self._labels.pop(slot, {}).items():
            values = self._by_key[key]
            values[value].discard(slot)
            if not values[value]:
                del values[value]
            if not values:
                del self._by_key[key]

    def labels(self, slot: int) -> Mapping[str, str]:
        return self._labels.get(slot, {})

    def _mask(self, slots: set[int], size: int) -> B:
        mask = np.zeros(size, dtype=bool)
        if slots:
            mask[np.fromiter(slots, dtype=np.int64, count=len(slots))] = True
        return mask

    def requirement(self, req: selectors.Requirement, size: int) -> B:
        values = self._by_key.get(req.key, {})
        if req.operator in ("Exists", "DoesNotExist"):
            exists = self._mask(set().union(*values.values()) if values else set(), size)
            return exists if req.operator == "Exists" else ~exists
        if req.operator in ("In", "NotIn"):
            chosen: set[int] = set()
            for v in req.values:
                chosen |= values.get(v, set())
            inside = self._mask(chosen, size)
            return inside if req.operator == "In" else ~inside
        hits: set[int] = set()
        for v, slots in values.items():
            if req.matches({req.key: v}):
                hits |= slots
        return self._mask(hits, size)

    def select(
        self,
        size: int,
        node_selector: Mapping[str, str],
        affinity: Sequence[selectors.NodeSelectorTerm],
        names: Sequence[str | None],
    ) -> B:
        """Nodes (slots below ``size``) matching a nodeSelector and required node affinity terms."""
        mask = np.ones(size, dtype=bool)
        for key, value in node_selector.items():
            mask &= self._mask(self._by_key.get(key, {}).get(value, set()), size)
        if affinity:
            any_term = np.zeros(size, dtype=bool)
            for term in affinity:
                if not term.labels and not term.fields:
                    continue
                term_mask = np.ones(size, dtype=bool)
                for req in term.labels:
                    term_mask &= self.requirement(req, size)
                for req in term.fields:
                    term_mask &= np.array(
                        [n is not None and req.matches({req.key: n}) for n in names[:size]], dtype=bool
                    )
                any_term |= term_mask
            mask &= any_term
        return mask
