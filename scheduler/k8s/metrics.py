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
from scheduler.core.loop import GANG_PREFIX, SchedulingLoop
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
            "gpusched_queue_dominant_share", "Weighted dominant share of each leaf queue.", ["queue"], registry=r
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
        for key, state in loop.groups.items():
            if not state.satisfied and (GANG_PREFIX + key in loop.queue or state.pending):
                gangs[loop.tenancy.leaf_of(state.group.queue)] += 1
        for key, pod in pending.items():
            group = loop.member_of.get(key)
            queue = loop.groups[group].group.queue if group is not None and group in loop.groups else pod.queue
            pods[loop.tenancy.leaf_of(queue)] += 1
        self._set(self.pending_pods, {(q,): float(n) for q, n in pods.items()})
        self._set(self.pending_gangs, {(q,): float(n) for q, n in gangs.items()})
        tenancy = loop.tenancy
        allocated: dict[tuple[str, ...], float] = {
            (queue, name): amount for queue, vector in tenancy.allocated.items() for name, amount in vector.items()
        }
        self._set(self.queue_allocated, allocated)
        self._set(self.queue_share, {(leaf,): tenancy.rank(leaf)[1] for leaf in tenancy.tree.leaves()})
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
