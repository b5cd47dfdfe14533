"""``gpusched simulate`` on tiny trace files: the JSON a user scripts against, the chart, the replay, and bad
flags refused with exit code 2 and a message naming the flag."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from scheduler import cli
from tests.sim.files import MULTIGPU_HEADER, NODE_HEADER, POD_HEADER, write

NODES = ["n0,128000,1048576,8,T4", "n1,128000,1048576,8,T4"]  # 16000 GPU-milli
# Small shared pods (at most 200 milli = 1.25% of the cluster), so the curve has a sample near every percent.
PODS = [
    "p0,1000,2048,1,100,,LS,Running,0,3600,0",
    "p1,1000,2048,1,200,,LS,Running,60,1800,60",
    "p2,2000,4096,1,150,T4,BE,Running,120,,120",
    "p3,1000,2048,1,50,,LS,Running,180,7200,200",
    "p4,1000,2048,0,0,,BE,Running,240,600,240",
    "p5,1000,2048,1,200,,LS,Pending,300,900,",
    "p6,1000,2048,1,100,,LS,Running,360,5400,360",
    "p7,1000,2048,1,200,,LS,Running,7000,,7000",
]
RESULT_KEYS = {
    "alloc_at",
    "alloc_std_at",
    "frag_at",
    "failed_pods",
    "fully_free_gpu_nodes",
    "stranded_nodes",
    "decisions_per_s",
    "wall_s",
}


@pytest.fixture
def trace_files(tmp_path: Path) -> tuple[Path, Path]:
    return write(tmp_path / "nodes.csv", NODE_HEADER, NODES), write(tmp_path / "pods.csv", POD_HEADER, PODS)


def _simulate(*flags: str) -> int:
    return cli.main(["simulate", "--quiet", *flags])


def _on(files: tuple[Path, Path], *flags: str) -> list[str]:
    return ["--nodes", str(files[0]), "--pods", str(files[1]), *flags]


def test_json_and_plot_of_a_comparison(
    trace_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, png = tmp_path / "out.json", tmp_path / "out.png"
    assert (
        _simulate(
            *_on(trace_files, "--policy", "bestfit,fgd", "--seeds", "1-2", "--json", str(out), "--plot", str(png))
        )
        == 0
    )
    data = json.loads(out.read_text())
    assert (data["mode"], data["ratio"], data["seeds"]) == ("tune", 1.3, [1, 2])
    assert list(data["results"]) == ["bestfit", "fgd"]
    for policy, result in data["results"].items():
        assert set(result) >= RESULT_KEYS, policy
        assert set(result["alloc_at"]) == set(result["alloc_std_at"]) == {"100", "130"}
        assert set(result["frag_at"]) == {"90"}
        # Small shared pods fill the cluster: nearly all the demand is placed at 100%, and all of the cluster
        # at 130% (the pods that fail are those arriving once it is full).
        assert 95.0 <= result["alloc_at"]["100"] <= 100.0
        assert 99.0 <= result["alloc_at"]["130"] <= 100.0
        assert all(v >= 0 and math.isfinite(v) for v in result["alloc_std_at"].values())
        assert 0.0 <= result["frag_at"]["90"] < 100.0
        assert result["failed_pods"] > 0
        assert result["fully_free_gpu_nodes"] == 0
        assert result["stranded_nodes"] >= 0
        assert result["decisions_per_s"] > 0 and result["wall_s"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = capsys.readouterr().out
    assert "bestfit" in table and "fgd" in table and "alloc@130%" in table


def test_the_same_seeds_give_the_same_allocation(trace_files: tuple[Path, Path], tmp_path: Path) -> None:
    figures = []
    for run in ("a", "b"):
        out = tmp_path / f"{run}.json"
        assert _simulate(*_on(trace_files, "--policy", "random", "--seeds", "3", "--json", str(out))) == 0
        figures.append(json.loads(out.read_text())["results"]["random"]["alloc_at"])
    assert figures[0] == figures[1]


def test_replay_of_the_tiny_trace(trace_files: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "replay.json"
    assert _simulate(*_on(trace_files, "--policy", "bestfit,fgd", "--replay", "--json", str(out))) == 0
    data = json.loads(out.read_text())
    assert data["mode"] == "replay"
    for result in data["results"].values():
        assert result["failed_pods"] == 0
        assert result["pending_mean_s"] == 0.0  # 1000 milli at most at once on 16000: nothing waits
        # Over 0..7000 s (the last arrival): p0 100 milli x 3600 s, p1 200 x 1740 (deleted 1800, scheduled 60),
        # p2 150 x 6880 (never deleted), p3 50 x 6820 (its 7000 s from 180 outlast the span), p5 200 x 600
        # (900 - 300: never scheduled in the trace, so from its creation), p6 100 x 5040; p7 arrives at the end.
        area = 100 * 3600 + 200 * 1740 + 150 * 6880 + 50 * 6820 + 200 * 600 + 100 * 5040
        assert result["time_weighted_alloc"] == pytest.approx(100 * area / (7000 * 16000))


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--policy", "bestfit,nope"], "--policy"),
        (["--policy", " , "], "--policy"),
        (["--seeds", "x"], "--seeds"),
        (["--seeds", "5-3"], "--seeds"),
        (["--seeds", "1-"], "--seeds"),
        (["--tune", "0"], "--tune"),
        (["--tune", "11"], "--tune"),
        (["--tune", "-1.3"], "--tune"),
        (["--nodes", "nodes.csv"], "--nodes"),
        (["--pods", "pods.csv"], "--nodes"),
        (["--replay"], "--replay"),
    ],
)
def test_a_bad_flag_returns_2_naming_it(flags: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _simulate(*flags) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpusched: ")
    assert f"field {named}:" in err


def test_a_tune_that_is_not_a_number_exits_2_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        _simulate("--tune", "lots")
    assert caught.value.code == 2
    assert "--tune" in capsys.readouterr().err


def test_a_bad_trace_file_returns_2_naming_the_file(
    trace_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, _ = trace_files
    bad = write(tmp_path / "bad.csv", POD_HEADER, ["p0,1000,2048,3,500,,LS,Running,0,,"])
    assert _simulate("--nodes", str(nodes), "--pods", str(bad), "--policy", "bestfit", "--seeds", "1") == 2
    assert f"file {bad} line 2 field gpu_milli" in capsys.readouterr().err


def test_a_replay_of_pods_without_times_returns_2(
    trace_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, _ = trace_files
    untimed = write(tmp_path / "multigpu.csv", MULTIGPU_HEADER, ["p0,1000,2048,1,500"])
    assert _simulate("--nodes", str(nodes), "--pods", str(untimed), "--policy", "bestfit", "--replay") == 2
    assert "field creation_time" in capsys.readouterr().err


def test_a_workload_without_gpu_pods_finishes(tmp_path: Path, trace_files: tuple[Path, Path]) -> None:
    nodes, _ = trace_files
    cpu_only = write(tmp_path / "cpu.csv", POD_HEADER, ["c0,1000,2048,0,0,,BE,Running,0,,"])
    assert _simulate("--nodes", str(nodes), "--pods", str(cpu_only), "--policy", "bestfit", "--seeds", "1") == 0
