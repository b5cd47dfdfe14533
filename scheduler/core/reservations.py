"""Reservations: room held ahead of the pods that will use it (issue 43; ``scheduler.api.crds.reservation``).

A Reservation is placed as a gang of its *ghost* pods would be (``scheduler.core.gang.plan_gang``: the same
filters, scores and topology levels, with the same nodes held for others kept off); once it fits, the nodes its
ghosts landed on are held in the holds registry (``Kind.RESERVATION``) until its expiry, so that every other job's
cycles, victim searches and move plans leave them alone, and the pods its ``owners`` name are confined to them
(placed there first: its room is theirs). Its ghosts count in its Queue from the moment it holds room
(``Tenancy.hold``) until a user takes their place, it expires or it is deleted.

Phases (``status.phase``): Pending (not placed yet: the ``Available`` condition says why), Available (holding
room), Succeeded (``allocateOnce`` and its first user is bound), Expired (its time is up: the room is freed),
Failed (the object cannot be read; nothing else stops). What each Reservation shows is kept here
(:meth:`Reservations.status`); the operator writes it and the Events this module emits.

Invariants: a Reservation holds room only while Available; a final phase never changes back (the status the
scheduler wrote is read back after a restart or a change of leader, and an Available one is held again on the nodes
its status names, as long as the cache knows them all; else it is placed anew).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from scheduler.api.crds import podgroup as api_podgroup
from scheduler.api.crds import reservation as api_reservation
from scheduler.api.crds.queue import DEFAULT_QUEUE
from scheduler.api.crds.reservation import Reservation
from scheduler.api.objects.pod import PodRequest
from scheduler.core import gang, holds
from scheduler.core.cycle import Scheduler
from scheduler.core.holds import Hold, Holds, Kind
from scheduler.core.ports import Events
from scheduler.core.tenancy import Tenancy, requests_of

#: The condition a Reservation's status carries (True while it holds room).
CONDITION = "Available"
#: The phases in which a Reservation holds room or may come to.
_LIVE = (api_reservation.PENDING, api_reservation.AVAILABLE)


@dataclass
class Entry:
    """What the core keeps of one Reservation."""

    reservation: Reservation
    ghosts: tuple[PodRequest, ...]
    phase: str = api_reservation.PENDING
    #: The node of each ghost while it holds room.
    nodes: tuple[str, ...] = ()
    #: The ghosts still counted in the queue (a user bound takes its ghost's place).
    charged: list[str] = field(default_factory=list)
    #: The job and pod keys of its users waiting or placed (the hold confines them to its nodes).
    users: set[str] = field(default_factory=set)
    #: The pods bound into it.
    bound: list[str] = field(default_factory=list)
    reason: str = "Pending"
    message: str = "not placed yet"
    since: float = 0.0

    @property
    def key(self) -> str:
        return self.reservation.key

    @property
    def hold_key(self) -> str:
        """Its hold's job key in the registry."""
        return holds.reservation_key(self.key)

    @property
    def queue(self) -> str:
        return self.reservation.queue or (self.ghosts[0].queue if self.ghosts else "") or DEFAULT_QUEUE


class Reservations:
    """Every Reservation the feed has shown, their holds and their queue's charges; see the module notes."""

    def __init__(
        self,
        scheduler: Scheduler,
        holds: Holds,
        tenancy: Tenancy,
        *,
        events: Events,
        clock: Callable[[], float],
    ) -> None:
        self.scheduler = scheduler
        self.holds = holds
        self.tenancy = tenancy
        self.events = events
        self.clock = clock
        self.entries: dict[str, Entry] = {}
        #: Whether room was freed since the loop last asked (:meth:`freed`): the jobs it kept off may fit now.
        self._freed = False
        holds.when_expired(Kind.RESERVATION, self._expired)

    # --- what the feed tells -----------------------------------------------------------------------------------

    def upsert(self, reservation: Reservation, ghosts: tuple[PodRequest, ...]) -> None:
        """A Reservation was seen (new, changed, or listed again after a restart), with its ghost pods."""
        old = self.entries.get(reservation.key)
        if old is not None and _same_spec(old.reservation, reservation):
            old.reservation = reservation
            if reservation.phase in api_reservation.FINAL and old.phase in _LIVE:
                self._free(old)  # the leader ended it (a standby hears it so): it ends here too, without a word
                old.phase, old.reason, old.message = reservation.phase, reservation.phase, "ended by the leader"
                return
            written = reservation.phase == api_reservation.AVAILABLE and reservation.nodes
            if written and old.phase in _LIVE and reservation.nodes != old.nodes:
                # The leader holds it elsewhere than this replica placed it (a standby places it too, on its own
                # cache): its written word wins, so that the next leader holds what this one held.
                self._free(old)
                if not self._hold_again(old):
                    old.phase = api_reservation.PENDING
            return
        if old is not None:
            self._free(old)
        entry = Entry(reservation, ghosts, since=self.clock())
        self.entries[reservation.key] = entry
        if reservation.phase in api_reservation.FINAL and old is None:
            entry.phase = reservation.phase  # ended before this replica saw it: it stays ended
            entry.reason, entry.message = reservation.phase, "it ended before the scheduler (re)started"
            return
        if reservation.phase == api_reservation.AVAILABLE and reservation.nodes and self._hold_again(entry):
            return
        self.place(entry)

    def removed(self, key: str) -> None:
        """The Reservation was deleted: its room is free for others."""
        entry = self.entries.pop(key, None)
        if entry is not None:
            self._free(entry)

    def failed(self, key: str, message: str) -> None:
        """The Reservation cannot be read: it holds nothing (it is marked Failed, with ``message``)."""
        entry = self.entries.get(key)
        if entry is not None:
            self._free(entry)
        namespace, _, name = key.partition("/")
        entry = Entry(Reservation(namespace=namespace, name=name), ())
        entry.phase, entry.reason, entry.message, entry.since = api_reservation.FAILED, "Invalid", message, self.clock()
        self.entries[key] = entry

    def pod_pending(self, pod: PodRequest, job_key: str) -> None:
        """A pod of ours waits: if a Reservation names it, it (and its job) may use that Reservation's room, and
        only that."""
        for entry in self._live():
            if entry.reservation.owns(pod) and not {pod.key, job_key} <= entry.users:
                entry.users |= {pod.key, job_key}
                if entry.phase == api_reservation.AVAILABLE:
                    self._hold(entry)

    def pod_placed(self, pod: PodRequest) -> None:
        """A pod is bound: if it is a user bound into a Reservation's nodes, it takes a ghost's place in the queue;
        an ``allocateOnce`` Reservation ends with it (Succeeded)."""
        for entry in self._live():
            if entry.phase != api_reservation.AVAILABLE or pod.key in entry.bound:
                continue
            if pod.node_name not in entry.nodes or not entry.reservation.owns(pod):
                continue
            entry.bound.append(pod.key)
            if entry.charged:
                self.tenancy.release(entry.charged.pop())
            if entry.reservation.allocate_once:
                self._end(entry, api_reservation.SUCCEEDED, "Used", f"pod {pod.key} is bound into it")
            else:
                self._say(entry, "Held", f"{self._holding(entry)}; pod {pod.key} is bound into it")

    def pod_gone(self, key: str) -> None:
        for entry in self.entries.values():
            entry.users.discard(key)

    # --- placing -----------------------------------------------------------------------------------------------

    def place_pending(self) -> None:
        """Try to place every Pending Reservation (the cluster changed: room may have come)."""
        for entry in list(self._live()):
            if entry.phase == api_reservation.PENDING:
                self.place(entry)

    def place(self, entry: Entry) -> None:
        """Place ``entry``'s ghosts as a gang of them would be, and hold their nodes; or say why it waits."""
        rsv = entry.reservation
        until = rsv.until
        if until is not None and self.clock() >= until:
            self._end(entry, api_reservation.EXPIRED, "Expired", "its time was up before it could hold room")
            return
        if entry.queue not in self.tenancy.tree.leaves():
            self._say(entry, "QueueNotFound", f"queue {entry.queue!r} does not exist (or is not a leaf)")
            return
        over = self.tenancy.over_ceiling(entry.queue, requests_of(list(entry.ghosts)))
        if over:
            self._say(entry, "QueueLimit", over)
            return
        group = api_podgroup.PodGroup(
            namespace=rsv.namespace,
            name=rsv.name,
            min_member=rsv.replicas,
            queue=entry.queue,
            topology=rsv.topology,
        )
        context = self.holds.context(entry.hold_key, priority=0)
        planned = gang.plan_gang(self.scheduler, self.scheduler.cache.snapshot(), group, entry.ghosts, context)
        if not planned.status.ok or not planned.decisions:
            self._say(entry, "Unschedulable", planned.status.message)
            return
        by_ghost = {d.pod.key: d.node for d in planned.decisions}
        self._take(entry, tuple(by_ghost[g.key] for g in entry.ghosts))

    def _hold_again(self, entry: Entry) -> bool:
        """Hold an Available Reservation read back from the API server on the nodes its status names, if the cache
        knows them all."""
        nodes = entry.reservation.nodes
        if len(nodes) != len(entry.ghosts) or any(self.scheduler.cache.slot_of(n) is None for n in nodes):
            return False
        self._take(entry, nodes)
        return True

    def _take(self, entry: Entry, nodes: tuple[str, ...]) -> None:
        entry.nodes = nodes
        entry.phase = api_reservation.AVAILABLE
        self._hold(entry)
        for ghost, node in zip(entry.ghosts, nodes, strict=True):
            self.tenancy.hold(dataclasses.replace(ghost, node_name=node), entry.queue)
            entry.charged.append(ghost.key)
        self._say(entry, "Held", self._holding(entry))
        self.events.emit(obj=f"reservation {entry.key}", kind="Normal", reason="Reserved", message=entry.message)

    def _hold(self, entry: Entry) -> None:
        mask = self._mask(entry.nodes)
        self.holds.hold(
            kind=Kind.RESERVATION,
            job=entry.hold_key,
            slots=mask,
            until=entry.reservation.until,
            queue=entry.queue,
            only={key: mask for key in entry.users},
        )

    def _mask(self, nodes: tuple[str, ...]) -> np.ndarray:
        mask = np.zeros(self.scheduler.cache.arrays.slots, dtype=bool)
        for node in nodes:
            slot = self.scheduler.cache.slot_of(node)
            if slot is not None:
                mask[slot] = True
        return mask

    # --- ending ------------------------------------------------------------------------------------------------

    def _expired(self, hold: Hold) -> None:
        """The registry dropped a Reservation's hold: its time is up."""
        entry = self.entries.get(holds.reservation_of(hold))
        if entry is not None and entry.phase == api_reservation.AVAILABLE:
            self._end(entry, api_reservation.EXPIRED, "Expired", "its time is up: the room is free")

    def expire(self) -> None:
        """Drop the holds whose time is up (the registry tells :meth:`_expired`), and end the Pending Reservations
        whose time is up too."""
        self.holds.expire()
        now = self.clock()
        for entry in list(self._live()):
            until = entry.reservation.until
            if entry.phase == api_reservation.PENDING and until is not None and now >= until:
                self._end(entry, api_reservation.EXPIRED, "Expired", "its time was up before it could hold room")

    def _end(self, entry: Entry, phase: str, reason: str, message: str) -> None:
        self._free(entry)
        entry.phase = phase
        self._say(entry, reason, message)
        kind = "Normal" if phase != api_reservation.FAILED else "Warning"
        self.events.emit(obj=f"reservation {entry.key}", kind=kind, reason=reason, message=message)

    def _free(self, entry: Entry) -> None:
        """Release what ``entry`` holds: its nodes and its ghosts' charges."""
        if entry.phase == api_reservation.AVAILABLE:
            self.holds.release(entry.hold_key, kind=Kind.RESERVATION)
            self._freed = True
        for key in entry.charged:
            self.tenancy.release(key)
        entry.charged.clear()

    def freed(self) -> bool:
        """Whether room was freed since the last call (the loop then wakes the jobs it kept off)."""
        freed, self._freed = self._freed, False
        return freed

    # --- what users read ---------------------------------------------------------------------------------------

    def _live(self) -> list[Entry]:
        return [e for e in self.entries.values() if e.phase in _LIVE]

    def _holding(self, entry: Entry) -> str:
        held = requests_of(list(entry.ghosts))
        what = ", ".join(f"{name} {amount:g}" for name, amount in sorted(held.items()) if name != "pods")
        return f"holds {what} on {', '.join(sorted(set(entry.nodes)))}"

    def _say(self, entry: Entry, reason: str, message: str) -> None:
        if (entry.reason, entry.message) != (reason, message):
            entry.since = self.clock()
        entry.reason, entry.message = reason, message

    def holding(self, node: str) -> list[Entry]:
        """The Available Reservations that hold room on ``node``."""
        return [e for e in self.entries.values() if e.phase == api_reservation.AVAILABLE and node in e.nodes]

    def status(self, key: str) -> dict[str, object] | None:
        """The Reservation's status as users read it (the operator writes it to ``status``, ``held`` as
        quantities; ``expirationTime`` and ``lastTransitionTime`` are Unix seconds)."""
        entry = self.entries.get(key)
        if entry is None:
            return None
        rsv = entry.reservation
        available = entry.phase == api_reservation.AVAILABLE
        held = requests_of(list(entry.ghosts)) if available else {}
        return {
            "phase": entry.phase,
            "nodes": list(entry.nodes) if available else [],
            # None removes the field (the status is merge-patched: an empty map would leave the old amounts).
            "held": {name: amount for name, amount in sorted(held.items()) if name != "pods"} or None,
            "expirationTime": rsv.until,
            "users": list(entry.bound),
            "conditions": [
                {
                    "type": CONDITION,
                    "status": "True" if available else "False",
                    "reason": entry.reason,
                    "message": entry.message,
                    "lastTransitionTime": entry.since,
                }
            ],
        }


def _same_spec(old: Reservation, new: Reservation) -> bool:
    """Whether two versions of a Reservation ask for the same (its status, written by the scheduler, aside)."""
    return dataclasses.replace(old, phase=new.phase, nodes=new.nodes) == new
