"""Fair sharing between queues: usage history, dominant shares, hierarchical fair shares, the order of queues.

Pure functions on resource vectors: dicts of resource name to amount, in scheduler units (milli-CPU, bytes,
whole GPUs); a resource not named is 0. Everything is deterministic: ties go by queue name.

The formulas
------------
History. A queue's usage ``U`` is kept in resource-seconds and halves every half-life ``h``
(``spec.usageHalfLifeSeconds``)::

    U(t + e) = U(t) * 2^(-e / h)                      h = 0: no history, U = 0

A queue that held ``a`` for the last ``dt`` seconds adds the decayed integral over that time, so the result does
not depend on how often samples are taken::

    U += a * tau * (1 - 2^(-dt / h))                  tau = h / ln 2, the mean life

Shares compare ``U`` as an average allocation, ``Ubar = U / tau`` (resource units). Held forever, ``a`` gives
``Ubar = a``: this is the continuous form of Kueue's Admission Fair Sharing, which samples every interval ``i``
and keeps ``usage = (1 - alpha) * usage + alpha * current`` with ``alpha = 1 - 0.5^(i / h)``.

Dominant share (DRF, Ghodsi et al., NSDI 2011, with weights), what ``status.dominantShare`` shows::

    share(q) = max over r with C[r] > 0 of (Ubar[q][r] + A[q][r]) / C[r], divided by weight(q)

``A`` is what the queue holds now, ``C`` the cluster's capacity; for a parent, ``Ubar`` and ``A`` are the sums over
its subtree.

Order. Queues are ordered by their *borrowed* dominant share, as Kueue's fair sharing does (what a queue holds
beyond its guarantee, over weight), so that under saturation every queue converges to its fair share below
(guarantee, then the rest by weight), and by usage that blends history and present::

    u[q][r]        = (Ubar[q][r] + A[q][r]) / 2      (A[q][r] when the queue keeps no history: half-life 0)
    borrowed(q)    = max over r with C[r] > 0 of (u[q][r] - G[q][r]) / C[r]
    rank_share(q)  = borrowed(q) / weight(q)          when borrowed(q) >= 0
                   = borrowed(q)                      when below its guarantee (the largest deficit goes first)

``G`` is the queue's guarantee (:meth:`QueueTree.guaranteed`). A queue whose guarantee or limit names some
resources is ranked on those only (Kueue counts only the resources a ClusterQueue covers): a queue guaranteed
GPUs does not borrow the CPU its GPU jobs come with. A queue that names none is ranked on all.

Held steadily, ``u = A``; a queue that held ``a`` for a long time and holds nothing now counts ``a/2``, one that
just got ``a`` counts ``a/2`` too, so history moves a queue back only as far as it has used more than others
lately.

Fair share (:func:`fair_shares`), for each resource on its own, top-down from the cluster's capacity, the way
KAI-Scheduler's proportion plugin divides each resource. At every level, with ``x`` to divide among children::

    want(c)  = min(ceiling(c), max(demand(c), unlendable(c)))
               demand(leaf) is given; demand(parent) = sum of its children's want
    base(c)  = min(guarantee(c), want(c))             guarantees first, as far as asked for
               (if the bases do not fit in x, each gets the same fraction of its base)
    extra(c) = water-filling of x - sum(base) by weight, each child up to want(c) - base(c)
    share(c) = base(c) + extra(c)

``ceiling`` is :meth:`QueueSpec.ceiling` (limit, borrowing limit, or the guarantee when borrowing is off), and
``unlendable`` is the part of the guarantee a queue keeps idle for itself (:meth:`QueueSpec.unlendable`): a queue
that does not lend has its whole guarantee in its fair share even when it asks for less. Water-filling raises a
level ``L`` until the capacity is used or every child has what it wants: child ``c`` gets ``min(cap(c), L * w(c))``.
Resources are divided independently because guarantees, limits and lending are per resource; what a single job
needs of several resources at once is what the dominant-share ordering of :func:`leaf_keys` is about. The
scalar fair share is ``max over r of share[r] / C[r]`` (not divided by weight).

Order (:func:`leaf_keys`, by which the loop sorts pending work): leaves below their guarantee first, then the
others; within each group, hierarchically by
``(rank_share(q), -priority(q), name)``: compare the top-level queues the two leaves are under, then the next
level down where they differ, and so on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import overload

import numpy as np
from numpy.typing import NDArray

from scheduler.api.crds.queue import DEFAULT_HALF_LIFE_S, QueueTree

#: A resource vector: resource name -> amount in scheduler units. A resource not named is 0.
Vector = dict[str, float]
ResourceVectors = Mapping[str, Mapping[str, float]]


def _decay_factor(elapsed_s: float, half_life_s: float) -> float:
    if not half_life_s >= 0 or math.isinf(half_life_s):
        raise ValueError(f"half-life {half_life_s!r} is not a number of seconds >= 0")
    if not elapsed_s >= 0:
        raise ValueError(f"elapsed time {elapsed_s!r} is not a number of seconds >= 0")
    if half_life_s == 0:
        return 0.0
    return math.pow(2.0, -elapsed_s / half_life_s)


@overload
def decay(usage: Mapping[str, float], elapsed_s: float, half_life_s: float) -> Vector: ...
@overload
def decay(usage: NDArray[np.float64], elapsed_s: float, half_life_s: float) -> NDArray[np.float64]: ...
def decay(
    usage: Mapping[str, float] | NDArray[np.float64], elapsed_s: float, half_life_s: float
) -> Vector | NDArray[np.float64]:
    """``usage * 2^(-elapsed_s / half_life_s)``; a half-life of 0 means no history, so the result is all zeros."""
    factor = _decay_factor(elapsed_s, half_life_s)
    if isinstance(usage, np.ndarray):
        return usage * factor
    return {name: amount * factor for name, amount in usage.items()}


def decayed_average(usage_s: Mapping[str, float], half_life_s: float) -> Vector:
    """Decayed resource-seconds as an average allocation: ``usage_s * ln 2 / half_life_s`` (0 for no history)."""
    _decay_factor(0.0, half_life_s)
    if half_life_s == 0:
        return {name: 0.0 for name in usage_s}
    return {name: amount * math.log(2) / half_life_s for name, amount in usage_s.items()}


class UsageHistory:
    """Each queue's decayed usage in resource-seconds, fed with samples of what the queue held.

    ``clock`` gives the time in seconds (the simulator passes its own). Half-lives are per queue
    (:meth:`configure` takes them from a :class:`QueueTree`); a queue not configured uses ``half_life_s``.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, half_life_s: float = DEFAULT_HALF_LIFE_S):
        _decay_factor(0.0, half_life_s)
        self._clock = clock
        self._default_half_life_s = half_life_s
        self._half_lives: dict[str, float] = {}
        self._usage: dict[str, Vector] = {}
        self._stamps: dict[str, float] = {}

    def configure(self, tree: QueueTree) -> None:
        """Take every queue's half-life from its spec (``spec.usageHalfLifeSeconds``)."""
        for name in tree:
            self.set_half_life(name, tree.spec(name).usage_half_life_s)

    def set_half_life(self, queue: str, half_life_s: float) -> None:
        """Decay with ``half_life_s`` from now on (what was recorded so far decays under the old one until now)."""
        _decay_factor(0.0, half_life_s)
        self._advance(queue)
        self._half_lives[queue] = half_life_s
        if half_life_s == 0:
            self._usage[queue] = {name: 0.0 for name in self._usage.get(queue, {})}

    def half_life(self, queue: str) -> float:
        return self._half_lives.get(queue, self._default_half_life_s)

    def record(self, queue: str, allocation: Mapping[str, float], dt_s: float) -> None:
        """The queue held ``allocation`` during the ``dt_s`` seconds up to now."""
        if not dt_s >= 0:
            raise ValueError(f"dt {dt_s!r} is not a number of seconds >= 0")
        usage = self._advance(queue)
        half_life = self.half_life(queue)
        if half_life == 0:
            for name in allocation:
                usage.setdefault(name, 0.0)
            return
        weight = half_life / math.log(2) * -math.expm1(-dt_s * math.log(2) / half_life)
        for name, amount in allocation.items():
            usage[name] = usage.get(name, 0.0) + amount * weight

    def usage(self, queue: str) -> Vector:
        """The queue's decayed usage now, in resource-seconds (empty for a queue never recorded)."""
        return dict(self._advance(queue)) if queue in self._usage else {}

    def average(self, queue: str) -> Vector:
        """The queue's decayed usage now as an average allocation (the ``Ubar`` of dominant shares)."""
        return decayed_average(self.usage(queue), self.half_life(queue))

    def _advance(self, queue: str) -> Vector:
        """Decay the stored usage to now, and return it (the stored dict itself)."""
        now = self._clock()
        usage = self._usage.setdefault(queue, {})
        last = self._stamps.get(queue, now)
        # A clock that steps back (a restarted simulation, a wall clock set back) is treated as no time passing.
        factor = _decay_factor(max(0.0, now - last), self.half_life(queue))
        if factor != 1.0:
            for name in usage:
                usage[name] *= factor
        self._stamps[queue] = max(now, last)
        return usage


def dominant_share(
    *,
    allocated: Mapping[str, float],
    decayed_usage: Mapping[str, float] | None = None,
    capacity: Mapping[str, float],
    weight: float = 1.0,
) -> float:
    """``max over r with capacity[r] > 0 of (decayed_usage[r] + allocated[r]) / capacity[r]``, divided by weight.

    ``decayed_usage`` is the history as an average allocation (:meth:`UsageHistory.average`). A resource the
    cluster has none of does not count: nobody can have a share of it.
    """
    if not weight > 0:
        raise ValueError(f"weight {weight!r} is not > 0")
    history = decayed_usage or {}
    share = 0.0
    for name, total in capacity.items():
        if total > 0:
            share = max(share, (history.get(name, 0.0) + allocated.get(name, 0.0)) / total)
    return share / weight


def subtree_totals(tree: QueueTree, per_queue: ResourceVectors) -> dict[str, Vector]:
    """Each queue's vector summed with everything below it. Names not in the tree are left out."""
    totals: dict[str, Vector] = {name: dict(per_queue.get(name, {})) for name in tree}
    for name in reversed(list(tree)):
        parent = tree.parent(name)
        if parent:
            into = totals[parent]
            for resource, amount in totals[name].items():
                into[resource] = into.get(resource, 0.0) + amount
    return totals


@dataclass(frozen=True, slots=True)
class FairShare:
    """A queue's fair share: an amount of each resource of the cluster, and its dominant share."""

    resources: Vector
    #: ``max over r of resources[r] / capacity[r]``, not divided by weight.
    dominant: float


def fair_shares(tree: QueueTree, *, capacity: Mapping[str, float], demand: ResourceVectors) -> dict[str, FairShare]:
    """Every queue's fair share of ``capacity``, given what each leaf's work asks for (running and pending).

    See the module's note for the formula. Demand of a queue that is not a leaf of the tree is left out: only
    leaves hold work. Guarantees, ceilings and lending come from the tree's specs.
    """
    for name, total in capacity.items():
        if not total >= 0:
            raise ValueError(f"capacity of {name} is {total!r}, not a number >= 0")
    for queue, vector in demand.items():
        for name, amount in vector.items():
            if not amount >= 0:
                raise ValueError(f"demand of queue {queue} for {name} is {amount!r}, not a number >= 0")
    order = list(tree)
    leaves = set(tree.leaves())
    ceilings = {name: tree.spec(name).ceiling() for name in order}
    unlendable = {name: tree.spec(name).unlendable() for name in order}
    guarantees = {name: tree.guaranteed(name) for name in order}
    weights = {name: tree.spec(name).weight for name in order}
    shares: dict[str, Vector] = {name: {} for name in order}
    for resource in sorted(capacity):
        want: dict[str, float] = {}
        for name in reversed(order):
            if name in leaves:
                asked = float(demand.get(name, {}).get(resource, 0.0))
            else:
                asked = math.fsum(want[child] for child in tree.children(name))
            kept = min(guarantees[name].get(resource, 0), unlendable[name].get(resource, 0))
            want[name] = min(float(ceilings[name].get(resource, math.inf)), max(asked, float(kept)))
        amounts: dict[str, float] = {}
        for parent in ["", *order]:
            children = tree.roots() if parent == "" else tree.children(parent)
            if not children:
                continue
            available = float(capacity[resource]) if parent == "" else amounts[parent]
            base = [min(float(guarantees[c].get(resource, 0)), want[c]) for c in children]
            based = math.fsum(base)
            if based > available:
                # Guarantees asked for beyond what there is: everyone gets the same fraction of theirs.
                scale = available / based
                given = [b * scale for b in base]
            else:
                extra = _water_fill(
                    available - based, [want[c] - b for c, b in zip(children, base, strict=True)], children, weights
                )
                given = [b + e for b, e in zip(base, extra, strict=True)]
            amounts.update(zip(children, given, strict=True))
        for name in order:
            shares[name][resource] = amounts[name]
    return {
        name: FairShare(
            resources=shares[name],
            dominant=max((shares[name][r] / total for r, total in capacity.items() if total > 0), default=0.0),
        )
        for name in order
    }


def _water_fill(amount: float, caps: list[float], names: list[str], weights: Mapping[str, float]) -> list[float]:
    """Split ``amount`` by weight, nobody above their cap: ``min(cap, L * weight)`` for the highest level ``L``
    that does not give out more than ``amount``."""
    given = [0.0] * len(caps)
    active = sorted((i for i in range(len(caps)) if caps[i] > 0), key=lambda i: (caps[i] / weights[names[i]], i))
    remaining = amount
    total_weight = math.fsum(weights[names[i]] for i in active)
    for position, i in enumerate(active):
        if remaining <= 0:
            break
        level = remaining / total_weight
        if caps[i] <= level * weights[names[i]]:
            given[i] = caps[i]
            remaining = max(0.0, remaining - caps[i])
            total_weight -= weights[names[i]]
        else:
            for j in active[position:]:
                given[j] = level * weights[names[j]]
            break
    return given


def jain_index(values: Iterable[float]) -> float:
    """Jain's fairness index, ``(sum x)^2 / (n * sum x^2)``: 1 when all are equal, 1/n when one has everything.

    1 for no values or all zeros (nothing is unequal). Values must be >= 0.
    """
    xs = [float(v) for v in values]
    if any(not x >= 0 for x in xs):
        raise ValueError(f"Jain's index is defined for values >= 0, got {xs!r}")
    top = max(xs, default=0.0)
    if top == 0:
        return 1.0
    # The index does not change with the values' scale; taken on values scaled to at most 1, so that no square
    # underflows (three equal values of 1e-158 gave 1.0000000059: their squares were subnormal) or overflows.
    scaled = [x / top for x in xs]
    return math.fsum(scaled) ** 2 / (len(scaled) * math.fsum(x * x for x in scaled))


def within_guarantee(tree: QueueTree, leaf: str, request: Mapping[str, float], *, allocated: ResourceVectors) -> bool:
    """Whether ``request`` on top of what ``leaf`` holds stays within a guarantee.

    The nearest queue from the leaf up whose own ``spec.guaranteed`` names a resource the request asks for
    decides: the request fits within it if, for each such resource, that queue's subtree allocation plus the
    request is at most its guarantee. With no such queue on the way up, the request borrows.
    ``allocated`` is per queue (normally per leaf), as for :func:`subtree_totals`.
    """
    return _within_guarantee(tree, leaf, request, subtree_totals(tree, allocated))


def _within_guarantee(tree: QueueTree, leaf: str, request: Mapping[str, float], totals: ResourceVectors) -> bool:
    asked = [name for name, amount in request.items() if amount > 0]
    for queue in [leaf, *tree.ancestors(leaf)]:
        guaranteed = tree.spec(queue).guaranteed
        named = [name for name in asked if name in guaranteed]
        if named:
            held = totals[queue]
            return all(held.get(name, 0.0) + request[name] <= guaranteed[name] for name in named)
    return False


def blended_usage(allocated: Mapping[str, float], decayed_usage: Mapping[str, float] | None) -> Vector:
    """``u = (Ubar + A) / 2``, or ``A`` without history (``decayed_usage`` None: a half-life of 0)."""
    if decayed_usage is None:
        return dict(allocated)
    names = allocated.keys() | decayed_usage.keys()
    return {name: (allocated.get(name, 0.0) + decayed_usage.get(name, 0.0)) / 2.0 for name in names}


def counted_resources(tree: QueueTree, name: str) -> frozenset[str] | None:
    """The resources queue ``name`` is ranked and said to borrow on; None: all of them.

    Like Kueue's covered resources: a queue that bounds some resources (a guarantee or a limit) is counted on those
    only (a queue guaranteed GPUs is not "borrowing" the CPU its GPU jobs come with); one that bounds none, on all.
    """
    named = frozenset(tree.guaranteed(name).keys() | tree.spec(name).limit.keys())
    return named or None


def borrowed_share(
    *, usage: Mapping[str, float], guaranteed: Mapping[str, float], capacity: Mapping[str, float], weight: float
) -> float:
    """``rank_share``: the largest fraction of the cluster used beyond the guarantee, over weight (see the note)."""
    if not weight > 0:
        raise ValueError(f"weight {weight!r} is not > 0")
    borrowed = max(
        ((usage.get(name, 0.0) - guaranteed.get(name, 0.0)) / total for name, total in capacity.items() if total > 0),
        default=0.0,
    )
    return borrowed / weight if borrowed >= 0 else borrowed


def below_guarantee(tree: QueueTree, leaf: str, totals: ResourceVectors) -> bool:
    """Whether the nearest queue from ``leaf`` up that has a guarantee holds less than it of some resource."""
    for queue in [leaf, *tree.ancestors(leaf)]:
        guaranteed = tree.guaranteed(queue)
        if guaranteed:
            held = totals.get(queue, {})
            return any(held.get(name, 0.0) < amount for name, amount in guaranteed.items())
    return False


LeafKey = tuple[int, list[tuple[float, int, str]]]


def leaf_keys(
    tree: QueueTree,
    *,
    allocated: ResourceVectors,
    capacity: Mapping[str, float],
    decayed_usage: Mapping[str, Mapping[str, float] | None] | None = None,
) -> dict[str, LeafKey]:
    """Every leaf's sort key: (0 below its guarantee else 1, the path of ``(rank_share, -priority, name)`` from
    its top-level queue down to it). ``decayed_usage`` per leaf (a leaf not in it has used nothing; None for a
    leaf that keeps no history); without ``decayed_usage`` no leaf has history."""
    if decayed_usage is None:
        usage = {leaf: dict(allocated.get(leaf, {})) for leaf in tree.leaves()}
    else:
        usage = {leaf: blended_usage(allocated.get(leaf, {}), decayed_usage.get(leaf, {})) for leaf in tree.leaves()}
    allocated_totals = subtree_totals(tree, allocated)
    usage_totals = subtree_totals(tree, usage)
    shares = {}
    for name in tree:
        guaranteed = tree.guaranteed(name)
        named = counted_resources(tree, name)
        counted = {r: total for r, total in capacity.items() if r in named} if named is not None else capacity
        shares[name] = borrowed_share(
            usage=usage_totals[name], guaranteed=guaranteed, capacity=counted, weight=tree.spec(name).weight
        )
    keys: dict[str, LeafKey] = {}
    for leaf in tree.leaves():
        path = [*reversed(tree.ancestors(leaf)), leaf]
        tier = 0 if below_guarantee(tree, leaf, allocated_totals) else 1
        keys[leaf] = (tier, [(shares[q], -tree.spec(q).priority, q) for q in path])
    return keys
