"""A small hand-made cluster and a scheduler over it, with a binder that only records what it is handed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.api.objects import node as api_node
from scheduler.api.objects import pod as api_pod
from scheduler.cache.state import Cache
from scheduler.core import root
from scheduler.core.cycle import Result
from scheduler.core.loop import SchedulingLoop
from scheduler.framework import profile
from scheduler.framework.interface import Decision


class RecordingBinder:
    def __init__(self) -> None:
        self.decisions: list[Decision] = []

    def bind(self, decision: Decision) -> None:
        self.decisions.append(decision)


class Cluster:
    """A cache fed with raw nodes and bound pods, and one scheduler over it."""

    def __init__(
        self,
        nodes: Sequence[dict[str, Any]],
        plugins: Sequence[Any] = ("fit", "gpu"),
        *,
        bound: Sequence[dict[str, Any]] = (),
        tie_break: str = "first",
        seed: int = 0,
        config: profile.ProfileConfig | None = None,
    ) -> None:
        self.cache = Cache()
        for raw in nodes:
            self.cache.upsert_node(api_node.parse_node(raw))
        for raw in bound:
            self.cache.upsert_pod(api_pod.parse_pod(raw))
        if config is None:
            config = profile.parse({"plugins": list(plugins), "tieBreak": tie_break, "seed": seed})
        self.binder = RecordingBinder()
        self.scheduler = root.build_scheduler(config, binder=self.binder, cache=self.cache)
        self.framework = self.scheduler.framework

    def schedule(self, raw: dict[str, Any]) -> Result:
        return self.scheduler.schedule(api_pod.parse_pod(raw))

    def place(self, raw: dict[str, Any]) -> tuple[str, tuple[int, ...]]:
        """Schedule a pod that must fit; where it went and on which devices."""
        result = self.schedule(raw)
        assert result.decision is not None, result.status.message
        return result.decision.node, result.decision.gpu_ids

    def free_devices(self, node: str) -> list[float]:
        slot = self.cache.slot_of(node)
        assert slot is not None
        a = self.cache.arrays
        return a.gpu_free[slot, : a.gpu_count[slot]].tolist()


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Events:
    """Records what the loop reports, as (object, reason, message)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def emit(self, *, obj: str, kind: str, reason: str, message: str) -> None:
        self.seen.append((obj, reason, message))

    def reasons(self, obj: str) -> list[str]:
        return [reason for o, reason, _ in self.seen if o == obj]

    def messages(self, obj: str) -> list[str]:
        return [message for o, _, message in self.seen if o == obj]


def gone(cluster: Cluster, loop: SchedulingLoop, clock: Clock, pods: Sequence[api_pod.PodRequest]) -> None:
    """The API server deletes ``pods`` (preempted): the cache and the loop hear it, after the preemptor's
    backoff."""
    for pod in pods:
        cluster.cache.remove_pod(pod.key)
        loop.pod_gone(pod.key)
    clock.now += 30.0
    loop.cluster_event("pod deleted")
    loop.run_until_idle()
