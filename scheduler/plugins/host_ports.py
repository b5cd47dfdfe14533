"""Filter: host ports (kube-scheduler's NodePorts).

A node where a pod already holds a host port that conflicts with one the pod asks for (same protocol and port,
and the same host IP or ``0.0.0.0`` on either side, ``scheduler.api.objects.host_ports``) is marked :data:`PORTS`:
"node(s) didn't have free ports for the requested pod ports". Pods placed earlier in the same what-if (a gang's
members) count, through the snapshot. A pod without host ports costs one attribute test.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.framework import args as plugin_args
from scheduler.framework import reasons as framework_reasons
from scheduler.framework.interface import I8, ClusterEvent, CycleState
from scheduler.framework.reasons import Reason
from scheduler.kernels import layout

#: A port frees when its pod leaves; a new node has every port free.
_FREED = frozenset({ClusterEvent.POD_DELETED, ClusterEvent.NODE_ADDED})
PORTS = Reason(11, "node(s) didn't have free ports for the requested pod ports", eviction_helps=True, wakes=_FREED)


class NodePorts:
    name = "ports"
    reasons = (PORTS,)

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ())

    def wakes(self, reason: int) -> frozenset[ClusterEvent] | None:
        return framework_reasons.wakes(self.reasons, reason)

    def filter(self, state: CycleState, reasons: I8) -> None:
        ports = state.pod.host_ports
        if not ports:
            return
        taken = state.snapshot.host_port_conflicts(ports)
        size = min(taken.shape[0], reasons.shape[0])
        head = reasons[:size]
        head[taken[:size] & (head == layout.FIT)] = PORTS.code
