"""The core's ports: what the loop needs from whoever feeds it (the operator in a cluster, the simulator).

The binder is ``scheduler.framework.interface.Binder``; these two are the loop's own.
"""

from __future__ import annotations

from typing import Protocol

from scheduler.api.pod import PodRequest


class Evictor(Protocol):
    """Deletes preempted pods (the API server's eviction in a cluster; the simulator removes them)."""

    def evict(self, pods: list[PodRequest], reason: str) -> None: ...

    def nominate(self, pod: PodRequest, node: str) -> None:
        """Tell that ``pod`` waits for the room its victims free on ``node`` (``""``: it no longer does): the
        pod's ``status.nominatedNodeName`` in a cluster."""
        ...


class Events(Protocol):
    """Where the loop reports what users should see (Kubernetes Events in a cluster, a list in the simulator)."""

    def emit(self, *, obj: str, kind: str, reason: str, message: str) -> None: ...
