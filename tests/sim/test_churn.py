"""The churn protocol: hand-made runs whose waits and allocation are computed by hand, the workload's offered load,
the durations drawn for a list without times, and the command line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.objects import pod as api_pod
from scheduler.api.objects import run_time as api_run_time
from scheduler.cli import main
from scheduler.core.consolidation.defrag import Defragmenter
from scheduler.framework.interface import Decision
from scheduler.framework.profile import ProfileConfig
from scheduler.sim import churn
from scheduler.sim.churn import Arrival, Workload
from scheduler.sim.trace import NodeSpec, PodSpec
from tests.api import objects
from tests.sim import files

NODE = NodeSpec("n1", 64000, 262144, 8, "V100M32")


def _pod(name: str, gpus: int, milli: int = 1000) -> PodSpec:
    return PodSpec(name, 1000, 1024, gpus, milli if gpus else 0)


def _run(nodes: list[NodeSpec], arrivals: list[Arrival], horizon: float, policy: str = "fgd") -> churn.ChurnRun:
    return churn.run(nodes, Workload(arrivals, horizon), churn.profile(policy, shapes=[], seed=0))


def test_waits_and_allocation_of_a_hand_made_run() -> None:
    # One node of 8 GPUs. a (8 GPUs) runs 0-10; b (4) and c (half a GPU) wait for it and run 10-15 and 10-13;
    # d (8) arrives at 11 and waits until b leaves at 15; e (1) arrives at 16 and never fits before the end, 20.
    arrivals = [
        Arrival("a", _pod("a", 8), 0.0, 10.0),
        Arrival("b", _pod("b", 4), 1.0, 5.0),
        Arrival("c", _pod("c", 1, 500), 2.0, 3.0),
        Arrival("d", _pod("d", 8), 11.0, 100.0),
        Arrival("e", _pod("e", 1), 16.0, 1.0),
    ]
    run = _run([NODE], arrivals, 20.0)
    # GPU-seconds in 0-20: a 80, b 20, c 1.5, d 8 x 5 = 40; of 8 GPUs x 20 s.
    assert run.time_weighted_alloc == pytest.approx(100.0 * 141.5 / 160.0)
    assert run.waits["8"] == {"count": 2.0, "p50": 2.0, "p95": pytest.approx(3.8), "p99": pytest.approx(3.96)}
    assert run.waits["4"]["p50"] == 9.0
    assert run.waits["shared"]["p50"] == 8.0
    assert run.waits["1"]["p50"] == 4.0  # e still waits at the end: its wait so far
    assert run.waits["4+"] == {"count": 3.0, "p50": 4.0, "p95": pytest.approx(8.5), "p99": pytest.approx(8.9)}
    assert (run.placed, run.never_placed, run.moves) == (4, 1, 0)
    assert run.free_whole_node_gpus == 0.0


def test_free_whole_nodes_are_time_weighted() -> None:
    # Two 8-GPU nodes and a node of 4; one 1-GPU pod from 0 to 10 of a 20-second window: the other 8-GPU node is
    # free throughout (8 GPUs), the pod's node for the last half (4 on average); the 4-GPU node does not count.
    nodes = [NODE, NodeSpec("n2", 64000, 262144, 8, "V100M32"), NodeSpec("n3", 64000, 262144, 4, "V100M32")]
    run = _run(nodes, [Arrival("p", _pod("p", 1), 0.0, 10.0), Arrival("q", _pod("q", 0), 20.0, 1.0)], 20.0)
    assert run.free_whole_node_gpus == pytest.approx(12.0)
    assert run.time_weighted_alloc == pytest.approx(100.0 * 10.0 / (20.0 * 20.0))


def test_a_pod_waits_in_the_queue_until_a_departure_makes_room_not_only_until_the_next_arrival() -> None:
    arrivals = [Arrival("a", _pod("a", 6), 0.0, 7.0), Arrival("b", _pod("b", 4), 1.0, 1.0)]
    run = _run([NODE], [*arrivals, Arrival("z", _pod("z", 0), 30.0, 1.0)], 30.0)
    assert run.waits["4"]["p50"] == 6.0  # placed when a leaves at 7, with no arrival then
    assert run.never_placed == 0


def test_the_initial_population_is_placed_but_not_counted_in_the_waits() -> None:
    arrivals = [
        Arrival("w1", _pod("w1", 8), 0.0, 5.0, initial=True),
        Arrival("w2", _pod("w2", 8), 0.0, 5.0, initial=True),
        Arrival("a", _pod("a", 2), 1.0, 2.0),
    ]
    run = _run([NODE], arrivals, 12.0)
    # w1 runs 0-5, w2 5-10 (it waited for w1: not a measured wait), a 10-12.
    assert run.waits == {"2": {"count": 1.0, "p50": 9.0, "p95": 9.0, "p99": 9.0}}
    assert run.initial_never_placed == 0
    assert run.time_weighted_alloc == pytest.approx(100.0 * (40 + 40 + 4) / (8 * 12))


def test_the_arrival_rate_offers_the_load_asked_for() -> None:
    pods = [_pod(f"p{i}", (1, 2, 4, 8)[i % 4]) for i in range(4000)]
    durations = [float(100 + (i * 37) % 900) for i in range(4000)]
    gpu_seconds = sum(p.num_gpu * d for p, d in zip(pods, durations, strict=True))
    for load in (0.5, 1.0):
        w = churn.workload(pods, gpu_capacity=64.0, load=load, seed=1, durations=durations, warm=False)
        assert w.rate == pytest.approx(load * 64.0 * len(pods) / gpu_seconds)
        offered = gpu_seconds / (w.horizon * 64.0)
        assert offered == pytest.approx(load, rel=0.05)
        assert [a.name for a in w.arrivals] == [f"p{i}#{i}" for i in range(4000)]  # the list's order


def test_the_warm_population_asks_for_the_load_on_average() -> None:
    pods = [_pod(f"p{i}", (1, 2, 4, 8)[i % 4]) for i in range(400)]
    durations = [float(10 + (i * 7919) % 5000) for i in range(400)]
    totals = []
    for seed in range(20):
        w = churn.workload(pods, gpu_capacity=256.0, load=0.9, seed=seed, durations=durations)
        initial = [a for a in w.arrivals if a.initial]
        assert all(a.at == 0.0 and 0.0 <= a.duration <= max(durations) for a in initial)
        totals.append(sum(a.spec.num_gpu for a in initial))
    assert np.mean(totals) == pytest.approx(0.9 * 256.0, rel=0.05)


def test_durations_are_drawn_from_the_same_request_class() -> None:
    source = [
        PodSpec("s1", 1, 1, 8, 1000, creation=0.0, deletion=1000.0),
        PodSpec("s2", 1, 1, 1, 500, creation=0.0, deletion=7.0),
        PodSpec("s3", 1, 1, 1, 1000, creation=5.0, deletion=8.0),
    ]
    drawn = churn.drawn_durations([_pod("x", 8), _pod("y", 1, 300), _pod("z", 2)], source, np.random.default_rng(0))
    assert drawn[:2] == [1000.0, 7.0]
    assert drawn[2] in (1000.0, 7.0, 3.0)  # no 2-GPU pod in the source: any of its durations


def test_a_list_without_times_needs_a_list_with_them() -> None:
    with pytest.raises(InvalidObject) as caught:
        churn.drawn_durations([_pod("x", 1)], [_pod("y", 1)], np.random.default_rng(0))
    assert caught.value.field == "--durations"


def test_a_bad_policy_or_action_is_refused_naming_it() -> None:
    with pytest.raises(InvalidObject) as caught:
        churn.profile("fgd+teleport", shapes=[], seed=0)
    assert caught.value.field == "--policy" and "teleport" in str(caught.value)
    assert churn.profile("fgd", shapes=[], seed=0).actions == ("allocate",)


def test_the_command_line_runs_a_churn_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = files.write(tmp_path / "nodes.csv", files.NODE_HEADER, ["n1,64000,262144,8,V100M32", "n2,64000,262144,8,"])
    rows = [f"p{i},1000,1024,{(1, 2, 4, 1)[i % 4]},{(1000, 1000, 1000, 500)[i % 4]}" for i in range(40)]
    pods = files.write(tmp_path / "pods.csv", files.MULTIGPU_HEADER, rows)
    timed = [f"t{i},1000,1024,1,1000,,LS,Running,{i},{i + 100 + 50 * (i % 3)}," for i in range(10)]
    durations = files.write(tmp_path / "timed.csv", files.POD_HEADER, timed)
    out = tmp_path / "churn.json"
    args = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--churn", "0.8,1.1", "--seeds", "1-2"]
    assert main([*args, "--durations", str(durations), "--json", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "churn of" in printed and "wait shared p50/p95/p99" in printed
    payload = json.loads(out.read_text())
    assert payload["mode"] == "churn" and payload["loads"] == [0.8, 1.1]
    assert set(payload["results"]["fgd"]) == {"0.8", "1.1"}
    assert payload["results"]["fgd"]["1.1"]["seeds"] == 2
    assert main([*args, "--quiet"]) == 2  # no times and no default list beside it
    assert "--durations" in capsys.readouterr().err


def test_options_of_other_modes_are_refused_with_churn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = files.write(tmp_path / "nodes.csv", files.NODE_HEADER, ["n1,64000,262144,8,V100M32"])
    pods = files.write(tmp_path / "pods.csv", files.MULTIGPU_HEADER, ["p,1000,1024,1,1000"])
    assert main(["simulate", "--nodes", str(nodes), "--pods", str(pods), "--churn", "1", "--tune", "1.3"]) == 2
    assert "--tune: does not apply to --churn" in capsys.readouterr().err
    assert main(["simulate", "--nodes", str(nodes), "--pods", str(pods), "--churn", "0"]) == 2
    assert "--churn" in capsys.readouterr().err
    assert main(["simulate", "--pods", str(pods), "--churn", "1"]) == 2


def test_consolidation_moves_a_pod_which_then_runs_what_it_had_left() -> None:
    # Two nodes of 2 GPUs; spread puts a1 and a2 on one each; c (2 GPUs) fits nowhere until one of them moves (or a2
    # leaves at 10).
    nodes = [NodeSpec("n1", 64000, 262144, 2, "V100M32"), NodeSpec("n2", 64000, 262144, 2, "V100M32")]
    arrivals = [
        Arrival("a1", _pod("a1", 1), 0.0, 100.0),
        Arrival("a2", _pod("a2", 1), 0.0, 10.0),
        Arrival("c", _pod("c", 2), 1.0, 100.0),
    ]
    still = _run(nodes, arrivals, 20.0, "spread")
    assert (still.never_placed, still.moves, still.waits["2"]["p50"]) == (0, 0, 9.0)
    assert still.time_weighted_alloc == pytest.approx(100.0 * (20 + 10 + 2 * 10) / 80.0)
    moved = _run(nodes, arrivals, 20.0, "spread+consolidate")
    assert (moved.never_placed, moved.moves, moved.placed) == (0, 1, 3)
    assert moved.waits["2"]["p50"] == 1.0  # the plan starts at 1; c is tried again at the end of its backoff
    assert moved.moves_per_100_placed == pytest.approx(100.0 / 3)
    # a1 20 GPU-s; a2 10, moved at 1 and leaving at 10 all the same (not 11: it runs what it had left); c 2 x 18.
    assert moved.time_weighted_alloc == pytest.approx(100.0 * (20 + 10 + 2 * 18) / 80.0)


def test_a_sample_of_arrivals_spreads_over_the_whole_list_in_order() -> None:
    pods = [_pod(f"p{i}", 1) for i in range(10)]
    assert [p.name for p in churn.sample(pods, 4)] == ["p0", "p2", "p5", "p7"]
    assert churn.sample(pods, 0) == pods and churn.sample(pods, 20) == pods


def test_defrag_turns_on_background_defragmentation_with_consolidate_only() -> None:
    config = churn.profile("fgd+consolidate+defrag", shapes=[], seed=0)
    assert config.actions == ("allocate", "consolidate")
    assert config.consolidation.defragment_every_s == churn.DEFRAG_EVERY_S
    assert churn.profile("fgd+consolidate", shapes=[], seed=0).consolidation.defragment_every_s == 0
    with pytest.raises(InvalidObject) as caught:
        churn.profile("fgd+defrag", shapes=[], seed=0)
    assert caught.value.field == "--policy" and "consolidate" in str(caught.value)


class _Nodes(churn.ChurnSimulation):
    """Records the nodes each pod ran on, in order, under the name it first arrived as (a moved pod's replacement
    goes on with its pod's list)."""

    def __init__(self, nodes: list[NodeSpec], load: Workload, config: ProfileConfig) -> None:
        self.nodes: dict[str, list[str]] = {}
        super().__init__(nodes, load, config)

    def placed(self, decision: Decision) -> None:
        super().placed(decision)
        name = decision.pod.name
        self.nodes.setdefault(self.origin.get(name, name), []).append(decision.node)


def test_background_defragmentation_empties_a_node_once_and_never_moves_a_pod_back() -> None:
    # spread leaves a1 and a2 on a node each; nothing waits, so at 300 s defrag moves a1 to a2's node: n1 is whole.
    # From then on one node holds both pods and the other is whole. Emptying the full one would only fill the whole
    # one (no GPU more on whole nodes), so nothing moves again, though both pods may move from 900 s on (the
    # cooldown of a1's move, 600 s, has ended) and defrag looks every 300 s until 2,900 s. One move in all.
    nodes = [NodeSpec("n1", 64000, 262144, 8, "V100M32"), NodeSpec("n2", 64000, 262144, 8, "V100M32")]
    arrivals = [Arrival("a1", _pod("a1", 1), 0.0, 5000.0), Arrival("a2", _pod("a2", 1), 0.0, 5000.0)]
    tick = [Arrival(f"t{i}", _pod(f"t{i}", 0), 100.0 * i, 1.0) for i in range(2, 30)]
    horizon = 2900.0
    plain = _run(nodes, [*arrivals, *tick], horizon, "spread+consolidate")
    assert (plain.moves, plain.free_whole_node_gpus) == (0, 0.0)
    sim = _Nodes(
        nodes, Workload([*arrivals, *tick], horizon), churn.profile("spread+consolidate+defrag", shapes=[], seed=0)
    )
    sim.run()
    defrag = sim.result(0.0)
    assert {k: v for k, v in sim.nodes.items() if k.startswith("a")} == {"a1": ["n1", "n2"], "a2": ["n2"]}
    assert defrag.moves == 1 and sim.loop.action_state(Defragmenter).nodes_emptied == 1
    assert defrag.free_whole_node_gpus == pytest.approx(8.0 * (horizon - 300.0) / horizon)  # n1 whole from 300 s


def test_a_sample_arrives_while_the_population_is_drawn_from_the_whole_list() -> None:
    pods = [_pod(f"p{i}", 1) for i in range(10)]
    durations = [100.0] * 9 + [10000.0]  # p9 runs 100 times longer: most of the population, never an arrival
    w = churn.workload(pods, gpu_capacity=64.0, load=1.0, seed=0, durations=durations, arrivals=4)
    assert [a.name for a in w.arrivals if not a.initial] == ["p0#0", "p2#2", "p5#5", "p7#7"]
    assert w.rate == pytest.approx(64.0 / 100.0)  # the arrivals' own work offers the load
    initial = [a.spec.name for a in w.arrivals if a.initial]
    assert initial.count("p9") > 0.8 * len(initial)


# --- declared run times ---------------------------------------------------------------------------------------


def _many(count: int = 400) -> Workload:
    pods = [_pod(f"p{i}", 1 + i % 2) for i in range(count)]
    durations = [float(10 + 7 * (i % 50)) + 0.25 for i in range(count)]
    return churn.workload(pods, gpu_capacity=16.0, load=1.0, seed=3, durations=durations)


def test_declared_run_times_are_exact_overestimated_or_missing_as_asked_and_seeded() -> None:
    load = _many()
    exact = churn.declare(load, churn.Declared(), seed=3)
    assert [a.deadline for a in exact.arrivals] == [max(1, math.ceil(a.duration)) for a in load.arrivals]
    # Everything else of the run stays as it was drawn: the same arrivals at the same times for the same durations.
    assert [(a.name, a.at, a.duration) for a in exact.arrivals] == [(a.name, a.at, a.duration) for a in load.arrivals]
    over = churn.declare(load, churn.Declared(2.0, 5.0, 0.2), seed=3)
    declared = [(a.deadline, a.duration) for a in over.arrivals if a.deadline is not None]
    assert all(2.0 * d <= deadline <= 5.0 * d + 1 for deadline, d in declared)
    factors = [deadline / d for deadline, d in declared]
    assert min(factors) < 2.5 and max(factors) > 4.5  # drawn over the whole range
    share = 1 - len(declared) / len(over.arrivals)
    assert 0.15 < share < 0.25
    assert churn.declare(load, churn.Declared(2.0, 5.0, 0.2), seed=3) == over
    assert churn.declare(load, churn.Declared(2.0, 5.0, 0.2), seed=4) != over


def test_a_pod_declares_its_run_time_as_the_operator_reads_a_deadline() -> None:
    arrivals = [Arrival("a", _pod("a", 1), 0.0, 10.0, deadline=25), Arrival("b", _pod("b", 1), 1.0, 10.0)]
    sim = churn.ChurnSimulation([NODE], Workload(arrivals, 20.0), churn.profile("fgd", shapes=[], seed=0))
    raw = objects.pod("a", gpus=1)
    raw["spec"]["activeDeadlineSeconds"] = 25
    assert sim.requests["a"].run_time == api_pod.parse_pod(raw).run_time == api_run_time.active_deadline(25)
    assert sim.requests["b"].run_time is None


def test_declared_run_times_change_no_figure_of_a_policy_without_backfill() -> None:
    # Only the backfill action reads them: without it a run with them is the run without them.
    load = _many(120)
    config = churn.profile("fgd+consolidate", shapes=[], seed=0)
    nodes = [NODE, NodeSpec("n2", 64000, 262144, 8, "V100M32")]
    plain = churn.run(nodes, load, config)
    declared = churn.run(nodes, churn.declare(load, churn.Declared(2.0, 5.0, 0.2), seed=3), config)
    plain.wall_s = declared.wall_s = 0.0
    assert declared == plain


def test_the_command_line_declares_run_times_and_refuses_bad_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = files.write(tmp_path / "nodes.csv", files.NODE_HEADER, ["n1,64000,262144,8,V100M32"])
    timed = [f"t{i},1000,1024,1,1000,,LS,Running,{i},{i + 100 + 50 * (i % 3)}," for i in range(20)]
    pods = files.write(tmp_path / "timed.csv", files.POD_HEADER, timed)
    out = tmp_path / "churn.json"
    args = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--churn", "1", "--seeds", "1-1", "--quiet"]
    assert main([*args, "--runtime-estimate", "2-5", "--runtime-missing", "0.2", "--json", str(out)]) == 0
    assert "run times declared x2-5, 20% without" in capsys.readouterr().out
    assert json.loads(out.read_text())["runtimes"] == {"low": 2.0, "high": 5.0, "missing": 0.2}
    assert main([*args, "--json", str(out)]) == 0
    assert "runtimes" not in json.loads(out.read_text()) and "declared" not in capsys.readouterr().out
    for option, value in (("--runtime-estimate", "0.5"), ("--runtime-estimate", "5-2"), ("--runtime-missing", "2")):
        assert main([*args, option, value]) == 2
        assert option in capsys.readouterr().err
    assert main(["simulate", "--nodes", str(nodes), "--pods", str(pods), "--runtime-missing", "0.1"]) == 2
    assert "--runtime-missing: does not apply" in capsys.readouterr().err


def test_backfill_holds_a_node_for_the_8_gpu_pod_and_lets_only_work_that_ends_in_time_use_it() -> None:
    # n1 runs a (6 GPUs) until 10, n2 b (8 GPUs) until 100. big (8) arrives at 1: with backfill it holds n1 from
    # 1 to 10; q (2 GPUs, ends at 7) backfills there, s (2 GPUs from 8, ends at 28) may not, so big starts at 10.
    # fgd gives s n1's free GPUs and big waits for it until 28.
    nodes = [NODE, NodeSpec("n2", 64000, 262144, 8, "V100M32")]
    arrivals = [
        Arrival("a", _pod("a", 6), 0.0, 10.0, deadline=10),
        Arrival("b", _pod("b", 8), 0.5, 100.0, deadline=100),
        Arrival("big", _pod("big", 8), 1.0, 50.0, deadline=50),
        Arrival("q", _pod("q", 2), 2.0, 5.0, deadline=5),
        Arrival("s", _pod("s", 2), 8.0, 20.0, deadline=20),
    ]
    fgd, backfill = (_run(nodes, arrivals, 40.0, policy) for policy in ("fgd", "fgd+backfill"))
    # The 8-GPU waits are b's (0) and big's: their p99 is 0.99 x big's wait.
    assert fgd.waits["8"]["p99"] / 0.99 == pytest.approx(27.0)
    assert backfill.waits["8"]["p99"] / 0.99 == pytest.approx(9.0)
    assert (backfill.held_starts, backfill.backfilled) == (1, 1)
    assert backfill.waits["2"]["p50"] > fgd.waits["2"]["p50"]  # s waited for big: the price of the hold
    assert (fgd.held_starts, fgd.backfilled) == (0, 0)
