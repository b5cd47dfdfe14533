"""The core's ports: what the loop needs from whoever feeds it (the operator in a cluster, the simulator).

The binder is ``scheduler.framework.interface.Binder``; these three are the loop's own.
"""

from __future__ import annotations

from typing import Protocol

from scheduler.api.objects.pod import PodRequest


class Evictor(Protocol):
    """Deletes preempted pods (the API server's eviction in a cluster; the simulator removes them)."""

    def evict(self, pods: list[PodRequest], reason: str) -> None: ...

    def nominate(self, pod: PodRequest, node: str) -> None:
        """Tell that ``pod`` waits for the room its victims free on ``node`` (``""``: it no longer does): the
        pod's ``status.nominatedNodeName`` in a cluster."""
        ...


class Mover(Protocol):
    """Evicts pods that consolidation moves (``scheduler.core.consolidation.moves``): in a cluster through the Eviction
    API, so
    that PodDisruptionBudgets hold, one pod after another, stopping at the first refusal, which it reports to the
    loop (``SchedulingLoop.move_refused``); in the simulator the pods leave at once and their controllers' new pods
    arrive pending. The pods' controllers recreate them; the loop places each new pod on its move's target."""

    def move(self, pods: list[PodRequest], reason: str) -> None: ...


class Events(Protocol):
    """Where the loop reports what users should see (Kubernetes Events in a cluster, a list in the simulator)."""

    def emit(self, *, obj: str, kind: str, reason: str, message: str) -> None: ...
