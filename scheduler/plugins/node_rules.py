"""Filter: the node rules that depend on the pod (kube-scheduler's NodeUnschedulable).

A cordoned node (``spec.unschedulable``) is out for every pod (``layout.UNSCHEDULABLE``, set by the cache)
except one that tolerates the ``node.kubernetes.io/unschedulable:NoSchedule`` taint, as kube-scheduler lets
DaemonSet-like pods onto cordoned nodes. This plugin gives such a pod those nodes back, so it must come before
every other filter in a profile (the default profile lists it first); a profile without it keeps cordoned nodes
out for every pod.

Node readiness needs no rule of its own: as in kube-scheduler, a node that is not ready or unreachable is
tainted by the node lifecycle controller (``node.kubernetes.io/not-ready``, ``node.kubernetes.io/unreachable``),
and the taint filter (``fit``) keeps pods that do not tolerate those taints away.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.api.selectors import Taint
from scheduler.framework import args as plugin_args
from scheduler.framework.interface import I8, ClusterEvent, CycleState
from scheduler.kernels import layout

UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


class NodeRules:
    name = "node_rules"

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ())

    def wakes(self, reason: int) -> frozenset[ClusterEvent] | None:
        return None  # sets no reason: the core's UNSCHEDULABLE wakes on node changes

    def filter(self, state: CycleState, reasons: I8) -> None:
        tolerations = state.pod.tolerations
        if tolerations and any(t.tolerates(UNSCHEDULABLE_TAINT) for t in tolerations):
            base = state.snapshot.arrays.base_reason
            size = min(base.shape[0], reasons.shape[0])
            head = reasons[:size]
            head[(base[:size] == layout.UNSCHEDULABLE) & (head == layout.UNSCHEDULABLE)] = layout.FIT
