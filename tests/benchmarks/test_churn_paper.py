"""benchmarks/churn.py's paper protocol under budgets of moves, and its ``--consolidation`` knobs."""

from __future__ import annotations

import pytest

from benchmarks import churn
from scheduler.framework import profile
from scheduler.sim.trace import NodeSpec, PodSpec


def test_a_smaller_budget_its_run_never_reached_reuses_that_run_and_a_budget_of_zero_runs_on_its_own(
    capsys: pytest.CaptureFixture[str],
) -> None:
    nodes = [NodeSpec(f"n{i}", cpu_milli=64000, memory_mib=262144, gpus=2) for i in range(3)]
    pods = [PodSpec(f"p{i}", 1000, 1024, 1, milli) for i, milli in enumerate((500, 600, 1000, 300, 700, 1000))]
    knobs = profile.consolidation({"planCost": "Any"}, "test")
    out = churn.paper(nodes, pods, [0, 0.4, 0.5], [42], knobs)
    runs = [line.split(":")[0].strip() for line in capsys.readouterr().err.splitlines() if "budget" in line]
    # 0.5 ran first and made no move: 0.4 (a budget of 3 moves) is that same run; 0 runs (0 moves reach it).
    assert runs == ["budget 0.5 seed 42", "budget 0 seed 42"]
    assert out["0.5"]["per_seed_moves"] == [0]
    same = ("alloc_at_130", "moves", "failed", "wall_s")  # (alloc_at_100 is NaN here: NaN != NaN)
    assert [out["0.4"][k] for k in same] == [out["0.5"][k] for k in same]
    assert out["0"]["moves"] == 0 and list(out) == ["0", "0.4", "0.5"]


def test_knobs_are_read_by_the_profiles_parser_and_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert churn.main(["--paper", "0", "--consolidation", "{planCost: Off}"]) == 2
    assert "consolidation.planCost: False is not one of" in capsys.readouterr().err
