"""What a filter's reason codes mean, declared by the plugin that sets them.

A filter marks each node it refuses with an int8 code (``FilterPlugin.filter``). Everything the core and explain
say or decide about a refused node comes from that code's :class:`Reason`, declared next to the filter (the
plugin class's ``reasons``) and gathered by the registry (``scheduler.core.registry.REASONS``), so a new filter
adds its meaning in its own module: the text counted in kube-scheduler's sentence (``0/N nodes are available:
...``), whether evicting pods there can clear it (preemption and reclaim skip a node that no eviction helps),
whether other nodes' pods may be behind it, the cluster events that may clear it, and, for a rule no pod leaving
ever clears, what would change it (the never-fits sentence, ``scheduler.core.capacity``).

Codes: ``scheduler.kernels.layout`` keeps the numbers the kernels and the cache write (``FIT``, ``ABSENT``,
``UNSCHEDULABLE``, the GPU shortfalls, and ``RESOURCE`` + column for "Insufficient <resource>"); the core's own
(:data:`RESERVED`) are here; a plugin's are in its module. A plugin picks codes in 1..``RESOURCE - 1`` or
-128..-1 that nobody else declares (:class:`Table` refuses a code declared twice and names the free ones).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import Snapshot
from scheduler.framework.interface import ClusterEvent
from scheduler.kernels import layout

Mask = npt.NDArray[np.bool_]
Slots = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class NeverFits:
    """A rule that depends only on the node and the pod's spec: no pod leaving clears it, so a pod that every node
    refuses for such rules (or is too small for) never fits as the cluster is (``scheduler.core.capacity``)."""

    #: What would let the pod use the given nodes (those refused for this reason), as a clause after "it fits
    #: there once": "it tolerates dedicated=ml:NoSchedule (or the taint is removed)"; "" when nothing to say.
    change: Callable[[Snapshot, PodRequest, Mask], str]
    #: Of the nodes refused for this reason (a mask), those out for good (a taint the node lifecycle controller
    #: clears on its own is not); None: all of them.
    lasting: Callable[[Snapshot, PodRequest, Mask], Mask] | None = None
    #: The nodes this rule keeps the pod off whatever they were refused for first (a GPU model the pod does not
    #: allow), or None when it says nothing beyond the nodes refused for it.
    elsewhere: Callable[[Snapshot, PodRequest], Mask | None] | None = None


@dataclass(frozen=True, slots=True)
class Reason:
    """One reason code a filter sets, and what it means."""

    code: int
    #: kube-scheduler's words for it, counted per node in ``0/N nodes are available: ...``.
    text: str
    #: Whether evicting pods on the node can clear it; False is kube-scheduler's UnschedulableAndUnresolvable:
    #: preemption and reclaim do not try such a node.
    eviction_helps: bool
    #: Whether pods on other nodes may be behind it (anti-affinity, a spread's skew): a victim elsewhere may help,
    #: so reclaim cannot narrow its search to the refused node's own pods.
    across_nodes: bool = False
    #: Whether it says the node is short of room for the pod (GPUs, resources): explain still counts the node's
    #: free GPUs as ones the pod may use.
    short_of_room: bool = False
    #: The cluster events that may clear it on a node (the queueing hint); None: any event may.
    wakes: frozenset[ClusterEvent] | None = None
    #: The texts per node when the text names what refused it there (a taint): how many of the nodes ``slots``
    #: (all refused for it) say each text. None: :attr:`text` for every node.
    texts: Callable[[Snapshot, PodRequest, Slots], Counter[str]] | None = None
    #: For a rule no pod leaving ever clears: what the never-fits sentence says of it.
    never: NeverFits | None = None

    def count(self, snapshot: Snapshot, pod: PodRequest, slots: Slots) -> Counter[str]:
        """The nodes ``slots`` (all refused for this reason), counted by the text each says."""
        if self.texts is not None:
            return self.texts(snapshot, pod, slots)
        return Counter({self.text: int(slots.shape[0])}) if slots.shape[0] else Counter()


def wakes(declared: Iterable[Reason], code: int) -> frozenset[ClusterEvent] | None:
    """What one of ``declared`` says wakes a pod refused for ``code`` (a filter's ``wakes``); None for a code it
    does not declare."""
    return next((r.wakes for r in declared if r.code == code), None)


#: The core's own codes: an empty slot (the cache), a cordoned node (the cache; ``node_rules`` gives it back to a
#: pod that tolerates the cordon), a node held for another job (``scheduler.core.holds``).
ABSENT = Reason(layout.ABSENT, "node(s) absent", eviction_helps=False)
UNSCHEDULABLE = Reason(
    layout.UNSCHEDULABLE,
    "node(s) were unschedulable",
    eviction_helps=False,
    wakes=frozenset({ClusterEvent.NODE_UPDATED, ClusterEvent.NODE_ADDED}),
)
RESERVED = Reason(9, "node(s) reserved for a waiting job", eviction_helps=True)
CORE = (ABSENT, UNSCHEDULABLE, RESERVED)

#: "Insufficient <resource>" (``layout.RESOURCE`` + the resource's column, set by the fit kernel).
_INSUFFICIENT = Reason(layout.RESOURCE, "Insufficient resource", eviction_helps=True, short_of_room=True)


class Table:
    """Every declared reason by code, with the per-code lookups the core makes over whole reason arrays."""

    def __init__(self, declared: Iterable[tuple[str, Reason]]) -> None:
        """``declared``: (who declares it, the reason) pairs, the core's and each registered filter's."""
        self.by_code: dict[int, Reason] = {}
        owner: dict[int, str] = {}
        for who, reason in declared:
            code = reason.code
            if not (-128 <= code < layout.RESOURCE) or code == layout.FIT:
                raise ValueError(f"{who}: reason code {code} is outside -128..{layout.RESOURCE - 1} or is FIT (0)")
            if code in owner and self.by_code[code] is not reason:
                raise ValueError(
                    f"{who}: reason code {code} is {owner[code]}'s already; free codes: {self._free_codes()}"
                )
            self.by_code[code] = reason
            owner[code] = who
        #: In declaration order: the rules the never-fits sentence speaks of.
        self.never = tuple(r for r in self.by_code.values() if r.never is not None)
        self._unresolvable = self._lookup(lambda r: not r.eviction_helps)
        self._across_nodes = self._lookup(lambda r: r.across_nodes)
        self._short_of_room = self._lookup(lambda r: r.short_of_room)

    def _free_codes(self) -> str:
        free = [c for c in [*range(1, layout.RESOURCE), *range(-1, -129, -1)] if c not in self.by_code]
        return ", ".join(map(str, free[:8])) + (" ..." if len(free) > 8 else "")

    def _lookup(self, test: Callable[[Reason], bool]) -> npt.NDArray[np.bool_]:
        """Per code (an int8 read as uint8), whether its reason passes ``test`` (the resource codes as
        "Insufficient <resource>")."""
        table = np.zeros(256, dtype=bool)
        table[layout.RESOURCE : 128] = test(_INSUFFICIENT)
        codes = [c for c, r in self.by_code.items() if test(r)]
        table[np.array(codes, dtype=np.int8).view(np.uint8)] = True
        return table

    def get(self, code: int) -> Reason | None:
        return self.by_code.get(code)

    def text(self, code: int, columns: list[str]) -> str:
        """The text of ``code``; ``columns``: the snapshot's resource names (for "Insufficient <resource>")."""
        if code >= layout.RESOURCE:
            column = code - layout.RESOURCE
            return f"Insufficient {columns[column] if column < len(columns) else 'resource'}"
        reason = self.by_code.get(code)
        return reason.text if reason is not None else f"reason {code}"

    def unresolvable(self, reasons: np.ndarray) -> Mask:
        """Per node, whether no eviction there can clear its reason."""
        return _among(reasons, self._unresolvable)

    def across_nodes(self, reasons: np.ndarray) -> Mask:
        """Per node, whether its reason may be other nodes' pods' doing."""
        return _among(reasons, self._across_nodes)

    def short_of_room(self, reasons: np.ndarray) -> Mask:
        """Per node, whether it was refused only for want of room (or not at all: ``FIT``)."""
        short: Mask = _among(reasons, self._short_of_room) | (reasons == layout.FIT)
        return short


def _among(reasons: np.ndarray, table: npt.NDArray[np.bool_]) -> Mask:
    return np.asarray(table[reasons.astype(np.int8, copy=False).view(np.uint8)], dtype=bool)
