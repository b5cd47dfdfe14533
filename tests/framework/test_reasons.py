"""The reason table the registry builds from the filters' declarations: every code one meaning, a clash refused
when the scheduler starts (not found as a wrong message later)."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.core import registry
from scheduler.framework import reasons
from scheduler.framework.reasons import Reason
from scheduler.kernels import layout


def test_a_code_declared_twice_is_refused_naming_both_owners_and_free_codes() -> None:
    first = Reason(-20, "node(s) had no free widget", eviction_helps=True)
    second = Reason(-20, "node(s) had no free gadget", eviction_helps=False)
    with pytest.raises(ValueError, match=r"gadgets: reason code -20 is widgets's already; free codes: 3, 4, 5"):
        reasons.Table([*(("core", r) for r in reasons.CORE), ("widgets", first), ("gadgets", second)])


@pytest.mark.parametrize("code", [layout.FIT, layout.RESOURCE, 127, -129])
def test_a_code_the_kernels_own_or_outside_int8_is_refused(code: int) -> None:
    with pytest.raises(ValueError, match="outside"):
        reasons.Table([("widgets", Reason(code, "x", eviction_helps=True))])


def test_the_registered_filters_codes_read_as_before() -> None:
    table = registry.REASONS
    codes = np.array([layout.ABSENT, layout.GPU_COUNT, layout.RESOURCE + 2, 3, -3, -7, 13], dtype=np.int8)
    # Absent, a taint and a volume bound elsewhere: no eviction helps; a GPU or memory shortfall, an attach limit,
    # another pod's anti-affinity: one may.
    assert table.unresolvable(codes).tolist() == [True, False, False, True, True, False, False]
    assert table.across_nodes(codes).tolist() == [False, False, False, False, False, False, True]
    assert table.short_of_room(codes).tolist() == [False, True, True, False, False, False, False]
    assert table.text(layout.RESOURCE + 1, ["cpu", "memory"]) == "Insufficient memory"
    assert table.text(-7, []) == "node(s) exceed max volume count"
