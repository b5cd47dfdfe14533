"""The extension points, one Status type, and the per-cycle state.

Plugins are vectorised: a filter marks every node at once in an int8 reason array (with the codes it declares,
``scheduler.framework.reasons``), a score plugin scores every feasible node at once. The Status code of a failed
cycle decides what happens to the pod next, as in kube-scheduler:

- ``ERROR``: something broke (not the pod's fault) -> retry after backoff;
- ``UNSCHEDULABLE``: no node fits now -> wait for a cluster event; preemption may help;
- ``UNRESOLVABLE``: no node can ever fit as things are (bad request, unknown queue) -> wait; preemption
  cannot help.

There is no post-filter or permit point: preemption (``scheduler.core.preemption.preemptor``) and gangs
(``scheduler.core.gang``) are the core's, decided on whole jobs, not per pod by plugins. Plugins keep no state
across cycles: what a cycle needs from outside comes in the cycle state's ``context`` (:class:`CycleContext`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from scheduler.api.devices.dra import ClaimAllocation
from scheduler.api.objects.pod import PodRequest
from scheduler.api.objects.volumes import ClaimBinding
from scheduler.cache.state import Snapshot
from scheduler.kernels import layout

if TYPE_CHECKING:
    from scheduler.framework.reasons import Reason

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
I8 = npt.NDArray[np.int8]


class Code(enum.IntEnum):
    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNRESOLVABLE = 3
    SKIP = 5


class ClusterEvent(enum.StrEnum):
    """What changed in the cluster, as the loop is told (the operator's watches, the simulator)."""

    POD_DELETED = "pod deleted"
    NODE_ADDED = "node added"
    NODE_UPDATED = "node updated"
    QUEUE_CHANGED = "queue changed"
    TOPOLOGY_CHANGED = "topology changed"
    #: A job that waited for room was placed or left: the jobs the fair-share gate held back may go.
    STARVING_JOB_FED = "starving job fed"
    #: A PersistentVolumeClaim, PersistentVolume, StorageClass or CSINode came, changed or went.
    VOLUME_CHANGED = "volume changed"
    #: A DeviceClass, ResourceSlice or ResourceClaim came, changed or went.
    DEVICE_CHANGED = "device changed"
    #: A PodDisruptionBudget came, changed or went: the jobs consolidation found no plan for may find one now.
    BUDGET_CHANGED = "disruption budget changed"


#: Events that can give a node more free room: a pod left, a node came or changed.
ROOM_FREED = frozenset({ClusterEvent.POD_DELETED, ClusterEvent.NODE_ADDED, ClusterEvent.NODE_UPDATED})


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    message: str = ""
    plugin: str = ""
    #: A refusal before the pod can be tried at all (kube-scheduler's PreEnqueue: an object it names does not
    #: exist yet, such as the ResourceClaim made from its template): no attempt is counted, so no backoff, and
    #: nothing disruptive is tried for it; it waits for the event that brings the object.
    gated: bool = False

    @property
    def ok(self) -> bool:
        return self.code in (Code.SUCCESS, Code.SKIP)

    @classmethod
    def success(cls) -> Status:
        return _SUCCESS


_SUCCESS = Status()


class Demand(Protocol):
    """The waiting pods, and a number that grows whenever a pod starts or stops waiting or holding a node (so a
    plugin that learns from them knows when to look again without counting them every cycle)."""

    @property
    def version(self) -> int: ...

    def pods(self) -> list[PodRequest]: ...


@dataclass(frozen=True, slots=True)
class CycleContext:
    """What a cycle is told from outside the pod and the snapshot, the part plugins read (``CycleState.context``).

    The core makes it: the loop once per job (``SchedulingLoop.cycle_context``, with what only the core reads:
    ``scheduler.core.cycle.Context``), then a gang's and a what-if's cycles narrow it (``dataclasses.replace``).
    It is never changed in place; a plugin keeps what it works out for one cycle in ``CycleState.data``. Something
    new a plugin must be told (per job, from outside the snapshot) is a field here, set in ``cycle_context``."""

    #: The pods waiting in the scheduling queue: what a score may look ahead at (FGD learns its typical pods from
    #: them and the pods the cluster holds). None: not known (a what-if outside the loop).
    pending: Demand | None = None
    #: During a gang's cycle: {node slot: the gang's members already placed there} (the ``gang`` score prefers
    #: them). None outside a gang's cycle.
    gang_slots: Mapping[int, int] | None = None
    #: During a cycle constrained by topology: the node slots (a boolean mask) of the domain(s) chosen for the job;
    #: the ``topology`` filter keeps the pod inside them. None: no such bound.
    topology_slots: npt.NDArray[np.bool_] | None = None


_NO_CONTEXT = CycleContext()


@dataclass(slots=True)
class CycleState:
    """What one scheduling cycle knows about one pod; plugins keep their own data under their name."""

    pod: PodRequest
    snapshot: Snapshot
    request: F64
    #: Slots of the nodes that passed every filter, in slot order.
    feasible: I64 = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    #: Device suggestions per feasible node (aligned with ``feasible``), by the plugin that made them.
    device_hints: dict[str, I64] = field(default_factory=dict)
    #: What the cycle is told from outside (the waiting pods, a gang's placed members, a topology bound).
    context: CycleContext = _NO_CONTEXT
    #: What the plugins work out for this cycle (a pre-filter for its filter and reserve), each under its own keys.
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def whole_k(self) -> int:
        return self.pod.gpu.count if self.pod.gpu.whole else 0


def refused_everywhere(snapshot: Snapshot, code: Code, reason: str, plugin: str) -> Status:
    """A pre-filter's refusal: the pod fits no node, said as kube-scheduler says it
    (``0/N nodes are available: <reason>.``, N the nodes the cluster has)."""
    nodes = int((snapshot.arrays.base_reason != layout.ABSENT).sum())
    return Status(code, f"0/{nodes} nodes are available: {reason}.", plugin)


@runtime_checkable
class Plugin(Protocol):
    name: str


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    def pre_filter(self, state: CycleState) -> Status: ...


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    #: The reason codes it sets, with what they mean (``scheduler.framework.reasons``).
    reasons: tuple[Reason, ...]

    def filter(self, state: CycleState, reasons: I8) -> None:
        """Set a reason for every node (still ``FIT``) that cannot hold the pod."""

    def wakes(self, reason: int) -> frozenset[ClusterEvent] | None:
        """The queueing hint: for a reason code this plugin sets, the cluster events that may clear it on a node
        (a pod rejected only for such reasons is retried on those events, not on others); None for a code it
        does not set."""


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    def score(self, state: CycleState, nodes: I64, out: F64) -> bool | None:
        """Score the listed nodes into ``out``, 0..100, higher is better.

        ``False``: the plugin has nothing to say about this pod (it would score 0 on every node); ``out`` is left
        as it is and the cycle skips the plugin's weight and normalisation, so pods that use none of a plugin's
        rules pay nothing for it (kube-scheduler's PreScore Skip)."""


@runtime_checkable
class NormalizePlugin(Plugin, Protocol):
    def normalize(self, state: CycleState, scores: F64) -> None: ...


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    def reserve(self, state: CycleState, slot: int) -> Status: ...

    def unreserve(self, state: CycleState, slot: int) -> None: ...


@dataclass(frozen=True, slots=True)
class Decision:
    """Where a pod goes: the node, the GPU devices on it, and the volumes chosen for its unbound claims."""

    pod: PodRequest
    node: str
    gpu_ids: tuple[int, ...] = ()
    volumes: tuple[ClaimBinding, ...] = ()
    #: What it does with the pod's ResourceClaims (allocate, or reserve an allocated one), in the pod's order.
    claims: tuple[ClaimAllocation, ...] = ()


class Binder(Protocol):
    """Hands decisions to whatever makes them real (the API server, or the simulator)."""

    def bind(self, decision: Decision) -> None:
        """Start binding; the outcome comes back through the scheduler's ``bound`` / ``bind_failed``."""


PluginArgs = Mapping[str, Any]

#: A GPU device chosen in reserve is kept in the state under this key.
GPU_IDS = "gpu_ids"
#: The volumes chosen in reserve for the pod's unbound claims (``ClaimBinding``s) are kept under this key.
VOLUME_BINDINGS = "volume.bindings"
#: What reserve decided for the pod's ResourceClaims (``ClaimAllocation``s) is kept under this key.
DEVICE_CLAIMS = "dra.claims"
