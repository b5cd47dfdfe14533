"""Which segment each member of a segmented gang belongs to, and where its segment's running members are.

A gang with ``spec.segments`` cuts the members it places together (its first ``minMember`` by ``member_rank``)
into segments of ``size``; the cut is by rank, so a member keeps its segment across restarts of its pod (a
workload's controller makes a lost member again with the same index). Members ranked beyond ``minMember`` (an
elastic gang's surplus) belong to no segment: they join the gang's nodes.

When some members of a segmented gang run and others are made again (lost with their node), each new member goes
to the domain its own segment's running members are in (``segments.required``: only there; ``preferred``: near
them), not merely to the gang's: :func:`layout` says, for the gang's members as they stand, the segment of each
and the node slots each segment's placed members hold. ``scheduler.core.gang`` reads it for a member placed
alone (``member_context``) and for a whole-gang attempt that rejoins running members (``what_if_in_segments``).
A segment with no member running is placed as a new one, in any domain that holds it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from scheduler.api.crds.podgroup import PodGroup, member_rank
from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import Cache


@dataclass(frozen=True, slots=True)
class Layout:
    #: Member key -> its segment (members ranked beyond ``minMember`` have none).
    segment: dict[str, int] = field(default_factory=dict)
    #: Segment -> node slots its placed members run on, one entry per member.
    slots: dict[int, list[int]] = field(default_factory=dict)

    def anchor(self, segment: int) -> list[int]:
        """The node slots the placed members of ``segment`` run on ([] if none runs)."""
        return self.slots.get(segment, [])


def layout(cache: Cache, group: PodGroup, placed: Iterable[str], pending: Iterable[PodRequest]) -> Layout | None:
    """The segments of ``group``'s members (``placed`` keys, read from ``cache``, and ``pending`` pods), or None
    for a gang without segments."""
    size = group.segment_size
    if not size:
        return None
    where: dict[str, int] = {}
    members: list[PodRequest] = []
    for key in placed:
        entry = cache.pod(key)
        if entry is not None:
            where[key] = entry.placement.slot
            members.append(entry.pod)
    for pod in pending:
        if pod.key not in where:
            where[pod.key] = -1  # waiting: ranked once, on no node
            members.append(pod)
    ranked = sorted(members, key=lambda p: (member_rank(p.labels, p.name), p.key))
    segment = {p.key: i // size for i, p in enumerate(ranked[: group.min_member])}
    slots: dict[int, list[int]] = {}
    for key, slot in where.items():
        if key in segment and slot >= 0:
            slots.setdefault(segment[key], []).append(slot)
    return Layout(segment, slots)
