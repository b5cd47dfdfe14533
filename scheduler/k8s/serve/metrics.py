"""Prometheus metrics of the operator, all named ``gpusched_...``, on a registry of their own.

A registry per :class:`Metrics` (not prometheus-client's global one) lets tests run several operators in one
process; the process, platform and garbage-collector collectors are added to it, so ``process_*`` and
``python_*`` series are there as with any Prometheus client. Counters and histograms are updated where things
happen; gauges that describe state (pending work, queue allocation and quotas, cluster GPUs and fragmentation)
are recomputed by :meth:`Metrics.refresh_state` before each scrape, from the cache and the queue, so they can
never drift from what the scheduler holds.

The state gauges (:data:`STATE_GAUGES`: pending work, queues, cluster GPUs and nodes) are exported by the leader
only. A standby keeps the same warm cache, so it would export the same figures, and a dashboard that sums a
Deployment's replicas (``sum(gpusched_cluster_gpus{state="total"})``) would count the cluster once per replica: 800
GPUs on a 400-GPU cluster with two replicas. They sit behind a collector that yields nothing unless ``leading()``
says so at the scrape (the operator's: it holds the Lease, as the lease thread sees it now), so a replica that
loses the lease drops them from its next scrape and Prometheus marks them stale. Counters and histograms stay on
every replica (only the leader's move, except ``gpusched_invalid_objects_total``: every replica parses every
object, so a dashboard takes the ``max`` of its rates, not the sum), as do ``gpusched_is_leader``,
``gpusched_ready``, ``gpusched_can_lead`` and the process series.

Conventions, as kube-scheduler's and Kueue's users expect them: base units (CPU in cores, memory in bytes, GPUs
in GPUs), ``_seconds`` histograms, ``_total`` counters. Label values are bounded: a ``queue`` label names a Queue
that exists (or ``default``), so a typo'd queue name on a pod does not start a new series; a ``reason`` is one
of a few words, never a message.
"""

from __future__ import annotations

import random
import time
from collections import Counter as Tally
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from prometheus_client import (
    GC_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import Metric

from scheduler.api.basics import resources
from scheduler.api.devices.gputopo import ANNOTATION as GPU_TOPOLOGY
from scheduler.api.objects.admission import Gated
from scheduler.api.objects.pod import PodRequest
from scheduler.core.extension_points import Framework
from scheduler.core.loop import SchedulingLoop
from scheduler.kernels import layout

#: Seconds: from a few milliseconds (a bind on a quiet cluster) to minutes (a gang waiting for room).
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
#: Seconds of one cycle or one plugin call: from tens of microseconds to a second.
_CYCLE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
#: The queue every pod without one counts against (it may exist as a Queue object or be implied).
DEFAULT_QUEUE = "default"
#: Below this much free CPU (cores) or memory (bytes) a node with free GPUs is *stranded*: its GPUs cannot take
#: a pod that asks for anything besides them.
STRANDED_CPU = 1.0
STRANDED_MEMORY = float(2**30)
#: Preemption reasons as labels (the Event's message says more).
PREEMPTION_REASONS = {"guarantee back": "reclaim", "reclaim": "reclaim", "higher-priority": "priority"}
#: The label values of the labelled counters that exist from the start, at 0: a series that first appears at 1 has
#: no increase (``rate``, ``increase`` and the alerts on them see nothing until its second step), and a dashboard
#: panel of a counter nothing has touched yet would say "No data" instead of 0.
ATTEMPT_RESULTS = ("scheduled", "unschedulable")
BIND_RESULTS = ("bound", "refused", "failed", "uncertain")
#: The kinds the feed parses itself (others, read by the informers, start at their first refusal).
INVALID_KINDS = ("pod", "node", "podgroup", "queue", "topology", "poddisruptionbudget")
#: The preemption reasons as labels, each queue's series made at 0 once the queue is known (see ATTEMPT_RESULTS).
PREEMPTION_LABELS = (*sorted(set(PREEMPTION_REASONS.values())), "other")
#: The extension points timed per plugin, by method name.
EXTENSION_POINTS = ("pre_filter", "filter", "score", "normalize", "reserve", "unreserve")


def base_unit(name: str, amount: float) -> float:
    """An amount in the scheduler's units (CPU in milli-cores) in Prometheus base units (CPU in cores)."""
    return amount / 1000.0 if name == resources.CPU else float(amount)


#: The share of scheduling cycles whose plugin calls are timed, as kube-scheduler samples its plugin metrics
#: (``pluginMetricsSamplePercent``, 10%): timing every call of every what-if of a preemption search cost the loop
#: a tenth of its time (docs/performance.md).
PLUGIN_SAMPLE = 0.1
#: The gauges describing the cluster and the queue, exported by the leader only (see the module notes).
STATE_GAUGES = (
    "gpusched_pending_pods",
    "gpusched_pending_gangs",
    "gpusched_pending_jobs",
    "gpusched_pending_oldest_seconds",
    "gpusched_pending_gated_pods",
    "gpusched_queue_allocated",
    "gpusched_queue_guaranteed",
    "gpusched_queue_limit",
    "gpusched_queue_borrowing_limit",
    "gpusched_queue_borrowed",
    "gpusched_queue_dominant_share",
    "gpusched_queue_rank_share",
    "gpusched_queue_fair_share",
    "gpusched_cluster_gpus",
    "gpusched_cluster_nodes",
    "gpusched_largest_free_gpu_block",
    "gpusched_node_annotation_problems",
)


class _LeaderOnly:
    """A collector of the state gauges that yields them only while ``leading()`` (see the module notes)."""

    def __init__(self, leading: Callable[[], bool]) -> None:
        self.leading = leading
        self.gauges: list[Gauge] = []

    def describe(self) -> list[Metric]:
        return [family for gauge in self.gauges for family in gauge.describe()]

    def collect(self) -> list[Metric]:
        if not self.leading():
            return []
        return [family for gauge in self.gauges for family in gauge.collect()]


class Metrics:
    def __init__(
        self,
        *,
        plugin_sample: float = PLUGIN_SAMPLE,
        seed: int | None = None,
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        """``leading`` says, at each scrape, whether this replica exports the state gauges (:data:`STATE_GAUGES`);
        the operator passes whether it holds the Lease."""
        #: Whether the current cycle's plugin calls are timed (:meth:`cycle_starts`).
        self.timing = True
        #: Each instrumented framework with its plugins, timed and not (:meth:`instrument`).
        self._instrumented: list[tuple[Framework, _Instrumented]] = []
        self._plugin_sample = plugin_sample
        self._sampler = random.Random(seed)
        self.registry = CollectorRegistry()
        r = self.registry
        self._state = _LeaderOnly(leading)
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        if GC_COLLECTOR is not None:
            GCCollector(registry=r)
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
        self.cycle_duration = Histogram(
            "gpusched_scheduling_cycle_duration_seconds",
            "One scheduling cycle: a pod or a whole gang, from taking it off the queue to a decision.",
            buckets=_CYCLE_BUCKETS,
            registry=r,
        )
        self.plugin_duration = Histogram(
            "gpusched_plugin_duration_seconds",
            "One call of a plugin at an extension point (a filter or score call covers every node at once); the calls"
            " of one scheduling cycle in ten, sampled as kube-scheduler samples its plugin metrics.",
            ["plugin", "extension_point"],
            buckets=_CYCLE_BUCKETS,
            registry=r,
        )
        self.preemptions = Counter(
            "gpusched_preemptions",
            "Pods deleted to make room, by reason (reclaim: a queue's guarantee; priority: within a queue) and the"
            " victim's queue.",
            ["reason", "queue"],
            registry=r,
        )
        self.moves = Counter(
            "gpusched_consolidation_moves",
            "Pods evicted by consolidation to move them to another node (their controllers recreate them).",
            registry=r,
        )
        self.moved_gpus = Counter(
            "gpusched_consolidation_moved_gpus",
            "Whole GPUs the moved pods held on the nodes they left (the room consolidation freed).",
            registry=r,
        )
        self.move_refusals = Counter(
            "gpusched_consolidation_refusals",
            "Consolidation plans abandoned because an eviction was refused (a PodDisruptionBudget).",
            registry=r,
        )
        self.pending_pods = Gauge(
            "gpusched_pending_pods", "Pods waiting to be scheduled, by queue.", ["queue"], registry=None
        )
        self.pending_gangs = Gauge(
            "gpusched_pending_gangs", "Gangs waiting to be scheduled, by queue.", ["queue"], registry=None
        )
        self.pending_oldest = Gauge(
            "gpusched_pending_oldest_seconds",
            "How long the longest-waiting pending pod of each queue has existed (from its creationTimestamp): what the"
            " pods-waiting alert watches, since a histogram of waits sees a pod only once it is bound.",
            ["queue"],
            registry=None,
        )
        self.pending_gated = Gauge(
            "gpusched_pending_gated_pods",
            "Pods of gpusched held back by scheduling gates, waiting for admission (never tried, not unschedulable),"
            " by who holds them: kueue (Kueue's gates) or other.",
            ["held_by"],
            registry=None,
        )
        self.pending_jobs = Gauge(
            "gpusched_pending_jobs",
            "Jobs (a pod, or a gang) in the scheduling queue, by where they wait: active (ready to be tried),"
            " backoff, unschedulable (until a cluster event may help), in-flight (being scheduled).",
            ["state"],
            registry=None,
        )
        self.queue_allocated = Gauge(
            "gpusched_queue_allocated",
            "What each queue's pods hold (a parent: its subtree), by resource, in base units (CPU in cores).",
            ["queue", "resource"],
            registry=None,
        )
        self.queue_guaranteed = Gauge(
            "gpusched_queue_guaranteed",
            "Each queue's guarantee (nominal quota), by resource, in base units.",
            ["queue", "resource"],
            registry=None,
        )
        self.queue_limit = Gauge(
            "gpusched_queue_limit",
            "Each queue's limit, by resource, in base units (only resources it limits).",
            ["queue", "resource"],
            registry=None,
        )
        self.queue_borrowing_limit = Gauge(
            "gpusched_queue_borrowing_limit",
            "The most each queue may hold above its guarantee, by resource, in base units (only where set).",
            ["queue", "resource"],
            registry=None,
        )
        self.queue_borrowed = Gauge(
            "gpusched_queue_borrowed",
            "What each queue holds above its guarantee (may be reclaimed), by resource, in base units.",
            ["queue", "resource"],
            registry=None,
        )
        self.queue_share = Gauge(
            "gpusched_queue_dominant_share",
            "Weighted dominant share of each queue, decayed usage included (status.dominantShare).",
            ["queue"],
            registry=None,
        )
        self.queue_rank_share = Gauge(
            "gpusched_queue_rank_share",
            "What each leaf queue is ordered by: its share beyond its guarantee over weight (status.rankShare).",
            ["queue"],
            registry=None,
        )
        self.queue_fair_share = Gauge(
            "gpusched_queue_fair_share",
            "Each queue's fair share of the cluster (dominant, water-filled over demand; status.fairShare).",
            ["queue"],
            registry=None,
        )
        self.cluster_gpus = Gauge(
            "gpusched_cluster_gpus",
            "Whole GPUs of schedulable nodes: total, allocated (any share used), partial (partly used), free"
            " (wholly free).",
            ["state"],
            registry=None,
        )
        self.cluster_nodes = Gauge(
            "gpusched_cluster_nodes",
            "Schedulable GPU nodes: total, idle (every GPU free), stranded (free GPUs but under 1 CPU core or"
            " 1 GiB of memory free: the GPUs cannot be used).",
            ["state"],
            registry=None,
        )
        self.largest_free_block = Gauge(
            "gpusched_largest_free_gpu_block",
            "The most wholly free GPUs on one schedulable node: the largest whole-GPU pod that fits now.",
            registry=None,
        )
        self.node_annotation_problems = Gauge(
            "gpusched_node_annotation_problems",
            "Nodes whose annotation was refused (their GPUs are treated as unknown), by annotation.",
            ["annotation"],
            registry=None,
        )
        self._state.gauges = [g for g in vars(self).values() if isinstance(g, Gauge) and g._name in STATE_GAUGES]
        r.register(self._state)
        self.is_leader = Gauge("gpusched_is_leader", "1 on the replica that schedules, else 0.", registry=r)
        self.ready = Gauge("gpusched_ready", "1 once the first full listing is in the cache.", registry=r)
        self.can_lead = Gauge(
            "gpusched_can_lead",
            "0 while the API server refuses this replica the Lease (it can neither lead nor take over: /readyz says"
            " why), else 1; set at each scrape.",
            registry=r,
        )
        self.can_lead.set(1.0)
        self.api_available = Gauge(
            "gpusched_api_available",
            "1 when the cluster serves this optional API, 0 when it does not and its feature is off (looked up once at "
            "start; scheduler.k8s.feeds.discovery).",
            ["group_version"],
            registry=r,
        )
        self.invalid_objects = Counter(
            "gpusched_invalid_objects", "Objects that could not be parsed, by kind.", ["kind"], registry=r
        )
        for counter, values in (
            (self.schedule_attempts, ATTEMPT_RESULTS),
            (self.binds, BIND_RESULTS),
            (self.invalid_objects, INVALID_KINDS),
        ):
            for value in values:
                counter.labels(value)
        self._labelled: dict[str, set[tuple[str, ...]]] = {}
        #: The queues a label may name (set at each refresh from the loop's tree).
        self._queues: frozenset[str] = frozenset({DEFAULT_QUEUE})
        #: The queues whose preemption series exist (at 0 until a pod of theirs is preempted).
        self._preemptions_zeroed: set[str] = set()

    # --- updated where things happen ---------------------------------------------------------------------------

    def preempted(self, queue: str, reason: str) -> None:
        """One pod deleted to make room; ``reason`` is the Event's message, reduced to a label."""
        label = next((word for text, word in PREEMPTION_REASONS.items() if text in reason), "other")
        self.preemptions.labels(label, self.queue_label(queue)).inc()

    def moved(self, pods: int, gpus: int) -> None:
        """Consolidation moved ``pods`` holding ``gpus`` whole GPUs."""
        self.moves.inc(pods)
        self.moved_gpus.inc(gpus)

    def queue_label(self, queue: str) -> str:
        """``queue`` if it exists (or is ``default``), else ``unknown``: label values stay bounded."""
        return queue if queue in self._queues else "unknown"

    def cycle_starts(self) -> None:
        """A scheduling cycle begins: its plugin calls are timed with the chance :data:`PLUGIN_SAMPLE` (calls
        outside cycles, e.g. explain's what-ifs, go with the last cycle's draw)."""
        timing = self._sampler.random() < self._plugin_sample
        if timing != self.timing:
            self.timing = timing
            for framework, plugins in self._instrumented:
                plugins.put(framework, timed=timing)

    def instrument(self, framework: Framework) -> None:
        """Time the plugin calls of ``framework``'s sampled cycles (:meth:`cycle_starts`) into
        ``gpusched_plugin_duration_seconds``. The framework's lists hold the timed plugins in a sampled cycle and the
        plugins themselves in the others (swapped in place when the draw changes: a cycle not sampled pays nothing);
        either way the framework works as before."""
        plugins = _Instrumented(
            plain=(
                list(framework.pre_filters),
                list(framework.filters),
                list(framework.reservers),
                list(framework.scorers),
            ),
            timed=(
                [_Timed(p, self) for p in framework.pre_filters],
                [_Timed(p, self) for p in framework.filters],
                [_Timed(p, self) for p in framework.reservers],
                [
                    (
                        _Timed(plugin, self),
                        weight,
                        None if normalize is None else self._timer(_plugin_name(plugin), "normalize", normalize),
                    )
                    for plugin, weight, normalize in framework.scorers
                ],
            ),
        )
        self._instrumented.append((framework, plugins))
        plugins.put(framework, timed=self.timing)

    def _timer(self, plugin: str, point: str, method: Callable[..., Any]) -> Callable[..., Any]:
        histogram = self.plugin_duration.labels(plugin, point)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                histogram.observe(time.perf_counter() - started)

        return timed

    # --- recomputed per scrape ---------------------------------------------------------------------------------

    def refresh_state(
        self,
        loop: SchedulingLoop,
        pending: Mapping[str, PodRequest],
        *,
        node_problems: Collection[str] = (),
        gated: Collection[Gated] = (),
        now: float | None = None,
    ) -> None:
        """Recompute the state gauges from the pods waiting for a node (``pending``), the loop and the cache;
        ``node_problems`` names the nodes whose ``gpusched.io/gpu-topology`` was refused; ``gated`` are the pods held
        by scheduling gates; ``now`` (Unix seconds, default the wall clock) is what pending pods' ages are measured
        against."""
        now = time.time() if now is None else now
        tree = loop.tenancy.tree
        for queue in {DEFAULT_QUEUE, "unknown", *tree} - self._preemptions_zeroed:
            for reason in PREEMPTION_LABELS:
                self.preemptions.labels(reason, queue)
            self._preemptions_zeroed.add(queue)
        self._queues = frozenset({DEFAULT_QUEUE, *tree})
        pods: Tally[str] = Tally()
        oldest: dict[str, float] = {}
        gangs: Tally[str] = Tally()
        for job in loop.jobs.gangs():
            if not job.satisfied and (job.key in loop.queue or job.pending) and job.queue in self._queues:
                gangs[job.queue] += 1
        for pod in pending.values():
            queue = loop.queue_of(pod)
            if queue in self._queues:
                pods[queue] += 1
                if pod.created:  # 0: no creationTimestamp (never from the API server)
                    oldest[queue] = max(oldest.get(queue, 0.0), now - pod.created)
        # Every queue, 0 where nothing waits: a panel or an alert on one queue sees 0, not a gap.
        self._set(self.pending_pods, {(q,): float(pods[q]) for q in self._queues})
        self._set(self.pending_gangs, {(q,): float(gangs[q]) for q in self._queues})
        self._set(self.pending_oldest, {(q,): max(0.0, age) for q, age in oldest.items()})
        held: Tally[str] = Tally("kueue" if g.by_kueue else "other" for g in gated)
        for by in ("kueue", "other"):
            self.pending_gated.labels(by).set(float(held.get(by, 0)))
        states: Tally[str] = Tally(where for _, where in loop.queue.pending())
        for state in ("active", "backoff", "unschedulable", "in-flight"):
            self.pending_jobs.labels(state).set(float(states.get(state, 0)))

        statuses = loop.queue_statuses()
        allocated: dict[tuple[str, ...], float] = {
            (q, name): base_unit(name, amount)
            for q, status in statuses.items()
            for name, amount in status.allocated.items()
            if amount
        }
        self._set(self.queue_allocated, allocated)
        borrowed: dict[tuple[str, ...], float] = {
            (q, name): base_unit(name, amount)
            for q, status in statuses.items()
            for name, amount in status.borrowed.items()
            if amount
        }
        self._set(self.queue_borrowed, borrowed)
        guaranteed: dict[tuple[str, ...], float] = {}
        limit: dict[tuple[str, ...], float] = {}
        borrowing: dict[tuple[str, ...], float] = {}
        for queue in tree:
            spec = tree.spec(queue)
            for into, values in ((guaranteed, spec.guaranteed), (limit, spec.limit), (borrowing, spec.borrowing_limit)):
                for name, amount in values.items():
                    into[(queue, name)] = base_unit(name, float(amount))
        self._set(self.queue_guaranteed, guaranteed)
        self._set(self.queue_limit, limit)
        self._set(self.queue_borrowing_limit, borrowing)
        self._set(self.queue_share, {(q,): st.dominant_share for q, st in statuses.items()})
        self._set(self.queue_fair_share, {(q,): st.fair_share for q, st in statuses.items()})
        self._set(
            self.queue_rank_share, {(q,): st.rank_share for q, st in statuses.items() if st.rank_share is not None}
        )

        a = loop.scheduler.cache.arrays
        usable = a.base_reason != layout.ABSENT
        counts = a.gpu_count[usable]
        free = a.gpu_free[usable]
        present = np.arange(free.shape[1])[None, :] < counts[:, None]
        used = present & (free < layout.WHOLE)
        partial = used & (free > 0)
        whole_free = (present & (free >= layout.WHOLE)).sum(axis=1)
        self.cluster_gpus.labels("total").set(float(counts.sum()))
        self.cluster_gpus.labels("allocated").set(float(used.sum()))
        self.cluster_gpus.labels("partial").set(float(partial.sum()))
        self.cluster_gpus.labels("free").set(float(whole_free.sum()))
        room = a.cap[usable] - a.used[usable]
        gpu_nodes = counts > 0
        stranded = gpu_nodes & (whole_free > 0)
        stranded &= (room[:, layout.CPU] < STRANDED_CPU * 1000) | (room[:, layout.MEMORY] < STRANDED_MEMORY)
        self.cluster_nodes.labels("total").set(float(gpu_nodes.sum()))
        self.cluster_nodes.labels("idle").set(float((gpu_nodes & (whole_free == counts)).sum()))
        self.cluster_nodes.labels("stranded").set(float(stranded.sum()))
        self.largest_free_block.set(float(whole_free.max()) if whole_free.size else 0.0)
        self.node_annotation_problems.labels(GPU_TOPOLOGY).set(float(len(node_problems)))

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


@dataclass(frozen=True)
class _Instrumented:
    """A framework's plugin lists (pre-filters, filters, reservers, scorers), as they are and timed."""

    plain: tuple[list[Any], list[Any], list[Any], list[Any]]
    timed: tuple[list[Any], list[Any], list[Any], list[Any]]

    def put(self, framework: Framework, *, timed: bool) -> None:
        """Fill ``framework``'s lists, in place, with the timed plugins or with the plugins themselves."""
        pre_filters, filters, reservers, scorers = self.timed if timed else self.plain
        framework.pre_filters[:] = pre_filters
        framework.filters[:] = filters
        framework.reservers[:] = reservers
        framework.scorers[:] = scorers


class _Timed:
    """A plugin whose extension-point calls are timed; every other attribute is the plugin's own."""

    def __init__(self, plugin: Any, metrics: Metrics) -> None:
        self._plugin = plugin
        name = _plugin_name(plugin)
        for point in EXTENSION_POINTS:
            method = getattr(plugin, point, None)
            if callable(method):
                setattr(self, point, metrics._timer(name, point, method))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._plugin, name)


def _plugin_name(plugin: Any) -> str:
    return str(getattr(plugin, "name", "") or type(plugin).__name__)
