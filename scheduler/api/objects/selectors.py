"""Node selection rules a pod carries: node selectors, required node affinity, taints and tolerations.

Pure functions over plain dicts, evaluated as kube-scheduler's NodeAffinity and TaintToleration filters do,
for the scheduling-relevant subset (requiredDuringScheduling terms, NoSchedule and NoExecute taints).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler.api.basics import fields
from scheduler.api.basics.errors import InvalidObject

_OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}
#: A label selector's operators (pod affinity, spread constraints): a node selector's without Gt and Lt.
LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if not present:
            return False
        try:
            value, bound = int(labels[self.key]), int(self.values[0])
        except ValueError:
            return False
        return value > bound if self.operator == "Gt" else value < bound


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """All requirements must hold (label expressions, and ``metadata.name`` field expressions)."""

    labels: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if not self.key and self.operator != "Exists":
            return False
        return self.operator == "Exists" or self.value == taint.value


def requirements(
    raw: object, *, obj: str, field: str, operators: frozenset[str] | set[str] = _OPERATORS
) -> tuple[Requirement, ...]:
    """Parse ``matchExpressions`` (node selector terms, or label selectors with ``LABEL_OPERATORS``)."""
    parsed = []
    needs_key = "a requirement needs a string key"
    for where, item in fields.maps(
        raw, obj=obj, field=field, not_list="expected a list of requirements", not_map=needs_key
    ):
        key = item.get("key")
        if not isinstance(key, str):
            raise InvalidObject(needs_key, obj=obj, field=where)
        operator = item.get("operator")
        if operator not in operators:
            raise InvalidObject(f"unknown operator {operator!r}", obj=obj, field=f"{where}.operator")
        values = item.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise InvalidObject("values must be a list of strings", obj=obj, field=f"{where}.values")
        if operator in ("In", "NotIn") and not values:
            raise InvalidObject(f"operator {operator} needs values", obj=obj, field=f"{where}.values")
        if operator in ("Gt", "Lt") and (len(values) != 1 or not values[0].lstrip("-").isdigit()):
            raise InvalidObject(f"operator {operator} needs one integer value", obj=obj, field=f"{where}.values")
        parsed.append(Requirement(key, str(operator), tuple(values)))
    return tuple(parsed)


def parse_node_affinity(spec: Mapping[str, object], *, obj: str) -> tuple[NodeSelectorTerm, ...]:
    """The required node affinity terms of a pod spec (any one term must match)."""
    affinity = spec.get("affinity") or {}
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    if not isinstance(node_affinity, Mapping):
        return ()
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(required, Mapping):
        return ()
    field = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    terms = required.get("nodeSelectorTerms") or []
    if not isinstance(terms, list):
        raise InvalidObject("expected a list of terms", obj=obj, field=field)
    parsed = []
    for i, term in enumerate(terms):
        if not isinstance(term, Mapping):
            raise InvalidObject("expected a term", obj=obj, field=f"{field}[{i}]")
        parsed.append(
            NodeSelectorTerm(
                labels=requirements(term.get("matchExpressions"), obj=obj, field=f"{field}[{i}].matchExpressions"),
                fields=requirements(term.get("matchFields"), obj=obj, field=f"{field}[{i}].matchFields"),
            )
        )
    return tuple(parsed)


#: Tolerations already read, by their four fields' text: most pods of a cluster carry the same few lists (the two
#: that the API server's DefaultTolerationSeconds adds to every pod, a DaemonSet's), and 100,000 running pods read
#: at a start then share one tuple instead of keeping 100,000 (docs/performance.md, start-up).
_TOLERATIONS: dict[tuple[tuple[object, ...], ...], tuple[Toleration, ...]] = {}
#: Different lists remembered at most; past it the memo starts again.
_TOLERATIONS_KEPT = 4096
_TEXT = (str, type(None))


def parse_tolerations(raw: object, *, obj: str, field: str = "spec.tolerations") -> tuple[Toleration, ...]:
    if raw is None:
        return ()
    seen: tuple[tuple[object, ...], ...] | None = None
    if isinstance(raw, list) and all(type(item) is dict for item in raw):
        seen = tuple((item.get("key"), item.get("operator"), item.get("value"), item.get("effect")) for item in raw)
        if all(isinstance(text, _TEXT) for parts in seen for text in parts):
            known = _TOLERATIONS.get(seen)
            if known is not None:
                return known
        else:
            seen = None
    parsed = _parse_tolerations(raw, obj=obj, field=field)
    if seen is not None:
        if len(_TOLERATIONS) >= _TOLERATIONS_KEPT:
            _TOLERATIONS.clear()
        _TOLERATIONS[seen] = parsed
    return parsed


def _parse_tolerations(raw: object, *, obj: str, field: str) -> tuple[Toleration, ...]:
    parsed = []
    for where, item in fields.maps(raw, obj=obj, field=field, not_map="expected a toleration"):
        operator = item.get("operator") or "Equal"
        if operator not in ("Equal", "Exists"):
            raise InvalidObject(f"unknown operator {operator!r}", obj=obj, field=f"{where}.operator")
        parsed.append(
            Toleration(
                key=str(item.get("key") or ""),
                operator=str(operator),
                value=str(item.get("value") or ""),
                effect=str(item.get("effect") or ""),
            )
        )
    return tuple(parsed)


def parse_taints(raw: object, *, obj: str) -> tuple[Taint, ...]:
    if not isinstance(raw, list):
        return ()
    taints = []
    for item in raw:
        if isinstance(item, Mapping) and isinstance(item.get("key"), str):
            taints.append(Taint(item["key"], str(item.get("value") or ""), str(item.get("effect") or "")))
    return tuple(taints)


def untolerated(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> Taint | None:
    """The first NoSchedule / NoExecute taint no toleration matches (the one kube-scheduler names), or None."""
    for taint in taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


def tolerated(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> bool:
    """Whether every NoSchedule / NoExecute taint is tolerated (PreferNoSchedule does not filter)."""
    return untolerated(taints, tolerations) is None
