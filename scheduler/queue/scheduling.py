"""The pending-work queue: which pod or gang the scheduler tries next, and when a failed one comes back.

Built as kube-scheduler's ``PriorityQueue``: every pending item is in exactly one of four places,

- **active**: a heap in scheduling order (``less``; by default higher priority, then older, then key);
- **backoff**: a heap by the time the item's backoff ends; :meth:`SchedulingQueue.pop` moves ready ones to
  active;
- **unschedulable**: a pool of items that did not fit, waiting for a cluster event
  (:meth:`SchedulingQueue.move_all_to_active`) or, as a safety net for a missed event, the
  ``unschedulable_timeout_s``;
- **in flight**: popped, being tried, until requeued, :meth:`SchedulingQueue.done` or removed.

A failed cycle's Status code picks the way back, as in kube-scheduler: ``ERROR`` ->
:meth:`~SchedulingQueue.requeue_error` (backoff: the cluster did not say no, something broke);
``UNSCHEDULABLE`` and ``UNRESOLVABLE`` -> :meth:`~SchedulingQueue.requeue_unschedulable` (retrying before the
cluster changes would fail the same way); a refusal before the item could be tried at all (``Status.gated``,
kube-scheduler's PreEnqueue: a ResourceClaim it names does not exist yet) -> :meth:`~SchedulingQueue.requeue_gated`
(the attempt is not counted and there is no backoff: the object's arrival lets it be tried at once).

Invariants:

- a key is in one place at a time, never two, and never lost until removed or done;
- an item in active is ready: nothing leaves backoff before its backoff has run
  (``initial_backoff_s * 2**(attempts - 1)``, at most ``max_backoff_s``), whatever woke it; except, with
  ``pop_from_backoff`` (kube-scheduler's SchedulerPopFromBackoffQ, on by default since v1.33), when active is empty:
  then :meth:`SchedulingQueue.pop` takes the backoff item whose backoff ends first among those that were refused for
  lack of room and woken by an event (never one that broke, or whose binding was refused), so that a waiting pod
  takes the room a departure frees while nothing else wants the scheduler, rather than after its backoff;
- a cluster event that arrives while an item is in flight is not lost: that item goes to backoff, not to the
  pool (kube-scheduler's "moveRequestCycle" rule); so is an update of the item itself;
- an item removed while in flight stays forgotten: a late requeue of it is ignored;
- deterministic: no I/O, no wall clock (time comes from the injected ``clock``, which must not go back), and
  the same calls with the same clock readings give the same order.

Not thread-safe: one loop owns the queue (kopf's handlers and the simulator both run on one thread).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from scheduler.queue.heap import KeyedHeap

#: Where a pending key is; see the module docstring.
Where = Literal["active", "backoff", "unschedulable", "in-flight"]


class Work(Protocol):
    """What the queue reads of a unit of work when it is queued (the core's ``Job`` is one)."""

    @property
    def key(self) -> str: ...

    @property
    def queue(self) -> str: ...

    @property
    def priority(self) -> int: ...

    @property
    def created(self) -> float: ...


@dataclass(slots=True)
class QueueItem:
    """One unit of pending work as the queue sees it: what orders it and what the queue counted of it.

    The queue never knows what the work is (a pod, a gang tried whole, a gang's member tried alone): the layer
    above keys its own work by ``key`` and keeps it there; the values that order the item are copied in here, so
    that the heaps never see them change without an :meth:`SchedulingQueue.update`.
    """

    #: Unique in the queue; whoever queues work keys it (the core: its job's key, or a pod's).
    key: str
    #: Higher goes first under the default ordering.
    priority: int
    #: When the work was created (a pod, or a gang's PodGroup), in clock seconds; older goes first on a tie.
    created: float
    #: The tenant (leaf) queue it belongs to; ``""`` is the default queue.
    queue: str = ""
    #: How many times it has been popped; drives the backoff.
    attempts: int = 0
    #: When it was first popped (None until then): the start of its time to schedule.
    first_attempt: float | None = None
    #: Why the last attempt failed, for ``gpusched explain``.
    last_reason: str = ""

    @classmethod
    def of(cls, work: Work) -> QueueItem:
        """The item for ``work`` as it is now (its key, leaf queue, priority and creation time)."""
        return cls(work.key, work.priority, work.created, work.queue)


#: ``less(a, b)``: should ``a`` be tried before ``b``? A strict order (``less(a, a)`` is false).
Less = Callable[[QueueItem, QueueItem], bool]


def priority_sort(a: QueueItem, b: QueueItem) -> bool:
    """The default ordering: higher priority first, then older ``created``, then key (so no tie is left)."""
    return (-a.priority, a.created, a.key) < (-b.priority, b.created, b.key)


@dataclass(slots=True)
class _Entry:
    """The queue's bookkeeping for one key; where it is, is told by which container holds the key."""

    item: QueueItem
    #: When it entered the unschedulable pool (for the timeout).
    since: float = 0.0
    #: When its backoff ends; before then a wake-up sends it to backoff, not to active.
    ready_at: float = -math.inf
    #: The event count when it was popped: a larger count at requeue means an event came in flight.
    popped_at_event: int = 0
    #: The newest version that arrived while it was in flight; taken in at requeue.
    update: QueueItem | None = None


class _ByQueue:
    """The active items as one heap per tenant queue (each by :func:`priority_sort`) and the queues' places: the
    next item is the head of the queue with the first place (a queue without one comes last; a tie between such
    queues is broken by their heads). A new order of the queues is a new ``places``, O(1): the items inside each
    queue keep their order, so nothing is re-sorted (one heap over every item had to be, O(n) per fair-share change).

    The same interface as :class:`KeyedHeap` for what the scheduling queue uses.
    """

    __slots__ = ("_entries", "_heaps", "_places", "_where")

    def __init__(self, entries: dict[str, _Entry], places: Mapping[str, int]) -> None:
        self._entries = entries
        self._places = places
        self._heaps: dict[str, KeyedHeap] = {}
        #: Key -> the queue whose heap holds it (an update may change an item's queue).
        self._where: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, key: object) -> bool:
        return key in self._where

    def set_places(self, places: Mapping[str, int]) -> None:
        self._places = places

    def push(self, key: str) -> None:
        queue = self._entries[key].item.queue
        heap = self._heaps.get(queue)
        if heap is None:
            heap = self._heaps[queue] = KeyedHeap(self._before)
        heap.push(key)
        self._where[key] = queue

    def remove(self, key: str) -> None:
        queue = self._where.pop(key)
        heap = self._heaps[queue]
        heap.remove(key)
        if not heap:
            del self._heaps[queue]

    def fix(self, key: str) -> None:
        if self._entries[key].item.queue != self._where[key]:
            self.remove(key)
            self.push(key)
        else:
            self._heaps[self._where[key]].fix(key)

    def pop(self) -> str:
        if not self._where:
            raise IndexError("pop from an empty queue")
        best = min(self._heaps.items(), key=lambda qh: self._order(qh[0], qh[1].peek() or ""))
        key = best[1].pop()
        del self._where[key]
        if not best[1]:
            del self._heaps[best[0]]
        return key

    def keys(self) -> list[str]:
        return list(self._where)

    def ordered(self) -> list[str]:
        return sorted(self._where, key=lambda key: self._order(self._where[key], key))

    def _order(self, queue: str, key: str) -> tuple[int, int, float, str]:
        item = self._entries[key].item
        return (self._places.get(queue, len(self._places)), -item.priority, item.created, key)

    def _before(self, a: str, b: str) -> bool:
        return priority_sort(self._entries[a].item, self._entries[b].item)


class SchedulingQueue:
    """Active heap, backoff heap and unschedulable pool for pending pods and gangs (see the module docstring)."""

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        initial_backoff_s: float = 1.0,
        max_backoff_s: float = 10.0,
        unschedulable_timeout_s: float = 60.0,
        less: Less | None = None,
        pop_from_backoff: bool = False,
    ) -> None:
        """Make an empty queue.

        :param clock: seconds, never going back (``time.monotonic``, or the simulator's time).
        :param initial_backoff_s: the wait after the first failed attempt; it doubles with each attempt.
        :param max_backoff_s: the longest backoff.
        :param unschedulable_timeout_s: the longest an item waits in the unschedulable pool without an event.
        :param less: the scheduling order of the active heap; :func:`priority_sort` when None.
        :param pop_from_backoff: with active empty, take an item woken by an event from backoff before its backoff
            has run (kube-scheduler's SchedulerPopFromBackoffQ; see the module notes).
        """
        for name, value in (
            ("initial_backoff_s", initial_backoff_s),
            ("max_backoff_s", max_backoff_s),
            ("unschedulable_timeout_s", unschedulable_timeout_s),
        ):
            if not value >= 0:
                raise ValueError(f"SchedulingQueue: {name} must be a number of seconds >= 0, not {value!r}")
        self._clock = clock
        self._initial_backoff_s = initial_backoff_s
        self._max_backoff_s = max_backoff_s
        self._unschedulable_timeout_s = unschedulable_timeout_s
        self._less: Less = less if less is not None else priority_sort
        self._pop_from_backoff = pop_from_backoff
        #: The keys in backoff after a refusal for lack of room and an event (not an error, not a refused binding):
        #: those that may leave it early when active is empty (``pop_from_backoff``).
        self._woken: set[str] = set()
        self._entries: dict[str, _Entry] = {}
        self._active: KeyedHeap | _ByQueue = KeyedHeap(self._active_before)
        self._backoff = KeyedHeap(self._backoff_before)
        #: Key -> None, in the order the keys came in, which is the order of their ``since`` (the clock
        #: does not go back): the timeout looks at the oldest only.
        self._unschedulable: dict[str, None] = {}
        self._in_flight: dict[str, None] = {}
        self._events = 0
        #: Items that left the pool on a cluster event, since the start (what the queueing hints let through).
        self.woken = 0

    # -- what comes in --------------------------------------------------------------------------------------------

    def add(self, item: QueueItem) -> None:
        """A new pod or gang: it goes to active. A key the queue already holds is an :meth:`update`."""
        if item.key in self._entries:
            self.update(item)
            return
        self._entries[item.key] = _Entry(item)
        self._active.push(item.key)

    def update(self, item: QueueItem) -> None:
        """A changed pod or gang (call it for changes that matter to scheduling, not for status-only ones).

        Its priority, created and queue replace the old ones; its attempts and last reason stay.
        In active or backoff it stays where it is (backoff is not cut short). In the unschedulable pool it
        leaves the pool, as kube-scheduler does on a pod update: the change may make it fit, so it goes to
        active, or to backoff if its backoff has not run yet. In flight, the new version is kept for the
        requeue, which then counts it as an event. An unknown key is added.
        """
        entry = self._entries.get(item.key)
        if entry is None:
            self.add(item)
            return
        key = item.key
        if key in self._in_flight:
            entry.update = item
            return
        _take_in(entry.item, item)
        if key in self._active:
            self._active.fix(key)
        elif key in self._unschedulable:
            del self._unschedulable[key]
            self._wake(entry, self._clock())

    def remove(self, key: str) -> None:
        """The pod or gang is gone (deleted, or no longer ours): forget it wherever it is.

        If it is in flight, a later requeue of it is ignored.
        """
        if key not in self._entries:
            return
        if key in self._active:
            self._active.remove(key)
        elif key in self._backoff:
            self._backoff.remove(key)
            self._woken.discard(key)
        elif key in self._unschedulable:
            del self._unschedulable[key]
        else:
            del self._in_flight[key]
        # Last: the heaps' orderings read the entries.
        del self._entries[key]

    def back_off(self, key: str, seconds: float) -> None:
        """Keep ``key`` out of active for ``seconds`` from now (a binding the API server refused: the binder's
        backoff, which grows per refusal of the pod). In active it moves to backoff; in backoff or the pool it
        waits at least that long; a key not queued, or in flight, is left as it is."""
        entry = self._entries.get(key)
        if entry is None or key in self._in_flight:
            return
        entry.ready_at = max(entry.ready_at, self._clock() + seconds)
        self._woken.discard(key)
        if key in self._active:
            self._active.remove(key)
            self._backoff.push(key)
        elif key in self._backoff:
            self._backoff.fix(key)

    def move_all_to_active(self, event: str, may_help: Callable[[QueueItem], bool] | None = None) -> int:
        """A cluster event (``event`` names it: node added, pod deleted, queue changed...) that may let waiting
        items fit: every unschedulable item goes to active, or to backoff if its backoff has not run yet.

        ``may_help`` (a queueing hint) keeps in the pool the items the event cannot help; they still leave it at
        the unschedulable timeout. Items in flight see the event when they are requeued. Returns how many items
        left the pool.
        """
        self._events += 1
        now = self._clock()
        keys = [k for k in self._unschedulable if may_help is None or may_help(self._entries[k].item)]
        for key in keys:
            del self._unschedulable[key]
            self._wake(self._entries[key], now)
        self.woken += len(keys)
        return len(keys)

    # -- the scheduling loop ----------------------------------------------------------------------------------------

    def pop(self) -> QueueItem | None:
        """The next item to try, or None when none is ready (sleep until :meth:`next_wakeup` or an event).

        First every unschedulable item past ``unschedulable_timeout_s`` leaves the pool (as on an event) and
        every backoff item whose time has come goes to active. The item returned has ``attempts`` counted and
        ``first_attempt`` set, and is in flight until it is requeued or :meth:`done`.
        """
        now = self._clock()
        self._flush_unschedulable(now)
        self._flush_backoff(now)
        if not self._active:
            if not (self._pop_from_backoff and self._woken):
                return None
            key = min(self._woken, key=lambda k: (self._entries[k].ready_at, *_order(self._entries[k].item)))
            self._backoff.remove(key)
            self._woken.discard(key)
        else:
            key = self._active.pop()
        self._in_flight[key] = None
        entry = self._entries[key]
        entry.popped_at_event = self._events
        entry.update = None
        item = entry.item
        item.attempts += 1
        if item.first_attempt is None:
            item.first_attempt = now
        return item

    def requeue_error(self, item: QueueItem, reason: str) -> Where | None:
        """The attempt broke (Status ``ERROR``): retry after backoff.

        ``item`` is the object :meth:`pop` returned. Returns where it went, or None if it was removed in flight.
        """
        if self._returning(item, reason) is None:
            return None
        self._backoff.push(item.key)
        return "backoff"

    def requeue_unschedulable(self, item: QueueItem, reason: str) -> Where | None:
        """No place fits it (Status ``UNSCHEDULABLE`` or ``UNRESOLVABLE``): wait in the pool for an event.

        If an event came (or the item was updated) while it was in flight, the answer may be stale: it goes to
        backoff instead. ``item`` is the object :meth:`pop` returned. Returns where it went, or None if it was
        removed in flight.
        """
        returning = self._returning(item, reason)
        if returning is None:
            return None
        entry, changed = returning
        if changed:
            self._backoff.push(item.key)
            self._woken.add(item.key)
            return "backoff"
        entry.since = self._clock()
        self._unschedulable[item.key] = None
        return "unschedulable"

    def requeue_gated(self, item: QueueItem, reason: str) -> Where | None:
        """It could not be tried at all (kube-scheduler's PreEnqueue: an object it names does not exist yet): the
        attempt is not counted and there is no backoff; it waits in the pool for an event, or goes to active at once
        if one came (or the item was updated) while it was in flight. Returns where it went, or None if it was
        removed in flight."""
        returning = self._returning(item, reason)
        if returning is None:
            return None
        entry, changed = returning
        item.attempts -= 1
        entry.ready_at = -math.inf
        if changed:
            self._active.push(item.key)
            return "active"
        entry.since = self._clock()
        self._unschedulable[item.key] = None
        return "unschedulable"

    def done(self, key: str) -> None:
        """The item was scheduled (its binding is handed on): forget it."""
        self.remove(key)

    def next_wakeup(self) -> float | None:
        """When the first backoff item becomes ready, or None if backoff is empty.

        The unschedulable timeout is not counted: it is a safety net for a missed event, which a live loop
        checks on its own tick (kube-scheduler flushes every 30 s); counting it would keep a simulator with a
        pod that never fits awake forever.
        """
        key = self._backoff.peek()
        return None if key is None else self._entries[key].ready_at

    # -- ordering -----------------------------------------------------------------------------------------------------

    def set_queue_order(self, places: Mapping[str, int]) -> None:
        """Order active by tenant queue first, in ``places`` (queue -> its place, 0 first; a queue without one
        last), then by :func:`priority_sort` inside each queue. Call it again with the queues' new places when
        fair share moves them: O(number of queues), nothing is re-sorted."""
        if isinstance(self._active, _ByQueue):
            self._active.set_places(places)
            return
        keys = [self._active.pop() for _ in range(len(self._active))]
        self._active = _ByQueue(self._entries, places)
        for key in keys:
            self._active.push(key)

    # -- for explain -------------------------------------------------------------------------------------------------

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        """Every key the queue holds, in flight included."""
        return len(self._entries)

    def pending(self) -> list[tuple[str, Where]]:
        """Every key and where it is: active in scheduling order, backoff by ready time, the unschedulable pool
        oldest first, then in flight in the order popped."""
        out: list[tuple[str, Where]] = [(key, "active") for key in self._active.ordered()]
        out += [(key, "backoff") for key in self._backoff.ordered()]
        out += [(key, "unschedulable") for key in self._unschedulable]
        out += [(key, "in-flight") for key in self._in_flight]
        return out

    def items(self) -> list[QueueItem]:
        """Every item the queue holds (newest version), in no particular order."""
        return [entry.update if entry.update is not None else entry.item for entry in self._entries.values()]

    def position(self, key: str) -> int | None:
        """The place of ``key`` in active (0 is next), or None if it is not in active."""
        if key not in self._active:
            return None
        return self._active.ordered().index(key)

    # -- inside -------------------------------------------------------------------------------------------------------

    def _active_before(self, a: str, b: str) -> bool:
        return self._less(self._entries[a].item, self._entries[b].item)

    def _backoff_before(self, a: str, b: str) -> bool:
        return (self._entries[a].ready_at, a) < (self._entries[b].ready_at, b)

    def _backoff_s(self, attempts: int) -> float:
        # Doubling in a loop rather than 2**n: no float overflow however many attempts.
        delay = self._initial_backoff_s
        for _ in range(attempts - 1):
            if delay >= self._max_backoff_s or delay == 0:
                break
            delay *= 2
        return min(delay, self._max_backoff_s)

    def _returning(self, item: QueueItem, reason: str) -> tuple[_Entry, bool] | None:
        """Take an in-flight item back: note why it failed, take in its update, start its backoff.

        Returns the entry and whether anything changed while it was in flight (an event, or an update of the
        item: a new version may fit where the old one did not). Returns None, changing nothing, if that item
        is no longer in flight (removed, or removed and added again as a new object under the same key).
        """
        entry = self._entries.get(item.key)
        if entry is None or item.key not in self._in_flight or entry.item is not item:
            return None
        del self._in_flight[item.key]
        changed = self._events > entry.popped_at_event
        if entry.update is not None:
            _take_in(item, entry.update)
            entry.update = None
            changed = True
        item.last_reason = reason
        entry.ready_at = self._clock() + self._backoff_s(item.attempts)
        return entry, changed

    def _wake(self, entry: _Entry, now: float) -> None:
        """Send an item that left the pool to active, or to backoff if its backoff has not run yet."""
        if now < entry.ready_at:
            self._backoff.push(entry.item.key)
            self._woken.add(entry.item.key)
        else:
            self._active.push(entry.item.key)

    def _flush_unschedulable(self, now: float) -> None:
        expired = []
        for key in self._unschedulable:
            if now - self._entries[key].since <= self._unschedulable_timeout_s:
                break
            expired.append(key)
        for key in expired:
            del self._unschedulable[key]
            self._wake(self._entries[key], now)

    def _flush_backoff(self, now: float) -> None:
        while (key := self._backoff.peek()) is not None and self._entries[key].ready_at <= now:
            self._backoff.pop()
            self._woken.discard(key)
            self._active.push(key)


def _order(item: QueueItem) -> tuple[int, float, str]:
    """The default order's key (:func:`priority_sort`): higher priority, then older, then key."""
    return (-item.priority, item.created, item.key)


def _take_in(item: QueueItem, new: QueueItem) -> None:
    """Copy what the object says (not what the queue counted) from a new version of ``item``."""
    item.priority = new.priority
    item.created = new.created
    item.queue = new.queue
