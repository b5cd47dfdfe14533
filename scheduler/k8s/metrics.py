"""Prometheus metrics of the operator, all named ``gpusched_...``, on a registry of their own.

A registry per :class:`Metrics` (not prometheus-client's global one) lets tests run several operators in one
process. Counters and histograms are updated where things happen; gauges that describe state (pending work,
queue allocation, cluster GPUs) are recomputed by :meth:`Metrics.refresh_state` before each scrape and after
each batch of cycles, from the cache and the queue, so they can never drift from what the scheduler holds.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Mapping

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from scheduler.api.pod import PodRequest
from scheduler.core.loop import SchedulingLoop
from scheduler.kernels import layout

#: Seconds: from a few milliseconds (a bind on a quiet cluster) to minutes (a gang waiting for room).
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.schedule_attempts = Counter(
            "gpusched_schedule_attempts", "Scheduling attempts of pods and gangs, by result.", ["result"], registry=r
        )
        self.binds = Counter("gpusched_binds", "Bindings, by outcome.", ["result"], registry=r)
        self.bind_duration = Histogram(
            "gpusched_bind_duration_seconds",
            "From handing a decision to the binder to the API server's answer.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e_duration = Histogram(
            "gpusched_e2e_scheduling_duration_seconds",
            "From when the scheduler first saw a pod pending to its successful binding.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.gang_wait = Histogram(
            "gpusched_gang_wait_seconds",
            "From a gang's first attempt to its placement (minMember members together).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.preemptions = Counter("gpusched_preemptions", "Pods deleted to make room (reclaim).", registry=r)
        self.pending_pods = Gauge(
            "gpusched_pending_pods", "Pods waiting to be scheduled, by queue.", ["queue"], registry=r
        )
        self.pending_gangs = Gauge(
            "gpusched_pending_gangs", "Gangs waiting to be scheduled, by queue.", ["queue"], registry=r
        )
        self.queue_allocated = Gauge(
            "gpusched_queue_allocated",
            "What each leaf queue's pods hold, by resource.",
            ["queue", "resource"],
            registry=r,
        )
        self.queue_share = Gauge(
            "gpusched_queue_dominant_share",
            "Weighted dominant share of each queue, decayed usage included (status.dominantShare).",
            ["queue"],
            registry=r,
        )
        self.queue_rank_share = Gauge(
            "gpusched_queue_rank_share",
            "What each leaf queue is ordered by: its share beyond its guarantee over weight (status.rankShare).",
            ["queue"],
            registry=r,
        )
        self.queue_fair_share = Gauge(
            "gpusched_queue_fair_share",
            "Each queue's fair share of the cluster (dominant, water-filled over demand; status.fairShare).",
            ["queue"],
            registry=r,
        )
        self.cluster_gpus = Gauge(
            "gpusched_cluster_gpus",
            "Whole GPUs of schedulable nodes: total, allocated (any share used), partial (partly used).",
            ["state"],
            registry=r,
        )
        self.is_leader = Gauge("gpusched_is_leader", "1 on the replica that schedules, else 0.", registry=r)
        self.ready = Gauge("gpusched_ready", "1 once the first full listing is in the cache.", registry=r)
        self.invalid_objects = Counter(
            "gpusched_invalid_objects", "Objects that could not be parsed, by kind.", ["kind"], registry=r
        )
        self._labelled: dict[str, set[tuple[str, ...]]] = {}

    def refresh_state(self, loop: SchedulingLoop, pending: Mapping[str, PodRequest]) -> None:
        """Recompute the state gauges from the pods waiting for a node (``pending``), the loop and the cache."""
        pods: Tally[str] = Tally()
        gangs: Tally[str] = Tally()
        for job in loop.jobs.gangs():
            if not job.satisfied and (job.key in loop.queue or job.pending):
                gangs[job.queue] += 1
        for pod in pending.values():
            pods[loop.queue_of(pod)] += 1
        self._set(self.pending_pods, {(q,): float(n) for q, n in pods.items()})
        self._set(self.pending_gangs, {(q,): float(n) for q, n in gangs.items()})
        allocated: dict[tuple[str, ...], float] = {
            (queue, name): amount for queue, vector in loop.holdings().items() for name, amount in vector.items()
        }
        self._set(self.queue_allocated, allocated)
        statuses = loop.queue_statuses()
        for gauge, field in (
            (self.queue_share, "dominantShare"),
            (self.queue_rank_share, "rankShare"),
            (self.queue_fair_share, "fairShare"),
        ):
            self._set(gauge, {(q,): float(str(st[field])) for q, st in statuses.items() if field in st})
        a = loop.scheduler.cache.arrays
        usable = a.base_reason != layout.ABSENT
        counts = a.gpu_count[usable]
        free = a.gpu_free[usable]
        present = np.arange(free.shape[1])[None, :] < counts[:, None]
        used = present & (free < layout.WHOLE)
        partial = used & (free > 0)
        self.cluster_gpus.labels("total").set(float(counts.sum()))
        self.cluster_gpus.labels("allocated").set(float(used.sum()))
        self.cluster_gpus.labels("partial").set(float(partial.sum()))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def _set(self, gauge: Gauge, values: dict[tuple[str, ...], float]) -> None:
        """Set a labelled gauge to exactly ``values``: label sets no longer present are removed."""
        name = gauge._name
        old = self._labelled.get(name, set())
        for labels in old - values.keys():
            gauge.remove(*labels)
        for labels, value in values.items():
            gauge.labels(*labels).set(value)
        self._labelled[name] = set(values)
