"""Tenancy: which queue a job belongs to, what each queue holds, and in which order queues get the next job.

The loop asks three things of it: may this job run in its queue at all (the leaf and every ancestor stay within
their limit and borrowing ceiling), how to order pending work (leaves below their guarantee first, then by
weighted dominant share of decayed usage plus current allocation, see ``scheduler.queue.fairshare``), and what to
charge and release as jobs are placed and leave.

Invariant: ``allocated[leaf]`` is the sum of the requests of the pods held in ``leaf``, whatever order they were
held, moved and released in: each pod is held at most once (keyed by pod), in one leaf at a time, and the sums are
kept in integers (CPU in milli-cores, memory in bytes, GPUs in milli-GPUs), so a queue whose pods have all left
holds exactly nothing (float sums of shared-GPU fractions used to end at -3.6e-15, and the fair-share
computation rejected the negative demand).

Pods another scheduler bound (kube-scheduler's, on shared nodes) are held by no queue: :meth:`Tenancy.hold_outside`
keeps their sum apart, and :meth:`Tenancy.capacity`, what the fair shares, the dominant shares and the capacity
kept idle for queues that do not lend are computed over, is the cluster less that sum. Guarantees are promises
about what the other schedulers leave (docs/operator.md, "Running beside kube-scheduler").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from scheduler.api.basics import resources
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.crds.queue import QueueSpec, QueueTree
from scheduler.api.devices import nvidia_gpus
from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import Cache
from scheduler.kernels import layout
from scheduler.queue import fairshare

Vector = dict[str, float]


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """A queue's status in numbers, in the scheduler's units (CPU in milli-cores, memory in bytes, GPUs in GPUs):
    ``scheduler.k8s.status`` writes it as Kubernetes quantities, the metrics read it as it is."""

    #: What the queue (and, for a parent, its subtree) holds.
    allocated: Vector
    #: The part of ``allocated`` within the guarantee.
    guaranteed_in_use: Vector
    #: The part of ``allocated`` beyond the guarantee, per resource held beyond it.
    borrowed: Vector
    #: The decayed usage history.
    decayed_usage: Vector
    #: Pods (and gangs) waiting in the queue, summed up the tree.
    pending_pods: int
    pending_gangs: int
    #: The weighted dominant share of allocation plus decayed usage.
    dominant_share: float
    #: The dominant share of the water-filled fair share.
    fair_share: float
    #: The leaf's sort key (share beyond guarantee over weight; lower goes first); None for a parent.
    rank_share: float | None
    #: The queue's GPU limit (the LIMIT column), None when it has none.
    gpu_limit: float | None = None


def request_of(pod: PodRequest, *, device_milli: int | None = None) -> Vector:
    """What a pod counts against its queue: its requests, GPUs in GPUs (a shared GPU as a fraction, a MIG device as
    the share of a GPU its compute slices are: :func:`exact_request_of`)."""
    return {name: _to_float(name, amount) for name, amount in exact_request_of(pod, device_milli=device_milli).items()}


def exact_request_of(pod: PodRequest, *, device_milli: int | None = None) -> dict[str, int]:
    """What a pod counts against its queue in integers: its requests, GPUs in milli-GPUs.

    ``nvidia.com/gpu`` adds the pod's GPUs, whole or a shared fraction; for a pod of whole GPUs, ``device_milli``
    each: what one GPU slot of the node that holds it is (a MIG device's share on a node of the single MIG strategy,
    ``Cache.mig_slots``). A pod not placed (``device_milli`` None) counts whole GPUs, as it may get them, unless its
    node selector or GPU models keep it to MIG devices (``nvidia_gpus.asked_single_strategy_milli``). MIG devices
    asked by NVIDIA's device plugin's names (``nvidia.com/mig-3g.40gb``, the mixed strategy) add their share of a
    GPU too (428 each), and count under their own name as well (a Queue may bound them by name)."""
    vector = {name: int(amount) for name, amount in pod.resources.items() if name != resources.PODS}
    gpu = pod.gpu.total_milli if pod.gpu.count else 0
    if pod.gpu.whole:
        if device_milli is None:
            device_milli = (
                nvidia_gpus.asked_single_strategy_milli(pod.node_selector, pod.gpu.models) or resources.MILLI_PER_GPU
            )
        gpu = pod.gpu.count * min(device_milli, resources.MILLI_PER_GPU)
    for name, amount in pod.resources.items():
        if name.startswith(nvidia_gpus.DEVICE_PLUGIN_MIG_PREFIX):
            gpu += int(amount) * nvidia_gpus.device_plugin_mig_milli(name)
    if gpu:
        vector[resources.GPU] = gpu
    return vector


def device_milli(cache: Cache, pod: PodRequest) -> int | None:
    """The share of a GPU (milli) one GPU slot of the node that holds ``pod`` is: a MIG device's on a node of the
    single MIG strategy (``Cache.mig_slots``), else 1000; None when the pod is on no node the cache knows."""
    entry = cache.pod(pod.key)
    slot = entry.placement.slot if entry is not None else cache.slot_of(pod.node_name)
    return cache.mig_slots.get(slot, resources.MILLI_PER_GPU) if slot is not None else None


def placed_requests_of(cache: Cache, pods: Iterable[PodRequest]) -> Vector:
    """What placed pods count against their queue (:func:`requests_of`, each on the node that holds it)."""
    total: Vector = {}
    for pod in pods:
        add_into(total, request_of(pod, device_milli=device_milli(cache, pod)))
    return total


def _to_float(name: str, amount: int) -> float:
    return amount / 1000.0 if name == resources.GPU else float(amount)


def add_into(into: Vector, other: Mapping[str, float], sign: float = 1.0) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, 0.0) + sign * amount


def requests_of(pods: Iterable[PodRequest]) -> Vector:
    """What a job (one pod, or a gang's members) counts against its queue."""
    total: Vector = {}
    for pod in pods:
        add_into(total, request_of(pod))
    return total


class Tenancy:
    def __init__(self, cache: Cache, *, clock: Callable[[], float]) -> None:
        self.cache = cache
        self.clock = clock
        self.tree, _ = QueueTree.build([])
        self.history = fairshare.UsageHistory(clock=clock)
        self.history.configure(self.tree)
        #: What each leaf holds (derived from ``_exact``; read it, never write it).
        self.allocated: dict[str, Vector] = {}
        #: Pod key -> (leaf, what it holds in integers).
        self._held: dict[str, tuple[str, dict[str, int]]] = {}
        #: Per leaf, the integer sums behind ``allocated``.
        self._exact: dict[str, dict[str, int]] = {}
        self._rank: dict[str, fairshare.LeafKey] = {}
        #: Pod key -> what a pod another scheduler bound holds (in integers); charged to no queue.
        self._outside: dict[str, dict[str, int]] = {}
        #: The integer sum of ``_outside``.
        self._outside_exact: dict[str, int] = {}
        #: :meth:`capacity` as last computed, and at which (nodes' version, columns, outside pods' version).
        self._capacity_at: tuple[tuple[int, int, int], Vector] | None = None
        self._outside_version = 0
        #: Fair shares for the gate (per demand variant, queue and resource); None when allocation or demand
        #: changed since.
        self._fair: dict[str, dict[str, Vector]] | None = None
        #: Every queue's subtree allocation; None when an allocation or the tree changed since.
        self._totals: dict[str, Vector] | None = None
        self._stale = True
        #: Queues that exist but are not in use, with why: left out of the tree (an unknown parent, a cycle,
        #: guarantees above the parent's), or unreadable (:meth:`set_unreadable`).
        self.refused: dict[str, str] = {}
        self._left_out: dict[str, str] = {}
        self._unreadable: dict[str, str] = {}

    # --- queues ------------------------------------------------------------------------------------------------

    def set_queues(self, specs: Iterable[QueueSpec]) -> list[InvalidObject]:
        """Take the cluster's Queues; returns the ones that could not be used (cycles, unknown parents, ...)."""
        self.tree, problems = QueueTree.build(specs)
        self._left_out = {
            problem.obj.removeprefix("queue "): problem.reason
            for problem in problems
            if problem.obj.removeprefix("queue ") not in self.tree
        }
        self.refused = {**self._unreadable, **self._left_out}
        self.history.configure(self.tree)
        self._stale = True
        self._fair = None
        self._totals = None
        return problems

    def set_unreadable(self, name: str, reason: str) -> None:
        """Queue ``name`` exists but cannot be read (``reason``), or can again (``reason`` empty)."""
        if reason:
            self._unreadable[name] = reason
        else:
            self._unreadable.pop(name, None)
        self.refused = {**self._unreadable, **self._left_out}

    def problem(self, leaf: str) -> str:
        """Why work cannot be queued in ``leaf`` (empty if it can)."""
        if leaf not in self.tree and leaf in self.refused:
            return f"queue {leaf!r} is not accepted: {self.refused[leaf]}"
        if leaf not in self.tree:
            return f"queue {leaf!r} does not exist"
        if not self.tree.is_leaf(leaf):
            return f"queue {leaf!r} has child queues; only leaf queues hold work"
        return ""

    # --- limits ------------------------------------------------------------------------------------------------

    def over_ceiling(self, leaf: str, request: Mapping[str, float]) -> str:
        """Why ``request`` may not run in ``leaf`` now (a limit or borrowing ceiling of the leaf or an ancestor
        would be crossed: hierarchical limits hold at every level), or ""."""
        if self._totals is None:
            self._totals = fairshare.subtree_totals(self.tree, self.allocated)
        totals = self._totals
        line = [leaf, *self.tree.ancestors(leaf)]
        for queue in line:
            for name, bound in self.tree.spec(queue).ceiling().items():
                wanted = totals[queue].get(name, 0.0) + request.get(name, 0.0)
                if wanted > bound:
                    return f"queue {queue!r} would hold {wanted:g} {name}, above its ceiling {bound:g}"
        return self._not_lent(line, request, totals)

    def _not_lent(self, line: list[str], request: Mapping[str, float], totals: Mapping[str, Vector]) -> str:
        """Why ``request`` would use capacity another queue keeps for itself (``lending``), or "".

        A queue that does not lend (all or part of its guarantee) keeps ``unlendable - what it holds`` idle for
        itself; work of queues outside it may use only the rest of the cluster. A parent and its child that both
        keep capacity are both counted (the safe side)."""
        kept: Vector = {}
        keepers: dict[str, str] = {}
        for queue in self.tree:
            if queue in line:
                continue
            for name, amount in self.tree.spec(queue).unlendable().items():
                idle = amount - totals[queue].get(name, 0.0)
                if idle > 0 and request.get(name, 0.0) > 0:
                    kept[name] = kept.get(name, 0.0) + idle
                    keepers.setdefault(name, queue)
        if not kept:
            return ""
        capacity = self.capacity()
        for name, idle in kept.items():
            used = sum(totals[root].get(name, 0.0) for root in self.tree.roots())
            if used + request.get(name, 0.0) + idle > capacity.get(name, 0.0) + 1e-9:
                return (
                    f"the rest of the cluster's {name} is kept idle for queues that do not lend it "
                    f"({idle:g}, e.g. queue {keepers[name]!r})"
                )
        return ""

    def within_guarantee(self, leaf: str, request: Mapping[str, float]) -> bool:
        """Whether ``request`` on top of what ``leaf`` holds stays within its guarantee (reclaim may help it)."""
        if leaf not in self.tree or not self.tree.guaranteed(leaf):
            return False
        return fairshare.within_guarantee(self.tree, leaf, request, allocated=self.allocated)

    def borrowing(self, leaf: str) -> bool:
        """Whether ``leaf`` holds more of some resource than its guarantee (its surplus may be reclaimed)."""
        if leaf not in self.tree:
            return True
        guaranteed = self.tree.guaranteed(leaf)
        return any(amount > guaranteed.get(name, 0.0) + 1e-9 for name, amount in self.allocated.get(leaf, {}).items())

    def surplus(self, leaf: str) -> dict[str, float] | None:
        """What ``leaf`` holds beyond its guarantee of each resource the guarantee names (None without one): the
        most reclaim may take from it."""
        if leaf not in self.tree:
            return None
        guaranteed = self.tree.guaranteed(leaf)
        if not guaranteed:
            return None
        held = self.allocated.get(leaf, {})
        return {name: held.get(name, 0.0) - amount for name, amount in guaranteed.items()}

    def reclaim_policy(self, leaf: str) -> str:
        return self.tree.spec(leaf).reclaim if leaf in self.tree else "Never"

    def within_queue_policy(self, leaf: str) -> str:
        return self.tree.spec(leaf).within_queue if leaf in self.tree else "Never"

    # --- accounting ----------------------------------------------------------------------------------------------

    def hold(self, pod: PodRequest, leaf: str) -> bool:
        """Count ``pod`` in ``leaf`` (moved there if it was held in another leaf), with what it asks for now: a
        bound pod whose request changes (an annotation edited into something malformed counts its shared GPU whole,
        ``scheduler.api.objects.pod.parse_bound_pod``) is counted as a replica started afterwards would count it. A pod
        with
        ResourceClaims keeps what it was counted with: the watch's object does not carry its claims' GPUs. False if
        nothing changed."""
        held = self._held.get(pod.key)
        if held is not None and pod.resource_claims:
            request = held[1]
        else:
            request = exact_request_of(pod, device_milli=self._device_milli(pod))
        if held is not None and held == (leaf, request):
            return False
        if held is not None:
            self._add(held[0], held[1], -1)
        self._held[pod.key] = (leaf, request)
        self._add(leaf, request, 1)
        return True

    def _device_milli(self, pod: PodRequest) -> int | None:
        return device_milli(self.cache, pod)

    def release(self, key: str) -> bool:
        """Stop counting pod ``key`` (in its queue, or outside any); False if it was not held (nothing changed)."""
        outside = self._outside.pop(key, None)
        if outside is not None:
            self._add_outside(outside, -1)
            return True
        held = self._held.pop(key, None)
        if held is None:
            return False
        self._add(held[0], held[1], -1)
        return True

    def hold_outside(self, pod: PodRequest) -> bool:
        """Count ``pod``, bound by another scheduler, as holding capacity no queue has (what it asks now: a pod
        resized in place counts its new requests); False if it already was, as it is."""
        request = exact_request_of(pod)
        held = self._outside.get(pod.key)
        if held == request:
            return False
        if held is not None:
            self._add_outside(held, -1)
        self._outside[pod.key] = request
        self._add_outside(request, 1)
        return True

    def is_outside(self, key: str) -> bool:
        """Whether pod ``key`` is one another scheduler bound (held by no queue, never evicted by gpusched)."""
        return key in self._outside

    def outside(self) -> Vector:
        """What the pods other schedulers bound hold, GPUs in GPUs: the part of the cluster no queue has."""
        return {name: _to_float(name, amount) for name, amount in self._outside_exact.items() if amount}

    def _add_outside(self, request: Mapping[str, int], sign: int) -> None:
        for name, amount in request.items():
            self._outside_exact[name] = self._outside_exact.get(name, 0) + sign * amount
        # The capacity left to the queues moved: shares, ranks and the fair-share gate are recomputed.
        self._outside_version += 1
        self._stale = True
        self._fair = None

    def _add(self, leaf: str, request: Mapping[str, int], sign: int) -> None:
        exact = self._exact.setdefault(leaf, {})
        vector = self.allocated.setdefault(leaf, {})
        for name, amount in request.items():
            total = exact.get(name, 0) + sign * amount
            exact[name] = total
            vector[name] = _to_float(name, total)
        self._stale = True
        self._fair = None
        self._totals = None

    def record_usage(self, dt_s: float) -> None:
        """Add ``dt_s`` seconds of every queue's current allocation to its decayed history."""
        if dt_s <= 0:
            return
        for leaf, vector in self.allocated.items():
            if leaf in self.tree:
                self.history.record(leaf, vector, dt_s)
        self._stale = True

    def capacity(self) -> Vector:
        """What the queues share: the present nodes' capacity less what pods of other schedulers hold (never below
        zero); GPUs in GPUs: whole GPUs, and MIG devices as their share of a GPU (the GPU slots of single-strategy
        nodes, and the mixed strategy's ``nvidia.com/mig-<profile>``), as queues count them.

        Computed again only when a node, a resource column (a pod may ask for a resource no node has) or another
        scheduler's pod changed since: the queues' ranks ask after every placement, and the sums over every node were
        most of that."""
        at = (self.cache.nodes_version, len(self.cache.columns), self._outside_version)
        if self._capacity_at is not None and self._capacity_at[0] == at:
            return dict(self._capacity_at[1])
        a = self.cache.arrays
        present = a.base_reason != layout.ABSENT
        gpus = float(a.gpu_count[present].sum())
        for slot, milli in self.cache.mig_slots.items():
            gpus -= float(a.gpu_count[slot]) * (1.0 - milli / resources.MILLI_PER_GPU)
        capacity = {}
        for column, name in enumerate(self.cache.columns):
            if column in (layout.GPU_MILLI, layout.GPU_MEMORY, layout.PODS):
                continue
            capacity[name] = float(a.cap[present, column].sum())
            mig = nvidia_gpus.device_plugin_mig_milli(name)
            if mig:
                gpus += capacity[name] * mig / resources.MILLI_PER_GPU
        capacity[resources.GPU] = gpus
        for name, amount in self._outside_exact.items():
            if amount and name in capacity:
                capacity[name] = max(0.0, capacity[name] - _to_float(name, amount))
        self._capacity_at = (at, capacity)
        return dict(capacity)

    # --- fair-share gate ---------------------------------------------------------------------------------------

    def fair_share_gate(
        self,
        leaf: str,
        request: Mapping[str, float],
        starving: Mapping[str, Mapping[str, float]],
        *,
        counted: bool = False,
    ) -> str:
        """Why ``leaf`` may not start ``request`` now, or "": it already holds its fair share of a resource the
        request asks for while another leaf, below its fair share of that resource, has work waiting for room.

        ``starving`` is what each leaf's jobs that failed for lack of room ask for; the fair shares are
        water-filled (``fairshare.fair_shares``) over demand = what each leaf holds + that (+ ``request`` for
        ``leaf``, unless ``counted``: the job is among the starving). Without it, a queue
        that comes first on share but whose jobs are large loses every freed GPU to backfill by others. The gate
        stays work-conserving: when no other queue waits for room below its fair share, anyone may take more.
        """
        if leaf not in self.tree or not starving:
            return ""
        if self._fair is None:
            self._fair = {}
        key = leaf if counted else f"{leaf}+{sorted(request.items())}"
        fair = self._fair.get(key)
        if fair is None:
            demand: dict[str, Vector] = {}
            for name in self.tree.leaves():
                demand[name] = dict(self.allocated.get(name, {}))
                add_into(demand[name], starving.get(name, {}))
            if not counted:
                add_into(demand[leaf], request)
            shares = fairshare.fair_shares(self.tree, capacity=self.capacity(), demand=demand)
            fair = self._fair[key] = {name: share.resources for name, share in shares.items()}
        held = self.allocated.get(leaf, {})
        asked = [r for r, amount in request.items() if amount > 0 and r in fair[leaf]]
        full = [r for r in asked if held.get(r, 0.0) >= fair[leaf][r] - 1e-9]
        for other in starving:
            if other == leaf or other not in fair:
                continue
            below = [r for r in full if self.allocated.get(other, {}).get(r, 0.0) < fair[other].get(r, 0.0) - 1e-9]
            if below:
                r = below[0]
                return (
                    f"queue {leaf!r} holds its fair share of {r} ({held.get(r, 0.0):g} of {fair[leaf][r]:g}) while "
                    f"queue {other!r}, below its share ({self.allocated.get(other, {}).get(r, 0.0):g} of "
                    f"{fair[other][r]:g}), waits for room"
                )
        return ""

    def demand_changed(self) -> None:
        """What some leaf waits for changed: the fair shares of the gate are recomputed on next use."""
        self._fair = None

    # --- status ------------------------------------------------------------------------------------------------

    def statuses(
        self, *, pending: Mapping[str, Vector], pending_pods: Mapping[str, int], pending_gangs: Mapping[str, int]
    ) -> dict[str, QueueStatus]:
        """Every queue's status in numbers (the operator writes it to the Queue object).

        ``pending`` is what each leaf's waiting work asks for (it and what the leaf holds are its demand for the
        fair share); the counts are per leaf, summed up the tree.
        """
        capacity = self.capacity()
        totals = fairshare.subtree_totals(self.tree, self.allocated)
        history = fairshare.subtree_totals(self.tree, {leaf: self.history.average(leaf) for leaf in self.tree.leaves()})
        demand: dict[str, Vector] = {}
        for leaf in self.tree.leaves():
            demand[leaf] = dict(self.allocated.get(leaf, {}))
            add_into(demand[leaf], pending.get(leaf, {}))
        fair = fairshare.fair_shares(self.tree, capacity=capacity, demand=demand)
        pods = fairshare.subtree_totals(self.tree, {q: {"n": float(n)} for q, n in pending_pods.items()})
        gangs = fairshare.subtree_totals(self.tree, {q: {"n": float(n)} for q, n in pending_gangs.items()})
        keys = {leaf: self.rank(leaf) for leaf in self.tree.leaves()}
        out: dict[str, QueueStatus] = {}
        for name in self.tree:
            spec = self.tree.spec(name)
            held = totals[name]
            guaranteed = self.tree.guaranteed(name)
            counted = fairshare.counted_resources(self.tree, name)
            out[name] = QueueStatus(
                allocated=dict(held),
                guaranteed_in_use={r: min(held.get(r, 0.0), amount) for r, amount in guaranteed.items()},
                # Only what the queue is ranked on: a queue guaranteed GPUs does not borrow the CPU and memory its
                # GPU pods come with (it showed them borrowed while its GPU column was blank).
                borrowed={
                    r: held[r] - guaranteed.get(r, 0.0)
                    for r in held
                    if (counted is None or r in counted) and held[r] > guaranteed.get(r, 0.0)
                },
                decayed_usage=dict(history[name]),
                pending_pods=int(pods[name].get("n", 0.0)),
                pending_gangs=int(gangs[name].get("n", 0.0)),
                dominant_share=fairshare.dominant_share(
                    allocated=held, decayed_usage=history[name], capacity=capacity, weight=spec.weight
                ),
                fair_share=fair[name].dominant,
                rank_share=keys[name][1][-1][0] if name in keys else None,
                gpu_limit=spec.limit.get(resources.GPU),
            )
        return out

    # --- order -------------------------------------------------------------------------------------------------

    def rank(self, leaf: str) -> fairshare.LeafKey:
        """Sort key of a leaf: below its guarantee first, then the hierarchical path of borrowed shares over weight
        (``scheduler.queue.fairshare.leaf_keys``); a name that is not a leaf goes last."""
        if self._stale:
            history = {
                leaf: (self.history.average(leaf) if self.history.half_life(leaf) > 0 else None)
                for leaf in self.tree.leaves()
            }
            self._rank = fairshare.leaf_keys(
                self.tree, allocated=self.allocated, capacity=self.capacity(), decayed_usage=history
            )
            self._stale = False
        return self._rank.get(leaf, (2, [(0.0, 0, leaf)]))
