"""The keyed heap under the queue: whatever is pushed, removed from the middle or re-valued, keys come out in
order, as a sorted list would give them."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scheduler.queue.heap import KeyedHeap

# Pushes weigh double so the heap grows deep enough for removals from the middle.
OPERATIONS = st.lists(
    st.tuples(st.sampled_from(["push", "push", "remove", "fix", "pop"]), st.integers(0, 15), st.integers(-20, 20)),
    min_size=10,
    max_size=120,
)


def _assert_heap_order(heap: KeyedHeap, value: dict[str, int]) -> None:
    # The invariant itself, read from the inside: a broken heap can still pop in order for a while.
    keys = heap._keys
    for child in range(1, len(keys)):
        parent = (child - 1) // 2
        assert (value[keys[parent]], keys[parent]) < (value[keys[child]], keys[child])


@settings(max_examples=300, deadline=None)
@given(OPERATIONS)
# Removing k3 puts the last key (3) under k1 (10): it must move up, not only down.
@example([("push", n, v) for n, v in enumerate([0, 10, 1, 11, 12, 2, 3])] + [("remove", 3, 0)])
def test_keys_come_out_in_order_whatever_was_done(operations: list[tuple[str, int, int]]) -> None:
    value: dict[str, int] = {}
    heap = KeyedHeap(lambda a, b: (value[a], a) < (value[b], b))
    for op, n, v in operations:
        key = f"k{n}"
        if op == "push" and key not in heap:
            value[key] = v
            heap.push(key)
        elif op == "remove" and key in heap:
            heap.remove(key)
            del value[key]
        elif op == "fix" and key in heap:
            value[key] = v
            heap.fix(key)
        elif op == "pop" and len(heap):
            expected = min(value, key=lambda k: (value[k], k))
            assert heap.pop() == expected
            del value[expected]
        assert len(heap) == len(value)
        _assert_heap_order(heap, value)
    expected_order = sorted(value, key=lambda k: (value[k], k))
    assert heap.ordered() == expected_order
    assert [heap.pop() for _ in range(len(heap))] == expected_order
    assert heap.peek() is None


def test_reorder_takes_a_new_ordering() -> None:
    heap = KeyedHeap(lambda a, b: a < b)
    for key in ("c", "a", "d", "b"):
        heap.push(key)
    heap.reorder(lambda a, b: a > b)
    assert heap.ordered() == ["d", "c", "b", "a"]


def test_a_key_is_held_once() -> None:
    heap = KeyedHeap(lambda a, b: a < b)
    heap.push("a")
    with pytest.raises(KeyError, match="'a'"):
        heap.push("a")
    with pytest.raises(IndexError):
        KeyedHeap(lambda a, b: a < b).pop()
