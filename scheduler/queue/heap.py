"""A binary heap of keys that knows where each key sits, so any key can be removed or re-placed in O(log n).

:mod:`heapq` can only pop the head; the scheduling queue must also drop a deleted pod from the middle, move a
pod whose priority changed, and re-order everything when the ordering itself changes (fair share). The heap
holds keys only; the ordering (``before``) looks the rest up, so one record per key lives in one place.

Invariants: every key is held at most once; ``before(parent, child)`` is never true of a child over its
parent; for the same operations the same keys come out in the same order (no ties broken by chance).
"""

from __future__ import annotations

from collections.abc import Callable

#: ``before(a, b)``: should ``a`` come out before ``b``? A strict order: ``before(a, a)`` is false.
Before = Callable[[str, str], bool]


class KeyedHeap:
    """A min-heap of distinct keys under ``before``, with removal and re-placement by key."""

    __slots__ = ("_before", "_keys", "_pos")

    def __init__(self, before: Before) -> None:
        self._before = before
        self._keys: list[str] = []
        self._pos: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._pos

    def peek(self) -> str | None:
        return self._keys[0] if self._keys else None

    def push(self, key: str) -> None:
        if key in self._pos:
            raise KeyError(f"{key!r} is already in the heap")
        self._keys.append(key)
        self._pos[key] = len(self._keys) - 1
        self._up(len(self._keys) - 1)

    def pop(self) -> str:
        if not self._keys:
            raise IndexError("pop from an empty heap")
        return self._remove_at(0)

    def remove(self, key: str) -> None:
        self._remove_at(self._pos[key])

    def fix(self, key: str) -> None:
        """Put ``key`` back in its place after what ``before`` says about it changed."""
        i = self._pos[key]
        if not self._up(i):
            self._down(i)

    def reorder(self, before: Before) -> None:
        """Take a new ordering (or the same one whose inputs changed) and re-heapify, O(n)."""
        self._before = before
        for i in reversed(range(len(self._keys) // 2)):
            self._down(i)

    def ordered(self) -> list[str]:
        """The keys in the order :meth:`pop` would give them, without popping; O(n log n)."""
        copy = KeyedHeap(self._before)
        copy._keys = list(self._keys)
        copy._pos = dict(self._pos)
        return [copy.pop() for _ in range(len(copy))]

    def _remove_at(self, i: int) -> str:
        key = self._keys[i]
        last = self._keys.pop()
        del self._pos[key]
        if i < len(self._keys):
            self._keys[i] = last
            self._pos[last] = i
            if not self._up(i):
                self._down(i)
        return key

    def _swap(self, i: int, j: int) -> None:
        keys = self._keys
        keys[i], keys[j] = keys[j], keys[i]
        self._pos[keys[i]] = i
        self._pos[keys[j]] = j

    def _up(self, i: int) -> bool:
        moved = False
        while i > 0:
            parent = (i - 1) // 2
            if not self._before(self._keys[i], self._keys[parent]):
                break
            self._swap(i, parent)
            i = parent
            moved = True
        return moved

    def _down(self, i: int) -> None:
        n = len(self._keys)
        while True:
            first = i
            left = 2 * i + 1
            right = left + 1
            if left < n and self._before(self._keys[left], self._keys[first]):
                first = left
            if right < n and self._before(self._keys[right], self._keys[first]):
                first = right
            if first == i:
                return
            self._swap(i, first)
            i = first
