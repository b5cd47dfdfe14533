"""Queue: a tenant's share of the cluster (``scheduling.gpusched.io/v1alpha1``, cluster-scoped), and the tree of them.

A pod picks its queue with the label ``gpusched.io/queue``, a gang with ``PodGroup.spec.queue``; without one, work
goes to the queue named ``default``. Queues form a tree through ``spec.parent``; only leaf queues hold work, a
parent's allocation is its subtree's. :func:`parse_queue` validates one object and raises :class:`InvalidObject`
naming the field; :meth:`QueueTree.build` validates what only the whole set can show and keeps going without the
bad queues.

Invariants of a built :class:`QueueTree`:

- Every queue's parent is in the tree, and there are no cycles.
- A queue named ``default`` exists. If no Queue of that name was given, one is implied with the defaults of an
  empty spec (top level, weight 1, no guarantee, no limit). If one was given but is invalid, none is implied:
  silently replacing a bounded ``default`` with an unbounded one would be worse than letting its work wait.
- Guarantees nest: for every resource, the guarantees of a queue's children sum to at most the queue's own
  guarantee (when it names that resource) and its ceiling (:meth:`QueueSpec.ceiling`). A parent that does not
  name a resource in ``guaranteed`` is treated as guaranteeing the sum of its children's guarantees of it, so a
  leaf's guarantee holds at every level up to the top.

A queue that breaks these is reported as a problem and left out together with its subtree; the rest of the tree
works. Children whose guarantees together exceed their parent's are admitted in name order, and the first child
that no longer fits is the one left out (with its subtree): the parent and its other children keep working.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar, get_args

from scheduler.api.basics import quantity, resources
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.basics.resources import ResourceList

GROUP = "scheduling.gpusched.io"
VERSION = "v1alpha1"
PLURAL = "queues"
#: The label a pod names its queue with.
QUEUE_LABEL = "gpusched.io/queue"
#: Where work without a queue goes; implied by :meth:`QueueTree.build` when absent.
DEFAULT_QUEUE = "default"
#: One day. Not 0 on purpose: in Kueue a default half-life of 0 silently turns usage history off. Here 0 must be
#: asked for, and means "rank by current allocation only".
DEFAULT_HALF_LIFE_S = 86400

WithinQueue = Literal["Never", "LowerPriority"]
Reclaim = Literal["Never", "LowerPriority", "Any"]
#: Which of a queue's running work consolidation may move to another node (``spec.consolidation.moves``):
#: ``Never``; ``ExceptTraining`` (the default): every pod a controller recreates except training, which is a gang's
#: members (a PodGroup, or a workload gpusched groups into one) and the pods of a batch ``Job``: moving them loses
#: their progress; ``Any``: every pod a controller recreates (a gang still moves whole or not at all).
Moves = Literal["Never", "ExceptTraining", "Any"]
MOVES: tuple[Moves, ...] = get_args(Moves)
#: What a minimum run time protects running work from: preemption within its queue, reclaim by another queue, a
#: consolidation move (``spec.preemption.withinQueueMinRuntimeSeconds``, ``spec.preemption.reclaimMinRuntimeSeconds``,
#: ``spec.consolidation.moveMinRuntimeSeconds``).
Disturbance = Literal["preempt", "reclaim", "move"]
WITHIN_QUEUE: tuple[WithinQueue, ...] = get_args(WithinQueue)
RECLAIM: tuple[Reclaim, ...] = get_args(Reclaim)
_C = TypeVar("_C", bound=str)


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """One queue, in scheduler units (CPU in milli-cores, memory in bytes, GPUs and the rest in units).

    In the resource lists a resource that is not named is not bounded: no guarantee, no limit, no borrowing
    limit, everything lendable.
    """

    name: str
    #: The parent queue; empty for a top-level queue.
    parent: str = ""
    #: Share of the capacity above guarantees, against the queue's siblings.
    weight: float = 1.0
    #: What the queue gets whenever its work asks for it, taken back from borrowers if need be.
    guaranteed: ResourceList = field(default_factory=dict)
    #: The most the queue (with its subtree) may hold.
    limit: ResourceList = field(default_factory=dict)
    #: Whether the queue may hold more than its guarantee of the resources its guarantee names.
    borrowing_allowed: bool = True
    #: The most the queue may hold above its guarantee.
    borrowing_limit: ResourceList = field(default_factory=dict)
    #: Whether other queues may use the unused part of this queue's guarantee.
    lending_allowed: bool = True
    #: The most of the unused guarantee other queues may use.
    lending_limit: ResourceList = field(default_factory=dict)
    #: Breaks ties between queues of equal share, higher first.
    priority: int = 0
    #: Whether pending work may preempt lower-priority work of the same queue.
    within_queue: WithinQueue = "LowerPriority"
    #: Which borrowed work of other queues this queue may preempt to get its guarantee back.
    reclaim: Reclaim = "Any"
    #: Half-life of the usage history; 0: no history.
    usage_half_life_s: float = DEFAULT_HALF_LIFE_S
    #: Which of its running work consolidation may move (:data:`Moves`).
    moves: Moves = "ExceptTraining"
    #: How long its running work runs before it may be preempted by work of its own queue, reclaimed by another
    #: queue, or moved by consolidation; None: as its parent says (0 at the top: at once).
    preempt_min_runtime_s: float | None = None
    reclaim_min_runtime_s: float | None = None
    move_min_runtime_s: float | None = None
    #: How long the head of its line waits without room before the backfill action holds nodes for it
    #: (``spec.backfill.holdAfterSeconds``); None: as its parent says (the profile's at the top).
    hold_after_s: float | None = None

    def ceiling(self) -> ResourceList:
        """The most the queue may hold of each resource it bounds: the lowest of its limit, its guarantee plus
        its borrowing limit, and (if borrowing is not allowed) its guarantee. Resources not in the result are
        unbounded.

        Borrowing that is not allowed bounds only the resources the guarantee names, so that a queue guaranteed
        GPUs alone still runs pods that ask for CPU and memory.
        """
        if self.borrowing_allowed:
            bounds = {name: self.guaranteed.get(name, 0) + extra for name, extra in self.borrowing_limit.items()}
        else:
            bounds = dict(self.guaranteed)
        ceiling = dict(self.limit)
        for name, bound in bounds.items():
            ceiling[name] = min(ceiling.get(name, bound), bound)
        return ceiling

    def unlendable(self) -> ResourceList:
        """The part of the guarantee that stays reserved for this queue while it does not use it."""
        kept: ResourceList = {}
        for name, amount in self.guaranteed.items():
            if not self.lending_allowed:
                kept[name] = amount
            elif name in self.lending_limit:
                kept[name] = max(0, amount - self.lending_limit[name])
        return kept


def parse_queue(raw: Mapping[str, object]) -> QueueSpec:
    """Parse a Queue object (a dict as the API server returns it, defaults applied or not)."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        raise InvalidObject("metadata and spec must be maps", obj="queue")
    name = meta.get("name") or ""
    if not isinstance(name, str) or not name:
        raise InvalidObject("a Queue needs a name", obj="queue", field="metadata.name")
    obj = f"queue {name}"
    parent = spec.get("parent") or ""
    if not isinstance(parent, str):
        raise InvalidObject(f"{parent!r} is not a queue name", obj=obj, field="spec.parent")
    if parent == name:
        raise InvalidObject("a queue cannot be its own parent", obj=obj, field="spec.parent")
    weight = spec.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) or weight <= 0:
        raise InvalidObject(f"{weight!r} is not a number > 0", obj=obj, field="spec.weight")
    guaranteed = _resource_list(spec.get("guaranteed"), obj=obj, field="spec.guaranteed")
    limit = _resource_list(spec.get("limit"), obj=obj, field="spec.limit")
    for resource in sorted(guaranteed.keys() & limit.keys()):
        if limit[resource] < guaranteed[resource]:
            raise InvalidObject(
                f"limit {limit[resource]} is below the guarantee {guaranteed[resource]} (in scheduler units)",
                obj=obj,
                field=f"spec.limit.{resource}",
            )
    borrowing_allowed, borrowing_limit = _sharing(spec, "borrowing", obj=obj)
    lending_allowed, lending_limit = _sharing(spec, "lending", obj=obj)
    priority = spec.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidObject(f"{priority!r} is not an integer", obj=obj, field="spec.priority")
    preemption = spec.get("preemption") or {}
    if not isinstance(preemption, Mapping):
        raise InvalidObject("must be a map with withinQueue and/or reclaim", obj=obj, field="spec.preemption")
    within_queue = _choice(preemption.get("withinQueue", "LowerPriority"), WITHIN_QUEUE, obj, "withinQueue")
    reclaim = _choice(preemption.get("reclaim", "Any"), RECLAIM, obj, "reclaim")
    consolidation = spec.get("consolidation") or {}
    if not isinstance(consolidation, Mapping):
        raise InvalidObject("must be a map with moves", obj=obj, field="spec.consolidation")
    moves = _choice(consolidation.get("moves", "ExceptTraining"), MOVES, obj, "moves", within="spec.consolidation")
    preempt_min = _seconds(
        preemption.get("withinQueueMinRuntimeSeconds"), obj, "spec.preemption.withinQueueMinRuntimeSeconds"
    )
    reclaim_min = _seconds(preemption.get("reclaimMinRuntimeSeconds"), obj, "spec.preemption.reclaimMinRuntimeSeconds")
    move_min = _seconds(consolidation.get("moveMinRuntimeSeconds"), obj, "spec.consolidation.moveMinRuntimeSeconds")
    backfill = spec.get("backfill") or {}
    if not isinstance(backfill, Mapping):
        raise InvalidObject("must be a map with holdAfterSeconds", obj=obj, field="spec.backfill")
    hold_after = _seconds(backfill.get("holdAfterSeconds"), obj, "spec.backfill.holdAfterSeconds")
    half_life = spec.get("usageHalfLifeSeconds", DEFAULT_HALF_LIFE_S)
    if isinstance(half_life, bool) or not isinstance(half_life, int | float) or not 0 <= half_life < math.inf:
        raise InvalidObject(
            f"{half_life!r} is not a number of seconds >= 0", obj=obj, field="spec.usageHalfLifeSeconds"
        )
    return QueueSpec(
        name=name,
        parent=parent,
        weight=float(weight),
        guaranteed=guaranteed,
        limit=limit,
        borrowing_allowed=borrowing_allowed,
        borrowing_limit=borrowing_limit,
        lending_allowed=lending_allowed,
        lending_limit=lending_limit,
        priority=priority,
        within_queue=within_queue,
        reclaim=reclaim,
        usage_half_life_s=float(half_life),
        moves=moves,
        preempt_min_runtime_s=preempt_min,
        reclaim_min_runtime_s=reclaim_min,
        move_min_runtime_s=move_min,
        hold_after_s=hold_after,
    )


def _seconds(value: object, obj: str, field: str) -> float | None:
    """A number of seconds >= 0 the spec may leave out (None)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise InvalidObject(f"{value!r} is not a number of seconds >= 0", obj=obj, field=field)
    return float(value)


def _sharing(spec: Mapping[object, object], key: str, *, obj: str) -> tuple[bool, ResourceList]:
    """``spec.borrowing`` or ``spec.lending``: ``{allowed: bool (default true), limit: resource list}``."""
    raw = spec.get(key) or {}
    if not isinstance(raw, Mapping):
        raise InvalidObject("must be a map with allowed and/or limit", obj=obj, field=f"spec.{key}")
    allowed = raw.get("allowed", True)
    if not isinstance(allowed, bool):
        raise InvalidObject(f"{allowed!r} is not true or false", obj=obj, field=f"spec.{key}.allowed")
    limit = _resource_list(raw.get("limit"), obj=obj, field=f"spec.{key}.limit")
    return allowed, limit


def _resource_list(raw: object, *, obj: str, field: str) -> ResourceList:
    """A resource list of the spec; whole GPUs (``nvidia.com/gpu``) only in whole numbers.

    A fraction of a whole GPU would be rounded up to the next GPU by the parser (``1.5`` counted as 2, while the
    object still shows 1.5), so it is refused instead; a share of a GPU is asked for in ``gpusched.io/gpu-milli``.
    The CRD refuses it at ``kubectl apply`` already; this catches an object that got past an older CRD.
    """
    parsed = resources.parse_resource_list(raw, obj=obj, field=field)
    if isinstance(raw, Mapping) and resources.GPU in raw:
        amount = quantity.parse_quantity(raw[resources.GPU], obj=obj, field=f"{field}.{resources.GPU}")
        if amount.denominator != 1:
            raise InvalidObject(
                f"{raw[resources.GPU]} is not a whole number of GPUs ({resources.GPU} counts whole GPUs; a share"
                f" of a GPU is {resources.GPU_MILLI})",
                obj=obj,
                field=f"{field}.{resources.GPU}",
            )
    return parsed


def _choice(value: object, choices: tuple[_C, ...], obj: str, key: str, *, within: str = "spec.preemption") -> _C:
    for choice in choices:
        if value == choice:
            return choice
    raise InvalidObject(f"{value!r} is not one of {', '.join(choices)}", obj=obj, field=f"{within}.{key}")


class QueueTree:
    """The valid queues as a tree. Build it with :meth:`build`; it does not change afterwards.

    Iterating gives the queue names top-down (a parent before its children, siblings by name).
    """

    __slots__ = ("_children", "_guaranteed", "_in_force", "_order", "_specs")

    def __init__(
        self,
        specs: Mapping[str, QueueSpec],
        children: Mapping[str, tuple[str, ...]],
        guaranteed: Mapping[str, ResourceList],
    ) -> None:
        self._specs = dict(specs)
        self._children = dict(children)
        self._guaranteed = dict(guaranteed)
        order: list[str] = []
        stack = list(reversed(self._children.get("", ())))
        while stack:
            name = stack.pop()
            order.append(name)
            stack.extend(reversed(self._children.get(name, ())))
        self._order = tuple(order)
        #: The disturbances some queue sets a minimum run time above 0 for.
        self._in_force = frozenset(
            d for d in get_args(Disturbance) for spec in self._specs.values() if _min_runtime_of(spec, d)
        )

    @classmethod
    def build(cls, specs: Iterable[QueueSpec]) -> tuple[QueueTree, list[InvalidObject]]:
        """The tree of the valid queues, and one problem for each queue left out (sorted by queue name).

        Left out: a second queue of the same name, a queue whose parent does not exist, the queues on a cycle
        of parents, children whose guarantees do not fit in their parent's (see the module's note), and
        everything below a queue left out.
        """
        problems: dict[str, InvalidObject] = {}
        duplicates: list[InvalidObject] = []
        by_name: dict[str, QueueSpec] = {}
        for spec in specs:
            if spec.name in by_name:
                duplicates.append(
                    InvalidObject(
                        "another Queue has the same name; the first one is kept",
                        obj=f"queue {spec.name}",
                        field="metadata.name",
                    )
                )
            else:
                by_name[spec.name] = spec
        if DEFAULT_QUEUE not in by_name:
            by_name[DEFAULT_QUEUE] = QueueSpec(name=DEFAULT_QUEUE)

        bad: dict[str, str] = {}  # queue -> why (the root cause), for its descendants' reports
        for name in sorted(by_name):
            parent = by_name[name].parent
            if parent and parent not in by_name:
                bad[name] = f"its parent queue {parent!r} does not exist"
                problems[name] = InvalidObject(bad[name], obj=f"queue {name}", field="spec.parent")
        for name in sorted(by_name):
            cycle = _cycle_through(name, by_name)
            if cycle and name not in bad:
                bad[name] = "its parents form a cycle: " + " -> ".join([*cycle, cycle[0]])
                problems[name] = InvalidObject(bad[name], obj=f"queue {name}", field="spec.parent")
        for name in sorted(by_name):
            root_cause = _bad_ancestor(name, by_name, bad)
            if root_cause and name not in bad:
                problems[name] = InvalidObject(
                    f"left out with its ancestor {root_cause!r}, which is invalid: {bad[root_cause]}",
                    obj=f"queue {name}",
                    field="spec.parent",
                )
        valid = {name: spec for name, spec in by_name.items() if name not in problems}

        children: dict[str, list[str]] = {}
        for name in sorted(valid):
            children.setdefault(valid[name].parent, []).append(name)
        # Children before parents (reversed pre-order), so that a parent sums guarantees already settled below.
        preorder: list[str] = []
        stack = list(reversed(children.get("", [])))
        while stack:
            name = stack.pop()
            preorder.append(name)
            stack.extend(reversed(children.get(name, [])))
        guaranteed: dict[str, ResourceList] = {}
        kept_children: dict[str, tuple[str, ...]] = {"": tuple(children.get("", []))}
        for name in reversed(preorder):
            spec = valid[name]
            ceiling = spec.ceiling()
            total: ResourceList = {}
            admitted: list[str] = []
            for child in children.get(name, []):
                candidate = dict(total)
                resources.add(candidate, guaranteed[child])
                overflow = _guarantee_overflow(spec, ceiling, candidate)
                if overflow:
                    _drop_subtree(child, kept_children, problems, *overflow)
                    continue
                total = candidate
                admitted.append(child)
            kept_children[name] = tuple(admitted)
            guaranteed[name] = {**total, **spec.guaranteed}
        kept = {name: spec for name, spec in valid.items() if name not in problems}
        tree = cls(
            kept,
            {name: kids for name, kids in kept_children.items() if name == "" or name in kept},
            {name: g for name, g in guaranteed.items() if name in kept},
        )
        return tree, sorted([*problems.values(), *duplicates], key=lambda problem: problem.obj)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._specs)

    def spec(self, name: str) -> QueueSpec:
        """The queue's spec; KeyError if it is not in the tree."""
        return self._specs[name]

    def parent(self, name: str) -> str:
        """The queue's parent, empty for a top-level queue."""
        return self._specs[name].parent

    def roots(self) -> list[str]:
        """The top-level queues, by name."""
        return list(self._children.get("", ()))

    def children(self, name: str) -> list[str]:
        """The queue's children, by name (empty for a leaf)."""
        if name not in self._specs:
            raise KeyError(name)
        return list(self._children.get(name, ()))

    def is_leaf(self, name: str) -> bool:
        return not self.children(name)

    def leaves(self) -> list[str]:
        """The queues that hold work, by name."""
        return sorted(name for name in self._specs if not self._children.get(name))

    def ancestors(self, name: str) -> list[str]:
        """The queue's parent, its parent's parent, ... up to the top (nearest first)."""
        chain: list[str] = []
        parent = self._specs[name].parent
        while parent:
            chain.append(parent)
            parent = self._specs[parent].parent
        return chain

    def subtree(self, name: str) -> list[str]:
        """The queue and everything below it, top-down."""
        if name not in self._specs:
            raise KeyError(name)
        found: list[str] = []
        stack = [name]
        while stack:
            current = stack.pop()
            found.append(current)
            stack.extend(reversed(self._children.get(current, ())))
        return found

    def sets_min_runtime(self, disturbance: Disturbance) -> bool:
        """Whether some queue sets a minimum run time above 0 for ``disturbance`` (else none need be looked up)."""
        return disturbance in self._in_force

    def min_runtime_s(self, name: str, disturbance: Disturbance) -> float:
        """How long work of leaf ``name`` runs before it may be disturbed so: the queue's own setting, else its
        nearest ancestor's that has one, else 0 (KAI-Scheduler resolves a queue's ``preemptMinRuntime`` the same
        way). 0 for a queue not in the tree."""
        if name not in self._specs:
            return 0.0
        for queue in (name, *self.ancestors(name)):
            value = _min_runtime_of(self._specs[queue], disturbance)
            if value is not None:
                return value
        return 0.0

    def hold_after_s(self, name: str) -> float | None:
        """How long the head of leaf ``name``'s line waits before room is held for it: the queue's own
        ``spec.backfill.holdAfterSeconds``, else its nearest ancestor's, else None (the profile's)."""
        if name not in self._specs:
            return None
        for queue in (name, *self.ancestors(name)):
            value = self._specs[queue].hold_after_s
            if value is not None:
                return value
        return None

    def guaranteed(self, name: str) -> ResourceList:
        """The queue's guarantee as it holds in the tree: its own where it names a resource, else the sum of
        its children's."""
        return dict(self._guaranteed[name])


def _min_runtime_of(spec: QueueSpec, disturbance: Disturbance) -> float | None:
    """The queue's own minimum run time for ``disturbance`` (None: not set)."""
    if disturbance == "preempt":
        return spec.preempt_min_runtime_s
    return spec.reclaim_min_runtime_s if disturbance == "reclaim" else spec.move_min_runtime_s


def _cycle_through(name: str, specs: Mapping[str, QueueSpec]) -> list[str]:
    """The cycle of parents ``name`` is on (starting at ``name``), or empty."""
    seen: list[str] = []
    current = name
    while current in specs and current not in seen:
        seen.append(current)
        current = specs[current].parent
    return seen if current == name else []


def _bad_ancestor(name: str, specs: Mapping[str, QueueSpec], bad: Mapping[str, str]) -> str:
    """The nearest ancestor of ``name`` that is invalid, or empty."""
    seen = {name}
    current = specs[name].parent
    while current in specs and current not in seen:
        if current in bad:
            return current
        seen.add(current)
        current = specs[current].parent
    return ""


def _guarantee_overflow(
    parent: QueueSpec, ceiling: Mapping[str, int], total: Mapping[str, int]
) -> tuple[str, str] | None:
    """(field, reason) when the children's guarantees ``total`` (``child`` last) exceed the parent's."""
    for resource in sorted(total):
        amount = total[resource]
        if resource in parent.guaranteed and amount > parent.guaranteed[resource]:
            bound = f"its guarantee of {parent.guaranteed[resource]}"
        elif resource in ceiling and amount > ceiling[resource]:
            bound = f"its ceiling of {ceiling[resource]} (limit, or guarantee plus borrowing limit)"
        else:
            continue
        return (
            f"spec.guaranteed.{resource}",
            f"the guarantees of {resource} of the children of queue {parent.name!r} would sum to {amount}, above "
            f"{bound}; children are admitted by name and this one does not fit",
        )
    return None


def _drop_subtree(
    name: str, children: dict[str, tuple[str, ...]], problems: dict[str, InvalidObject], field: str, reason: str
) -> None:
    problems[name] = InvalidObject(reason, obj=f"queue {name}", field=field)
    stack = list(children.get(name, ()))
    while stack:
        below = stack.pop()
        problems[below] = InvalidObject(
            f"left out with its ancestor {name!r}, whose guarantee does not fit: {reason}",
            obj=f"queue {below}",
            field="spec.parent",
        )
        stack.extend(children.get(below, ()))
