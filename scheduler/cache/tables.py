"""The stores' tables of watched objects by key: putting an object in and taking one out say whether the table
changed, because a store counts a version only per change (what the plugins memoise on), and a watch delivers
objects that did not change (our own writes coming back, resyncs)."""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def put(table: dict[str, T], key: str, value: T) -> bool:
    """``value`` into ``table`` under ``key``; False when it held an equal one already."""
    if table.get(key) == value:
        return False
    table[key] = value
    return True


def drop(table: dict[str, Any], key: str) -> bool:
    """The entry of ``key`` out of ``table``; False when there was none."""
    return table.pop(key, None) is not None
