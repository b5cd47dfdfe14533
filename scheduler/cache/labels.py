"""An inverted index of node labels, so that a pod's node selector and required affinity become boolean masks
over every node with a few set operations instead of a Python loop per node."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from scheduler.api.objects import selectors

B = npt.NDArray[np.bool_]


class LabelIndex:
    """label key -> value -> node slots, kept in step with the cache's nodes."""

    def __init__(self) -> None:
        self._by_key: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
        self._labels: dict[int, Mapping[str, str]] = {}
        #: label key -> (per slot the index of its value or -1, how many values): topology domains, rebuilt when
        #: the labels change.
        self._domains: dict[str, tuple[npt.NDArray[np.int64], int]] = {}

    def assign(self, slot: int, labels: Mapping[str, str]) -> None:
        if self._labels.get(slot) == labels:
            return
        self.clear(slot)
        self._domains.clear()
        self._labels[slot] = dict(labels)
        for key, value in labels.items():
            self._by_key[key][value].add(slot)

    def clear(self, slot: int) -> None:
        if slot in self._labels:
            self._domains.clear()
        for key, value in self._labels.pop(slot, {}).items():
            values = self._by_key[key]
            values[value].discard(slot)
            if not values[value]:
                del values[value]
            if not values:
                del self._by_key[key]

    def labels(self, slot: int) -> Mapping[str, str]:
        return self._labels.get(slot, {})

    def domain_ids(self, key: str, size: int) -> tuple[npt.NDArray[np.int64], int]:
        """The domains of a label key (a topology key): per slot below ``size`` the index of its value (-1 without
        the label), and the number of distinct values. Read-only; kept until a label changes."""
        known = self._domains.get(key)
        if known is not None and known[0].shape[0] >= size:
            return known[0][:size], known[1]
        ids = np.full(size, -1, dtype=np.int64)
        values = self._by_key.get(key, {})
        for i, slots in enumerate(values.values()):
            ids[np.fromiter(slots, dtype=np.int64, count=len(slots))] = i
        ids.setflags(write=False)
        self._domains[key] = (ids, len(values))
        return ids, len(values)

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
