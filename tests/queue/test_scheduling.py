"""The scheduling queue: who is tried next, and when a failed pod or gang comes back."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from scheduler.queue.scheduling import QueueItem, SchedulingQueue


class FakeClock:
    """Time that moves only when the test says so."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _queue(
    clock: FakeClock,
    *,
    initial_backoff_s: float = 1.0,
    max_backoff_s: float = 10.0,
    unschedulable_timeout_s: float = 60.0,
) -> SchedulingQueue:
    return SchedulingQueue(
        clock=clock,
        initial_backoff_s=initial_backoff_s,
        max_backoff_s=max_backoff_s,
        unschedulable_timeout_s=unschedulable_timeout_s,
    )


def _item(key: str, priority: int = 0, created: float = 0.0, queue: str = "") -> QueueItem:
    return QueueItem(key=key, priority=priority, created=created, queue=queue)


def _drain(q: SchedulingQueue) -> list[str]:
    keys = []
    while (item := q.pop()) is not None:
        keys.append(item.key)
        q.done(item.key)
    return keys


def _pop(q: SchedulingQueue) -> QueueItem:
    item = q.pop()
    assert item is not None
    return item


def test_higher_priority_first_then_older_then_key() -> None:
    q = _queue(FakeClock())
    q.add(_item("ns/young", priority=0, created=20))
    q.add(_item("ns/old", priority=0, created=10))
    q.add(_item("ns/b-urgent", priority=100, created=30))
    q.add(_item("ns/a-urgent", priority=100, created=30))
    q.add(_item("ns/low", priority=-5, created=0))
    assert q.position("ns/a-urgent") == 0
    assert q.position("ns/low") == 4
    assert _drain(q) == ["ns/a-urgent", "ns/b-urgent", "ns/old", "ns/young", "ns/low"]
    assert len(q) == 0


def test_pop_counts_attempts_and_remembers_the_first() -> None:
    clock = FakeClock(5.0)
    q = _queue(clock)
    assert q.pop() is None
    q.add(_item("ns/p"))
    item = _pop(q)
    assert (item.attempts, item.first_attempt) == (1, 5.0)
    q.requeue_error(item, "apiserver timeout")
    clock.advance(1.0)
    again = _pop(q)
    assert again is item
    assert (again.attempts, again.first_attempt, again.last_reason) == (2, 5.0, "apiserver timeout")


def test_error_backoff_doubles_up_to_the_cap() -> None:
    clock = FakeClock()
    q = _queue(clock, initial_backoff_s=1.0, max_backoff_s=10.0)
    q.add(_item("ns/p"))
    waits = []
    for _ in range(6):
        item = _pop(q)
        assert q.requeue_error(item, "boom") == "backoff"
        wakeup = q.next_wakeup()
        assert wakeup is not None
        waits.append(wakeup - clock.now)
        clock.advance(waits[-1] - 0.01)
        assert q.pop() is None, "no retry before the backoff has run"
        assert q.pending() == [("ns/p", "backoff")]
        clock.advance(0.01)
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_backoff_never_overflows() -> None:
    clock = FakeClock()
    q = _queue(clock, initial_backoff_s=1e-300, max_backoff_s=30.0)
    q.add(_item("ns/p"))
    item = _pop(q)
    item.attempts = 100_000
    q.requeue_error(item, "boom")
    assert q.next_wakeup() == clock.now + 30.0


def test_a_refused_binding_waits_its_backoff_and_an_update_does_not_cut_it_short() -> None:
    clock = FakeClock()
    q = _queue(clock)
    q.add(_item("ns/p"))
    q.back_off("ns/p", 4.0)
    assert q.pop() is None and q.next_wakeup() == clock.now + 4.0
    q.update(_item("ns/p", priority=5))
    q.back_off("ns/p", 1.0)  # a shorter wait does not shorten the one running
    clock.advance(3.9)
    assert q.pop() is None
    clock.advance(0.1)
    assert _pop(q).priority == 5
    q.back_off("ns/p", 4.0)  # in flight: the requeue decides
    q.back_off("ns/unknown", 4.0)
    q.done("ns/p")
    assert len(q) == 0


def test_unschedulable_waits_for_a_cluster_event() -> None:
    clock = FakeClock()
    q = _queue(clock)
    q.add(_item("ns/big"))
    assert q.requeue_unschedulable(_pop(q), "0/3 nodes have 8 free GPUs") == "unschedulable"
    assert q.next_wakeup() is None
    clock.advance(30.0)  # well past any backoff: still waits, nothing changed
    assert q.pop() is None
    assert q.pending() == [("ns/big", "unschedulable")]
    assert q.move_all_to_active("node-added") == 1
    item = _pop(q)
    assert (item.key, item.attempts, item.last_reason) == ("ns/big", 2, "0/3 nodes have 8 free GPUs")


def test_a_queueing_hint_keeps_items_the_event_cannot_help() -> None:
    clock = FakeClock()
    q = _queue(clock)
    q.add(_item("ns/big"))
    q.add(_item("ns/small"))
    q.requeue_unschedulable(_pop(q), "needs 8 GPUs")
    q.requeue_unschedulable(_pop(q), "needs 1 GPU")
    clock.advance(30.0)
    needs = {"ns/big": 8, "ns/small": 1}
    assert q.move_all_to_active("pod-deleted", lambda item: needs[item.key] <= 2) == 1
    assert _pop(q).key == "ns/small"
    assert q.pending() == [("ns/big", "unschedulable"), ("ns/small", "in-flight")]
    clock.advance(31.0)  # the timeout still frees what the hint held back
    assert _pop(q).key == "ns/big"


def test_an_event_during_backoff_does_not_cut_it_short() -> None:
    clock = FakeClock()
    q = _queue(clock, initial_backoff_s=4.0)
    q.add(_item("ns/big"))
    q.requeue_unschedulable(_pop(q), "no fit")
    clock.advance(1.0)
    q.move_all_to_active("pod-deleted")
    assert q.pending() == [("ns/big", "backoff")]
    assert q.next_wakeup() == clock.now + 3.0
    assert q.pop() is None
    clock.advance(3.0)
    assert _pop(q).key == "ns/big"


def test_unschedulable_leaves_the_pool_after_the_timeout_without_an_event() -> None:
    clock = FakeClock()
    q = _queue(clock, unschedulable_timeout_s=60.0)
    q.add(_item("ns/first"))
    q.add(_item("ns/second", created=1.0))
    q.requeue_unschedulable(_pop(q), "no fit")
    clock.advance(5.0)
    q.requeue_unschedulable(_pop(q), "no fit")
    clock.advance(55.0)  # first: exactly 60 s in the pool
    assert q.pop() is None
    clock.advance(0.5)
    assert _pop(q).key == "ns/first"
    assert q.pending()[0] == ("ns/second", "unschedulable")
    clock.advance(5.0)
    assert _pop(q).key == "ns/second"


def test_a_timeout_shorter_than_the_backoff_goes_through_backoff() -> None:
    clock = FakeClock()
    q = _queue(clock, initial_backoff_s=10.0, unschedulable_timeout_s=2.0)
    q.add(_item("ns/p"))
    q.requeue_unschedulable(_pop(q), "no fit")
    clock.advance(3.0)
    assert q.pop() is None
    assert q.pending() == [("ns/p", "backoff")]
    clock.advance(7.0)
    assert _pop(q).key == "ns/p"


def test_an_event_while_in_flight_sends_the_item_to_backoff_not_the_pool() -> None:
    clock = FakeClock()
    q = _queue(clock)
    q.add(_item("ns/p"))
    item = _pop(q)
    q.move_all_to_active("node-added")  # the cycle saw the cluster before this node came
    assert q.requeue_unschedulable(item, "no fit") == "backoff"
    assert q.next_wakeup() == clock.now + 1.0
    clock.advance(1.0)
    item = _pop(q)
    # An event before the pop does not count: this cycle saw the node.
    assert q.requeue_unschedulable(item, "no fit") == "unschedulable"


@dataclasses.dataclass
class _Work:
    key: str
    queue: str
    priority: int
    created: float


def test_an_item_takes_what_orders_it_from_its_work_as_it_is_when_queued() -> None:
    work = _Work("team-a/train", "research", 7, 3.0)
    item = QueueItem.of(work)
    assert (item.key, item.queue, item.priority, item.created) == ("team-a/train", "research", 7, 3.0)
    assert (item.attempts, item.first_attempt, item.last_reason) == (0, None, "")
    work.priority = 9  # the work changed: the queue sees it only through an update
    assert item.priority == 7


def test_an_update_while_in_flight_is_kept_and_counts_as_an_event() -> None:
    clock = FakeClock()
    q = _queue(clock)
    q.add(_item("ns/p", priority=1))
    item = _pop(q)
    q.update(QueueItem(key="ns/p", priority=9, created=0.0, queue="research"))
    assert item.priority == 1, "the cycle's item does not change under it"
    assert q.pending() == [("ns/p", "in-flight")]
    assert q.requeue_unschedulable(item, "no fit") == "backoff"
    assert (item.priority, item.queue, item.attempts) == (9, "research", 1)


def test_an_update_moves_an_unschedulable_item_to_active() -> None:
    clock = FakeClock()
    q = _queue(clock)
    q.add(_item("ns/p", priority=1))
    q.add(_item("ns/other", priority=5))
    q.requeue_unschedulable(_pop(q), "no fit")  # ns/other
    q.requeue_unschedulable(_pop(q), "no fit")  # ns/p
    clock.advance(2.0)
    q.update(QueueItem(key="ns/p", priority=3, created=0.0))
    assert q.pending() == [("ns/p", "active"), ("ns/other", "unschedulable")]
    item = _pop(q)
    assert (item.key, item.priority, item.attempts) == ("ns/p", 3, 2)


def test_an_update_of_a_backing_off_item_waits_out_its_backoff() -> None:
    clock = FakeClock()
    q = _queue(clock, initial_backoff_s=5.0)
    q.add(_item("ns/unsched"))
    q.add(_item("ns/error", created=1.0))
    q.requeue_unschedulable(_pop(q), "no fit")
    q.requeue_error(_pop(q), "boom")
    q.update(_item("ns/unsched", priority=1))
    q.update(_item("ns/error", priority=2))
    assert sorted(q.pending()) == [("ns/error", "backoff"), ("ns/unsched", "backoff")]
    assert q.pop() is None
    clock.advance(5.0)
    assert _drain(q) == ["ns/error", "ns/unsched"]


def test_an_update_in_active_reorders() -> None:
    q = _queue(FakeClock())
    q.add(_item("ns/a", priority=5))
    q.add(_item("ns/b", priority=1))
    q.update(_item("ns/b", priority=10))
    assert q.position("ns/b") == 0
    q.add(_item("ns/new", priority=20))  # add of a new key, update of an unknown key: both go to active
    q.update(_item("ns/unknown", priority=30))
    assert _drain(q) == ["ns/unknown", "ns/new", "ns/b", "ns/a"]


@pytest.mark.parametrize("where", ["active", "backoff", "unschedulable", "in-flight"])
def test_remove_from_each_place(where: str) -> None:
    clock = FakeClock()
    q = _queue(clock)
    q.add(_item("ns/stay", priority=-1))
    q.add(_item("ns/gone"))
    item = None
    if where != "active":
        item = _pop(q)
        assert item.key == "ns/gone"
        if where == "backoff":
            q.requeue_error(item, "boom")
        elif where == "unschedulable":
            q.requeue_unschedulable(item, "no fit")
    assert ("ns/gone", where) in q.pending()
    q.remove("ns/gone")
    q.remove("ns/gone")  # twice is harmless
    assert "ns/gone" not in q
    assert q.pending() == [("ns/stay", "active")]
    if item is not None:
        # A cycle that ends after its pod was deleted does not bring it back.
        assert q.requeue_error(item, "boom") is None
        assert q.requeue_unschedulable(item, "no fit") is None
    q.move_all_to_active("pod-deleted")
    clock.advance(100.0)
    assert _drain(q) == ["ns/stay"]


def test_a_late_requeue_of_a_removed_then_readded_key_is_ignored() -> None:
    q = _queue(FakeClock())
    q.add(_item("ns/p"))
    old = _pop(q)
    q.remove("ns/p")
    q.add(_item("ns/p"))  # recreated under the same name
    assert q.requeue_unschedulable(old, "no fit") is None
    assert q.pending() == [("ns/p", "active")]


def test_done_forgets_the_item() -> None:
    q = _queue(FakeClock())
    q.add(_item("ns/p"))
    item = _pop(q)
    assert "ns/p" in q and len(q) == 1
    q.done("ns/p")
    assert "ns/p" not in q and len(q) == 0
    assert q.pending() == []
    assert q.requeue_error(item, "late") is None
    assert q.pop() is None


def test_next_wakeup_is_the_earliest_backoff() -> None:
    clock = FakeClock()
    q = _queue(clock, initial_backoff_s=2.0)
    assert q.next_wakeup() is None
    q.add(_item("ns/a"))
    q.add(_item("ns/b", created=1.0))
    a = _pop(q)
    b = _pop(q)
    q.requeue_error(a, "boom")  # ready at 102
    clock.advance(3.0)
    q.requeue_error(b, "boom")  # ready at 105
    assert q.next_wakeup() == 102.0
    assert [k for k, _ in q.pending()] == ["ns/a", "ns/b"]
    assert _pop(q).key == "ns/a"
    assert q.next_wakeup() == 105.0
    q.remove("ns/b")
    assert q.next_wakeup() is None


@pytest.mark.parametrize(
    "kw", [{"initial_backoff_s": -1.0}, {"max_backoff_s": float("nan")}, {"unschedulable_timeout_s": -0.5}]
)
def test_refuses_negative_durations_naming_the_argument(kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(kw))):
        SchedulingQueue(clock=FakeClock(), **kw)


def test_a_gated_refusal_counts_no_attempt_and_the_object_it_waits_for_lets_it_go_at_once() -> None:
    # kube-scheduler's PreEnqueue: a pod whose ResourceClaim is not made yet is not tried; when the claim comes (the
    # pod's update names it), it is tried at once, not after a backoff.
    clock = FakeClock()
    q = _queue(clock)
    q.add(_item("ns/p"))
    item = _pop(q)
    assert q.requeue_gated(item, "waiting for the resourceclaim controller") == "unschedulable"
    assert item.attempts == 0 and q.next_wakeup() is None
    q.update(_item("ns/p"))
    item = _pop(q)
    assert item.attempts == 1
    # An event that comes while it is in flight sends it straight back to active, not to backoff.
    q.move_all_to_active("device changed")
    assert q.requeue_gated(item, "claim not found") == "active"
    item = _pop(q)
    # Once it is tried and refused for lack of room, the backoff counts its real attempts only.
    assert q.requeue_unschedulable(item, "0/1 nodes") == "unschedulable"
    q.update(_item("ns/p"))
    assert q.pending() == [("ns/p", "backoff")] and q.next_wakeup() == clock.now + 1.0


def test_with_pop_from_backoff_an_idle_queue_takes_a_woken_item_before_its_backoff_but_never_a_broken_one() -> None:
    # kube-scheduler's SchedulerPopFromBackoffQ: with nothing active, a pod refused for lack of room and woken by an
    # event is retried at once; one whose attempt broke, or whose binding was refused, still waits its backoff.
    for option in (True, False):
        clock = FakeClock()
        q = SchedulingQueue(clock=clock, pop_from_backoff=option)
        for key in ("ns/big", "ns/broken", "ns/refused"):
            q.add(_item(key))
        assert q.requeue_unschedulable(_pop(q), "no room") == "unschedulable"
        assert q.requeue_error(_pop(q), "boom") == "backoff"
        assert q.requeue_unschedulable(_pop(q), "no room") == "unschedulable"
        q.move_all_to_active("pod deleted")  # 1 s of backoff left for each: they wait in backoff
        assert q.pending() == [(k, "backoff") for k in ("ns/big", "ns/broken", "ns/refused")]
        q.back_off("ns/refused", 30.0)  # its binding was refused meanwhile
        if option:
            item = _pop(q)
            assert item.key == "ns/big" and item.attempts == 2
            q.done(item.key)
        assert q.pop() is None  # the broken one and the refused binding wait their backoffs
        clock.advance(1.0)
        assert _pop(q).key == ("ns/broken" if option else "ns/big")
