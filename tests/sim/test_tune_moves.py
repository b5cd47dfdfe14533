"""The FGD protocol with a budget of moves: with none it is the protocol itself; a move places what would fail."""

from __future__ import annotations

import pytest

from scheduler.framework import typical
from scheduler.sim import churn, engine, policies, protocol, synthetic, tune_moves
from scheduler.sim.trace import NodeSpec, PodSpec


def test_without_moves_the_loop_places_as_the_protocol_does() -> None:
    nodes, pods = synthetic.cluster()[:12], synthetic.workload()
    capacity = float(sum(n.gpus for n in nodes)) * 1000.0
    workload = protocol.inflate(pods, capacity, 1.3, seed=3)
    shapes = typical.typical_shapes([p.shape for p in pods])
    direct = engine.run_arrivals(nodes, workload, policies.build("fgd", shapes=shapes, seed=3), shapes=shapes)
    looped = tune_moves.run(nodes, workload, churn.profile("fgd+consolidate", shapes=shapes, seed=3), budget=0)
    expected = protocol.alloc_curve(direct.arrived, direct.allocated, capacity, [100, 130])
    assert looped.curve == pytest.approx(expected)
    assert looped.moves == 0
    assert looped.failed == int((~direct.placed).sum())


def test_a_move_within_the_budget_places_the_pod_that_failed_without() -> None:
    nodes = [NodeSpec("n1", 64000, 262144, 2, "V100M32"), NodeSpec("n2", 64000, 262144, 2, "V100M32")]
    pods = [PodSpec(n, 1000, 1024, g, 1000) for n, g in (("a1", 1), ("a2", 1), ("c", 2))]
    config = churn.profile("spread+consolidate", shapes=[], seed=0)
    none = tune_moves.run(nodes, pods, config, budget=0)
    one = tune_moves.run(nodes, pods, config, budget=1)
    assert (none.failed, none.moves, none.curve[100]) == (1, 0, 50.0)
    assert (one.failed, one.moves, one.curve[100]) == (0, 1, 100.0)
