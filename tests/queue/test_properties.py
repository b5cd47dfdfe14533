"""Whatever the order of adds, updates, removals, pops, requeues, events and the passing of time, every key is
in exactly one place, nothing is lost, pop follows the ordering and never returns an item still backing off."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from scheduler.queue.scheduling import Less, QueueItem, SchedulingQueue, priority_sort

KEYS = tuple(f"ns/p{i}" for i in range(6))
MAX_BACKOFF_S = 8.0
TIMEOUT_S = 20.0

keys = st.sampled_from(KEYS)
priorities = st.integers(min_value=-2, max_value=2)
tenants = st.sampled_from(("a", "b", ""))


def _by_place(places: dict[str, int]) -> Less:
    """The order by tenant queue (in ``places``; a queue without a place last), then :func:`priority_sort`'s."""
    last = len(places)

    def less(a: QueueItem, b: QueueItem) -> bool:
        return (places.get(a.queue, last), -a.priority, a.created, a.key) < (
            places.get(b.queue, last),
            -b.priority,
            b.created,
            b.key,
        )

    return less


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        #: The order pop must follow: by priority, then by the tenant queues' places once an order is set.
        self.less = priority_sort
        self.queue = SchedulingQueue(
            clock=lambda: self.now,
            initial_backoff_s=1.0,
            max_backoff_s=MAX_BACKOFF_S,
            unschedulable_timeout_s=TIMEOUT_S,
        )
        #: What the queue should hold: every key added and not removed or done.
        self.known: set[str] = set()
        #: The object first added under each key: the queue keeps it (an update changes it in place).
        self.items: dict[str, QueueItem] = {}
        #: Popped and not yet given back, with the object pop returned.
        self.in_flight: dict[str, QueueItem] = {}
        #: When each failed item's backoff ends: pop must not return it before.
        self.not_before: dict[str, float] = {}
        #: When each item went to the unschedulable pool.
        self.pooled_at: dict[str, float] = {}

    def _forget(self, key: str) -> None:
        self.known.discard(key)
        self.in_flight.pop(key, None)
        self.not_before.pop(key, None)
        self.pooled_at.pop(key, None)

    def _offer(self, item: QueueItem) -> None:
        if item.key not in self.known:
            self.items[item.key] = item
            self.known.add(item.key)

    @rule(key=keys, priority=priorities, created=st.integers(min_value=0, max_value=3), tenant=tenants)
    def add(self, key: str, priority: int, created: int, tenant: str) -> None:
        item = QueueItem(key=key, priority=priority, created=float(created), queue=tenant)
        self.queue.add(item)
        self._offer(item)

    @rule(key=keys, priority=priorities, tenant=tenants)
    def update(self, key: str, priority: int, tenant: str) -> None:
        item = QueueItem(key=key, priority=priority, created=0.0, queue=tenant)
        self.queue.update(item)
        self._offer(item)

    @rule(key=keys)
    def remove(self, key: str) -> None:
        self.queue.remove(key)
        self._forget(key)

    @rule()
    def pop(self) -> None:
        before = dict(self.queue.pending())
        item = self.queue.pop()
        after = self.queue.pending()
        active = [k for k, where in after if where == "active"]
        for key, where in after:
            if where == "unschedulable":
                assert self.now - self.pooled_at[key] <= TIMEOUT_S, "left in the pool past the timeout"
        if item is None:
            assert active == []
            return
        assert item is self.items[item.key] and item.key not in self.in_flight
        assert before[item.key] != "in-flight"
        assert item.attempts >= 1 and item.first_attempt is not None
        assert self.now >= self.not_before.get(item.key, self.now), "popped while backing off"
        self.in_flight[item.key] = item
        for other in active:  # the head came out: nothing left in active goes before it
            assert not self.less(self.items[other], item)
        wakeup = self.queue.next_wakeup()
        assert wakeup is None or wakeup > self.now, "a ready backoff item was left behind"

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data(), unschedulable=st.booleans())
    def requeue(self, data: st.DataObject, unschedulable: bool) -> None:
        self._requeue(self.in_flight.pop(data.draw(st.sampled_from(sorted(self.in_flight)))), unschedulable)

    def _requeue(self, item: QueueItem, unschedulable: bool) -> None:
        key = item.key
        if unschedulable:
            where = self.queue.requeue_unschedulable(item, "no fit")
            assert where in ("unschedulable", "backoff")
        else:
            where = self.queue.requeue_error(item, "boom")
            assert where == "backoff"
        self.not_before[key] = self.now + min(2.0 ** (item.attempts - 1), MAX_BACKOFF_S)
        if where == "unschedulable":
            self.pooled_at[key] = self.now
        else:
            wakeup = self.queue.next_wakeup()
            assert wakeup is not None and wakeup <= self.not_before[key]

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data())
    def done(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.in_flight)))
        self.queue.done(key)
        self._forget(key)

    @rule()
    def event(self) -> None:
        self.queue.move_all_to_active("node-added")
        assert all(where != "unschedulable" for _, where in self.queue.pending())

    @rule(seconds=st.sampled_from([0.0, 0.5, 1.0, 3.0, 10.0, 30.0]))
    def advance(self, seconds: float) -> None:
        self.now += seconds

    @rule(reverse=st.booleans())
    def set_queue_order(self, reverse: bool) -> None:
        places = {"b": 0, "a": 1} if reverse else {"a": 0, "b": 1}
        self.queue.set_queue_order(places)
        self.less = _by_place(places)

    @rule()
    def nothing_is_lost(self) -> None:
        """Hand back what is in flight, then let time pass: every key the queue holds comes out of pop."""
        for returning in self.in_flight.values():
            self._requeue(returning, unschedulable=True)
        self.in_flight.clear()
        self.now += TIMEOUT_S + MAX_BACKOFF_S + 1
        popped = set()
        while (item := self.queue.pop()) is not None:
            popped.add(item.key)
            self.in_flight[item.key] = item
        assert popped == self.known

    @invariant()
    def every_key_in_exactly_one_place(self) -> None:
        pending = self.queue.pending()
        keys_seen = [key for key, _ in pending]
        assert len(keys_seen) == len(set(keys_seen)), pending
        assert set(keys_seen) == self.known
        assert len(self.queue) == len(self.known)
        assert all(key in self.queue for key in self.known)
        assert {key for key, where in pending if where == "in-flight"} == set(self.in_flight)
        active = [key for key, where in pending if where == "active"]
        assert [self.queue.position(key) for key in active] == list(range(len(active)))


QueueMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
TestQueue = QueueMachine.TestCase


QUEUES = ("a", "b", "c", "")


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["add", "remove", "pop", "order"]),
            keys,
            st.sampled_from(QUEUES),
            priorities,
            st.permutations(QUEUES[:3]),
        ),
        max_size=40,
    )
)
def test_ordering_by_queue_places_pops_what_one_heap_over_every_item_would(
    ops: list[tuple[str, str, str, int, list[str]]],
) -> None:
    # The fast order (a heap per tenant queue, the queues' places swapped in O(1)) against the general one (one
    # heap over every item, built again for each new order), through the same adds, updates (a queue may change),
    # removals, pops and new orders of the queues.
    places: dict[str, int] = {}

    def rebuilt(queue: SchedulingQueue) -> SchedulingQueue:
        # Every item is active here (each pop is done at once): the same items in a new heap, by the new places.
        fresh = SchedulingQueue(clock=lambda: 0.0, less=_by_place(places))
        for item in queue.items():
            fresh.add(QueueItem(item.key, item.priority, item.created, item.queue))
        return fresh

    fast = SchedulingQueue(clock=lambda: 0.0)
    slow = SchedulingQueue(clock=lambda: 0.0, less=_by_place(places))
    fast.set_queue_order(dict(places))
    for n, (op, key, queue, priority, order) in enumerate(ops):
        if op == "add":
            for q in (fast, slow):
                q.add(QueueItem(key, priority, float(n % 3), queue))
        elif op == "remove":
            fast.remove(key)
            slow.remove(key)
        elif op == "pop":
            a, b = fast.pop(), slow.pop()
            assert (a and a.key) == (b and b.key)
            if a is not None and b is not None:
                fast.done(a.key)
                slow.done(b.key)
        else:
            places = {q: i for i, q in enumerate(order)}
            fast.set_queue_order(dict(places))
            slow = rebuilt(slow)
        assert [k for k, w in fast.pending() if w == "active"] == [k for k, w in slow.pending() if w == "active"]
