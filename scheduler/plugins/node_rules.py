"""Filter and score: the node rules that depend on the pod (kube-scheduler's NodeUnschedulable, and the scores of
NodeAffinity and TaintToleration).

A cordoned node (``spec.unschedulable``) is out for every pod (``layout.UNSCHEDULABLE``, set by the cache)
except one that tolerates the ``node.kubernetes.io/unschedulable:NoSchedule`` taint, as kube-scheduler lets
DaemonSet-like pods onto cordoned nodes. This plugin gives such a pod those nodes back, so it must come before
every other filter in a profile (the default profile lists it first); a profile without it keeps cordoned nodes
out for every pod.

Node readiness needs no rule of its own: as in kube-scheduler, a node that is not ready or unreachable is
tainted by the node lifecycle controller (``node.kubernetes.io/not-ready``, ``node.kubernetes.io/unreachable``),
and the taint filter (``fit``) keeps pods that do not tolerate those taints away.

Score, kube-scheduler's two node preferences with its weights (NodeAffinity 2, TaintToleration 3), each on
0..100 and summed in that proportion:

- preferred node affinity: the sum of the weights of the pod's ``preferredDuringSchedulingIgnoredDuringExecution``
  terms the node matches, scaled so that the best node scores 100;
- ``PreferNoSchedule`` taints: the fewer the node has that the pod does not tolerate, the better (100 for the
  nodes with fewest, when some node has any).

A pod without preferred node affinity, in a cluster without PreferNoSchedule taints, scores 0 everywhere at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduler.api.objects.selectors import Taint
from scheduler.framework import args as plugin_args
from scheduler.framework.interface import F64, I8, I64, ClusterEvent, CycleState
from scheduler.framework.reasons import Reason
from scheduler.kernels import layout

UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
#: kube-scheduler's default weights of the two scores this plugin sums.
AFFINITY_WEIGHT, TAINT_WEIGHT = 2.0, 3.0


class NodeRules:
    name = "node_rules"
    #: It sets no reason: it only gives cordoned nodes back (the core's UNSCHEDULABLE wakes on node changes).
    reasons: tuple[Reason, ...] = ()

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ())

    def wakes(self, reason: int) -> frozenset[ClusterEvent] | None:
        return None

    def filter(self, state: CycleState, reasons: I8) -> None:
        tolerations = state.pod.tolerations
        if tolerations and any(t.tolerates(UNSCHEDULABLE_TAINT) for t in tolerations):
            base = state.snapshot.arrays.base_reason
            size = min(base.shape[0], reasons.shape[0])
            head = reasons[:size]
            head[(base[:size] == layout.UNSCHEDULABLE) & (head == layout.UNSCHEDULABLE)] = layout.FIT

    def score(self, state: CycleState, nodes: I64, out: F64) -> bool:
        pod, snap = state.pod, state.snapshot
        soft = snap.soft_taints
        if not pod.node_preferences and not soft:
            return False
        affinity = np.zeros(nodes.shape[0])
        for weight, term in pod.node_preferences:
            matches = snap.select({}, (term,))
            affinity += weight * matches[nodes]
        best = float(affinity.max()) if affinity.shape[0] else 0.0
        # kube-scheduler's DefaultNormalizeScore: integer scaling to the best node; all 0 when none matches.
        affinity = np.floor(100.0 * affinity / best) if best > 0 else np.zeros_like(affinity)
        untolerated = np.zeros(nodes.shape[0])
        if soft:
            tolerations = [t for t in pod.tolerations if t.effect in ("", "PreferNoSchedule")]
            per_slot = np.zeros(snap.slots)
            for slot, taints in soft.items():
                if slot < per_slot.shape[0]:
                    per_slot[slot] = sum(1 for taint in taints if not any(t.tolerates(taint) for t in tolerations))
            untolerated = per_slot[nodes]
        worst = float(untolerated.max()) if untolerated.shape[0] else 0.0
        # Reversed: the fewest untolerated taints score 100; all 100 when no node has any.
        taint = 100.0 - np.floor(100.0 * untolerated / worst) if worst > 0 else np.full(nodes.shape[0], 100.0)
        out[:] = (AFFINITY_WEIGHT * affinity + TAINT_WEIGHT * taint) / (AFFINITY_WEIGHT + TAINT_WEIGHT)
        return True
