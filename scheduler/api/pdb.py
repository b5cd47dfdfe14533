"""PodDisruptionBudgets (policy/v1) as preemption weighs them.

A budget protects the pods its selector picks in its namespace: ``status.disruptionsAllowed`` says how many of
them may go now (the disruption controller keeps it), and ``status.disruptedPods`` names the pods already counted
against it (an eviction the API server accepted, not yet gone). Preemption is not an eviction through the API:
like kube-scheduler's DefaultPreemption, gpusched prefers victims whose deletion exceeds no budget and, among
nodes, the one whose victims exceed the fewest, but it still preempts when only budget-protected pods can make
room.

Read as kube-scheduler's preemption reads them: a budget whose selector is missing or empty selects no pod (for
preemption; the eviction API reads an empty selector differently), and a pod already in ``disruptedPods`` costs
the budget nothing again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.api import affinity
from scheduler.api.errors import InvalidObject


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    namespace: str
    name: str
    selector: affinity.LabelSelector
    #: ``status.disruptionsAllowed``: how many of its pods may be disrupted now.
    allowed: int = 0
    #: ``status.disruptedPods``: names of its pods already disrupted (counted, not yet gone).
    disrupted: frozenset[str] = field(default_factory=frozenset)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def covers(self, namespace: str, name: str, labels: Mapping[str, str]) -> bool:
        """Whether evicting pod ``namespace/name`` with ``labels`` costs this budget a disruption."""
        if namespace != self.namespace or not self.selector.requirements or not labels:
            return False
        return name not in self.disrupted and self.selector.matches(labels)


def parse_pdb(raw: Mapping[str, object]) -> DisruptionBudget:
    """Parse a PodDisruptionBudget as the API server returns it; :class:`InvalidObject` names the field."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping) or not isinstance(status, Mapping):
        raise InvalidObject("metadata, spec and status must be maps", obj="poddisruptionbudget")
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    obj = f"poddisruptionbudget {namespace}/{name}"
    if not name:
        raise InvalidObject("a PodDisruptionBudget needs a name", obj=obj, field="metadata.name")
    selector = affinity.parse_label_selector(spec.get("selector"), obj=obj, field="spec.selector")
    allowed = status.get("disruptionsAllowed") or 0
    if not isinstance(allowed, int) or isinstance(allowed, bool):
        raise InvalidObject(f"{allowed!r} is not an integer", obj=obj, field="status.disruptionsAllowed")
    disrupted = status.get("disruptedPods") or {}
    if not isinstance(disrupted, Mapping):
        raise InvalidObject("expected a map of pod names", obj=obj, field="status.disruptedPods")
    return DisruptionBudget(namespace, name, selector, allowed, frozenset(str(k) for k in disrupted))


def violating(pods: Sequence[tuple[str, str, Mapping[str, str]]], budgets: Sequence[DisruptionBudget]) -> list[bool]:
    """For pods (namespace, name, labels) taken in this order, whether taking each one exceeds some budget.

    Each budget's allowance is spent by the pods it covers, in order: the pod that takes a budget below zero, and
    every later pod it covers, exceed it (kube-scheduler's grouping of potential victims)."""
    left = [b.allowed for b in budgets]
    out = []
    for namespace, name, labels in pods:
        exceeds = False
        for i, budget in enumerate(budgets):
            if budget.covers(namespace, name, labels):
                left[i] -= 1
                exceeds |= left[i] < 0
        out.append(exceeds)
    return out
