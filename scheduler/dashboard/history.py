"""The dashboard's memory of the last hours: GPUs allocated, fragmented and pods waiting, one sample a minute.

A bounded list in the scheduler's own memory (no time-series service: Prometheus keeps the long history, see
docs/operator.md): at most :data:`KEPT` samples, taken at least :data:`EVERY_S` apart, so six hours cost a few
hundred small records whatever the cluster's size. A sample is read from the dashboard's own cluster map
(:func:`sample`), so the charts and the map count GPUs the same way. Whoever holds the state offers samples
(``scheduler.k8s.serve.dashboard`` once a minute); the pages draw them (``scheduler.dashboard.charts``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from scheduler.dashboard import view
from scheduler.kernels import layout

#: Seconds between two samples kept (offers in between are dropped).
EVERY_S = 60.0
#: Samples kept: six hours at one a minute.
KEPT = 360


def sample(cluster: view.ClusterMap, *, pods_waiting: int, at: float) -> view.Sample:
    """The cluster at ``at`` as its map shows it: GPUs present, held (milli-GPU in use summed) and fragmented."""
    cells = [cell for node in cluster.nodes for cell in node.cells]
    return view.Sample(
        at=at,
        gpus=len(cells),
        allocated=sum(cell.used_milli for cell in cells) / layout.WHOLE,
        fragmented=sum(node.fragmentation_milli for node in cluster.nodes) / layout.WHOLE,
        pods_waiting=pods_waiting,
    )


class History:
    """The samples of the last hours, oldest first (see the module notes)."""

    def __init__(self, *, every_s: float = EVERY_S, kept: int = KEPT) -> None:
        self.every_s = every_s
        self._samples: deque[view.Sample] = deque(maxlen=kept)

    def offer(self, at: float, take: Callable[[], view.Sample]) -> bool:
        """Keep ``take()`` when the last sample kept is at least ``every_s`` old at ``at`` (``take`` is not called
        otherwise); whether it was kept."""
        if self._samples and at - self._samples[-1].at < self.every_s:
            return False
        self._samples.append(take())
        return True

    def samples(self) -> tuple[view.Sample, ...]:
        return tuple(self._samples)

    def __len__(self) -> int:
        return len(self._samples)
