"""PodDisruptionBudgets (policy/v1) as preemption weighs them.

A budget protects the pods its selector picks in its namespace: ``status.disruptionsAllowed`` says how many of
them may go now (the disruption controller keeps it), and ``status.disruptedPods`` names the pods already counted
against it (an eviction the API server accepted, not yet gone). Preemption is not an eviction through the API:
like kube-scheduler's DefaultPreemption, gpusched prefers victims whose deletion exceeds no budget and, among
nodes, the one whose victims exceed the fewest, but it still preempts when only budget-protected pods can make
room.

Two readings (:class:`Reading`), for the two ways gpusched takes pods away:

- ``PREEMPTION``, as kube-scheduler's preemption reads them (DefaultPreemption's victim grouping): a budget whose
  selector is missing or empty selects no pod, a pod without labels is selected by none, and a pod already in
  ``disruptedPods`` costs the budget nothing again;
- ``EVICTION``, as the Eviction API that enforces them reads them (the pod registry's eviction subresource): an
  empty selector (``{}``) selects every pod of its namespace, a missing one none, labels or not; and every eviction
  of a selected pod costs the budget one, already disrupted or not. Consolidation evicts through that API, so its
  plans weigh budgets this way: a plan the API server would refuse is not made.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.api.basics import fields
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.objects import affinity


class Reading(enum.Enum):
    """Which pods a budget selects and what taking one costs it (see the module notes)."""

    PREEMPTION = "preemption"
    EVICTION = "eviction"


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

    def covers(
        self, namespace: str, name: str, labels: Mapping[str, str], *, reading: Reading = Reading.PREEMPTION
    ) -> bool:
        """Whether taking pod ``namespace/name`` with ``labels`` away costs this budget a disruption, as
        ``reading`` weighs it."""
        if namespace != self.namespace:
            return False
        if reading is Reading.EVICTION:
            return self.selector.matches(labels)
        if not self.selector.requirements or not labels:
            return False
        return name not in self.disrupted and self.selector.matches(labels)


def parse_pdb(raw: Mapping[str, object]) -> DisruptionBudget:
    """Parse a PodDisruptionBudget as the API server returns it; :class:`InvalidObject` names the field."""
    _, spec, status, namespace, name, obj = fields.object_parts(
        raw, word="poddisruptionbudget", kind="PodDisruptionBudget", namespaced=True
    )
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
