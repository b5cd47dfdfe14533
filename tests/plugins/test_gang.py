"""The gang score: nodes already holding members of the gang score 50 to 100 by how many, the others 0."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.framework.interface import CycleContext, CycleState
from scheduler.plugins.gang import Gang


def _score(taken: dict[int, int], nodes: list[int]) -> tuple[bool, list[float]]:
    state = cast(CycleState, SimpleNamespace(context=CycleContext(gang_slots=taken if taken else None)))
    out = np.full(len(nodes), -1.0)
    scored = Gang({}).score(state, np.array(nodes, dtype=np.int64), out)
    return scored, out.tolist()


def test_no_member_placed_yet_leaves_the_score_out() -> None:
    assert _score({}, [0, 1, 2]) == (False, [-1.0, -1.0, -1.0])


def test_nodes_holding_more_members_score_higher() -> None:
    scored, out = _score({7: 1, 3: 4}, [0, 3, 5, 7, 9])
    assert scored
    assert out == [0.0, 100.0, 0.0, 62.5, 0.0]


@settings(max_examples=200, deadline=None)
@given(
    taken=st.dictionaries(st.integers(0, 60), st.integers(1, 8), min_size=1, max_size=10),
    nodes=st.lists(st.integers(0, 60), unique=True, max_size=40).map(sorted),
)
def test_matches_its_definition_on_any_slots(taken: dict[int, int], nodes: list[int]) -> None:
    most = max(taken.values())
    expected: list[Any] = [50.0 + 50.0 * taken[n] / most if n in taken else 0.0 for n in nodes]
    scored, out = _score(taken, nodes)
    assert scored
    assert np.allclose(out, expected)
