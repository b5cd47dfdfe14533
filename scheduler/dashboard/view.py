"""The dashboard's read-only view: what a page shows, as plain frozen records, filled by whoever holds the state.

Nothing here refers back to the live objects: a page rendered from these records cannot change the scheduler,
and the records can be built in one event-loop step (no cycle runs meanwhile) and rendered afterwards. Amounts
are already text in Kubernetes units (the Queue status's own formatting); names carry their namespace so that a
viewer who may not list a namespace sees none of its names (:class:`Redacted`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

#: A GPU cell's states, as the map colours them.
IDLE = "idle"
WHOLE = "whole"
SHARED = "shared"
#: Idle GPU capacity the typical pods cannot use on that node (the FGD paper's fragmentation measure).
STRANDED = "stranded"
CELL_STATES = (WHOLE, SHARED, IDLE, STRANDED)


@dataclass(frozen=True, slots=True)
class GpuCell:
    """One GPU of a node."""

    state: str
    #: The queue of the pod (or first of the pods) holding it; empty when idle or held by a pod another scheduler
    #: bound (charged to no queue).
    queue: str = ""
    #: Keys (``namespace/name``) of the pods holding it.
    pods: tuple[str, ...] = ()
    #: Milli-GPU in use (0..1000).
    used_milli: int = 0
    #: The NVLink clique it belongs to on its node (-1: none known).
    clique: int = -1


@dataclass(frozen=True, slots=True)
class ZoneAmount:
    """One resource of a NUMA zone: what is left of it (the scheduler's own count) and what the zone allocates."""

    resource: str
    available: str
    allocatable: str


@dataclass(frozen=True, slots=True)
class ZoneView:
    """One NUMA zone of a node, as its NodeResourceTopology publishes it, less the pods the object does not show yet."""

    name: str
    #: CPU, memory and GPUs, those the zone lists, in that order.
    amounts: tuple[ZoneAmount, ...]


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    labels: Mapping[str, str]
    #: The node's domain at each topology level (widest first); empty where it has no such label.
    domains: tuple[str, ...]
    cells: tuple[GpuCell, ...]
    #: The node's expected fragmentation (GPU-milli idle that the typical pods cannot use).
    fragmentation_milli: float = 0.0
    schedulable: bool = True
    #: Its NUMA zones (none: it publishes no NodeResourceTopology) and its kubelet's Topology Manager policy/scope.
    zones: tuple[ZoneView, ...] = ()
    numa_policy: str = ""


@dataclass(frozen=True, slots=True)
class ClusterMap:
    #: The topology levels that group nodes (block, rack, NVLink clique...), widest first, by their short names.
    levels: tuple[str, ...]
    nodes: tuple[NodeView, ...]


@dataclass(frozen=True, slots=True)
class QueueGpus:
    """A queue's GPUs in GPUs (a shared GPU as its fraction), for the bar of the Queues page."""

    #: What the queue (a parent: its subtree) holds.
    allocated: float
    #: Its guarantee (0: none) and limit (None: none).
    guarantee: float
    limit: float | None
    #: What it holds beyond its guarantee.
    borrowed: float
    #: Its idle guarantee that other queues may use (the part its ``lending`` keeps for itself left out).
    lendable: float = 0.0
    #: The part of ``lendable`` other queues use now (:func:`with_lent`).
    lent: float = 0.0


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One queue, its amounts as the Queue's ``status`` shows them."""

    name: str
    parent: str
    depth: int
    weight: float
    guarantee: Mapping[str, str]
    limit: Mapping[str, str]
    #: The Queue's status body (``allocated``, ``borrowed``, ``fairShare``, ``decayedUsage``, ...).
    status: Mapping[str, object]
    #: Its GPUs as numbers (None: not known, no bar drawn).
    gpus: QueueGpus | None = None


def with_lent(rows: Sequence[QueueRow], *, capacity: float) -> list[QueueRow]:
    """``rows`` with each queue's ``lent`` GPUs: what its siblings borrow beyond the room nobody is guaranteed.

    Among the children of one parent (the roots: of the cluster's ``capacity`` GPUs), what they borrow comes first
    from the room no sibling is guaranteed (the parent's holding, or the cluster's capacity, less the siblings'
    guarantees); only the rest is lent, out of the siblings' lendable idle guarantees, in proportion to them. The
    scheduler does not record who lent to whom (a queue's borrowing is against its own guarantee), so this is the
    page's reading of the queues' numbers, not a figure of the Queue's status.
    """
    held = {row.name: row.gpus for row in rows if row.gpus is not None}
    lent: dict[str, float] = {}
    families: dict[str, list[str]] = {}
    for row in rows:
        if row.gpus is not None:
            families.setdefault(row.parent, []).append(row.name)
    for parent, children in families.items():
        if parent:
            above = held.get(parent)
            room = above.allocated if above is not None else 0.0
        else:
            room = capacity
        free = max(0.0, room - sum(held[c].guarantee for c in children))
        owed = max(0.0, sum(held[c].borrowed for c in children) - free)
        lendable = sum(held[c].lendable for c in children)
        if owed <= 0 or lendable <= 0:
            continue
        for child in children:
            lent[child] = min(held[child].lendable, owed * held[child].lendable / lendable)
    out = []
    for row in rows:
        if row.gpus is not None and row.name in lent:
            row = replace(row, gpus=replace(row.gpus, lent=lent[row.name]))
        out.append(row)
    return out


@dataclass(frozen=True, slots=True)
class WaitingJob:
    """A pod or a gang waiting for room, in the order the scheduler will try them."""

    #: The job's page key: ``pod/NAMESPACE/NAME`` or ``podgroup/NAMESPACE/NAME``.
    key: str
    namespace: str
    name: str
    kind: str
    queue: str
    #: Where it waits: ``active``, ``backoff``, ``unschedulable``, ``in-flight``.
    where: str
    #: 1-based place among the active jobs of its queue; None outside active.
    position: int | None
    #: The last reason the scheduler gave (the pod's PodScheduled condition or the gang's condition).
    reason: str
    #: For a gang: members placed, members existing, minMember; zeros for a single pod.
    placed: int = 0
    exist: int = 0
    min_member: int = 0
    #: GPUs each pod asks for (a gang: each member; a shared GPU as its fraction), and seconds since the job's
    #: oldest waiting pod was created (0: not known).
    gpus: float = 0.0
    waited_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster at one moment, for the small charts over the last hours (:mod:`scheduler.dashboard.history`)."""

    #: Unix seconds.
    at: float
    #: GPUs present, and held (in GPUs, a shared GPU's fraction counted).
    gpus: int
    allocated: float
    #: Idle GPUs the typical pods cannot use (the FGD measure, summed over the nodes).
    fragmented: float
    pods_waiting: int


@dataclass(frozen=True, slots=True)
class Member:
    key: str
    node: str
    state: str


@dataclass(frozen=True, slots=True)
class JobPage:
    key: str
    namespace: str
    kind: str
    queue: str
    phase: str
    members: tuple[Member, ...]
    #: ``gpusched explain``'s answer for it.
    explanation: str
    events: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Leadership:
    """Whether this replica's view is the one that schedules, and where the one that does is."""

    leading: bool
    #: The leader's identity when known.
    leader: str = ""
    #: The leader's dashboard URL when it published one.
    leader_url: str = ""
    #: A local copy (``gpusched dashboard``): shows its own view although it does not lead.
    observer: bool = False


class Source(Protocol):
    """What the dashboard reads. Every method returns a fresh record; none may change the scheduler."""

    def version(self) -> str:
        """Changes whenever anything shown may have changed (the pages answer 304 to a poll while it does not)."""
        ...

    def cluster_map(self) -> ClusterMap: ...

    def queues(self) -> list[QueueRow]: ...

    def waiting(self) -> list[WaitingJob]: ...

    def job(self, kind: str, namespace: str, name: str) -> JobPage | None: ...

    def leadership(self) -> Leadership: ...

    def history(self) -> Sequence[Sample]:
        """The samples kept, oldest first, and the present as the last one."""
        ...


@dataclass(frozen=True, slots=True)
class Redacted:
    """Which namespaces a viewer may see names from (None: all)."""

    namespaces: frozenset[str] | None = None
    #: Who the viewer is, for the page's header (empty: nobody checked).
    user: str = ""
    hidden: set[str] = field(default_factory=set, compare=False)

    def may_see(self, namespace: str) -> bool:
        if self.namespaces is None or namespace in self.namespaces:
            return True
        self.hidden.add(namespace)
        return False

    def pod(self, key: str) -> str:
        """``key`` (``namespace/name``) or ``hidden`` when its namespace is not the viewer's to see."""
        namespace = key.partition("/")[0]
        return key if self.may_see(namespace) else "(hidden)"
