"""``gpusched simulate`` on tiny trace files: the JSON a user scripts against, the chart, the replay, and bad
flags refused with exit code 2 and a message naming the flag."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from scheduler import cli
from scheduler.sim import report
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


def test_the_dashboard_page_of_a_comparison(trace_files: tuple[Path, Path], tmp_path: Path) -> None:
    page = tmp_path / "maps.html"
    assert _simulate(*_on(trace_files, "--policy", "bestfit,fgd", "--seeds", "1", "--dashboard", str(page))) == 0
    text = page.read_text()
    assert re.findall(r'data-policy="([^"]*)"', text) == ["bestfit", "fgd"]
    # Both T4 nodes of each policy's cluster (named in the seed's tie order), their 8 GPUs each as cells, every one
    # shared by the small pods at 1.3 x capacity.
    assert sorted(re.findall(r'data-node="\d+-(n\d)"', text)) == ["n0", "n0", "n1", "n1"]
    assert text.count("data-gpu=") == 32 and text.count("data-gpus=16 data-whole=0 data-shared=16") == 2
    assert "<script>" not in text


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


def test_plot_without_matplotlib_says_how_to_get_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # matplotlib is an optional dependency (the `plots` extra), left out of the operator image.
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert _simulate("--plot", f"{tmp_path}/out.png") == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "--plot" in err and "pip install 'gpusched[plots]'" in _one_line(err)
    assert not (tmp_path / "out.png").exists()


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


def _one_line(err: str) -> str:
    """A user error is one line on stderr, with no traceback."""
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    ("flag", "where", "says"),
    [
        ("--plot", "missing/alloc.png", "field --plot: folder {tmp}/missing does not exist"),
        ("--json", "missing/out.json", "field --json: folder {tmp}/missing does not exist"),
        ("--json", ".", "field --json: {tmp}/. is a folder; give a file name"),
        ("--dashboard", "missing/maps.html", "field --dashboard: folder {tmp}/missing does not exist"),
        ("--plot", "alloc.txt", "field --plot: '{tmp}/alloc.txt': name the file with an image extension"),
        ("--plot", "file.csv/alloc.png", "field --plot: {tmp}/file.csv is not a folder"),
    ],
)
def test_an_output_that_cannot_be_written_is_refused_before_the_simulation(
    flag: str, where: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file.csv").write_text("")
    # The whole built-in comparison would take seconds per policy: refused first, nothing runs or prints.
    assert _simulate(flag, f"{tmp_path}/{where}") == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert says.format(tmp=tmp_path) in _one_line(err)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--scenario", "tenants", "--policy", "default", "--tune", "1.2"], "--tune"),
        (["--scenario", "tenants", "--nodes", "n.csv"], "--nodes"),
        (["--scenario", "tenants", "--plot", "x.png"], "--plot"),
        (["--scenario", "topology", "--policy", "fgd"], "--policy"),
        (["--scenario", "topology", "--tune", "1.2"], "--tune"),
        (["--scenario", "topology", "--replay"], "--replay"),
        (["--scenario", "gangs", "--pods", "p.csv"], "--pods"),
        (["--scenario", "gangs", "--tune", "1.1"], "--tune"),
        (["--scenario", "gangs", "--replay"], "--replay"),
        (["--replay", "--tune", "1.1"], "--tune"),
        (["--replay", "--seeds", "1-3"], "--seeds"),
        (["--jobs", "jobs.csv"], "--jobs"),
    ],
)
def test_an_option_the_mode_does_not_read_is_refused(
    flags: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _simulate(*flags) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"gpusched simulate field {named}: does not apply to " in err


@pytest.mark.parametrize("flags", [["--arrivals", "5"], ["--durations", "d.csv"], ["--replay", "--arrivals", "5"]])
def test_a_churn_option_without_churn_says_only_churn_reads_it(
    flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _simulate(*flags) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"field {flags[-2]}: does not apply to " in err
    assert "(only --churn reads it)" in err


def test_the_policy_help_names_every_action_a_churn_policy_can_add(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["simulate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for action in ("consolidate", "reclaim", "preempt", "backfill", "fgd+consolidate", "fgd+backfill"):
        assert action in help_text


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--nodes", "{tmp}/n.csv", "--pods", "{tmp}/p.csv"], "field --nodes: no file {tmp}/n.csv"),
        (
            ["--nodes", "{nodes}", "--pods", "{tmp}/openb_pod_list_default.csv"],
            "field --pods: no file {tmp}/openb_pod_list_default.csv: `gpusched trace` downloads",
        ),
        (["--scenario", "gangs", "--jobs", "{tmp}/jobs.csv"], "field --jobs: no file {tmp}/jobs.csv"),
    ],
)
def test_a_missing_input_file_is_named_before_anything_runs(
    flags: list[str], says: str, trace_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    words = [f.format(tmp=tmp_path, nodes=trace_files[0]) for f in flags]
    assert _simulate(*words) == 2
    assert says.format(tmp=tmp_path) in _one_line(capsys.readouterr().err)


def test_the_topology_scenario_runs_the_seed_its_help_names(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from scheduler.sim import scenario_runs

    seen: list[list[int]] = []

    def record(seeds: list[int], quiet: bool) -> None:
        seen.append(list(seeds))
        raise KeyboardInterrupt  # stop before the (slow) scenario

    monkeypatch.setattr(scenario_runs, "run_topology", record)
    with pytest.raises(SystemExit):
        cli.main(["simulate", "--help"])
    help_text = capsys.readouterr().out
    assert "42 with --scenario topology" in " ".join(help_text.split())
    assert _simulate("--scenario", "topology") == 130
    assert _simulate("--scenario", "topology", "--seeds", "7-8") == 130
    assert seen == [[42], [7, 8]]


def test_the_tenants_scenario_says_when_each_seed_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from scheduler.sim import tenants

    def fake_run(nodes: object, config: object, *, seed: int) -> tenants.TenantRun:
        queue = {"weight": 1.0, "gpus_held": 8.0, "fair_share_gpus": 8.0, "share_over_fair": 1.0}
        return tenants.TenantRun(
            jain_index=1.0,
            gpu_allocation=97.0,
            reclaim_latency_s=600.0,
            queues={"prod": queue},
            partial_gangs=0,
            wall_s=0.01,
            preempted_gpu_hours=10.0,
            preemptions=seed,
        )

    monkeypatch.setattr(tenants, "run", fake_run)
    assert cli.main(["simulate", "--scenario", "tenants", "--seeds", "55-57"]) == 0
    out, err = capsys.readouterr()
    assert "tenants: default seed 55 (1 of 3) running, about 70 s" in err
    assert "tenants: default seed 57 (3 of 3) running" in err
    assert "in 56 jobs a seed" in out  # the mean of 55, 56, 57: a count, not 56.0000
    assert "(means over 3 seeds)" in out
    assert "held/fair near 1 is fair" in out  # the legend


def test_tenant_counts_read_as_counts() -> None:
    from scheduler.sim import report

    queue = {"weight": 2.0, "gpus_held": 120.0, "fair_share_gpus": 128.0, "share_over_fair": 0.94}
    result = {
        "jain_index": 0.993,
        "gpu_allocation": 97.07,
        "reclaim_latency_s": 1432.0,
        "preempted_gpu_hours": 117.2,
        "preemptions": 167 / 3,
        "partial_gangs": 0,
        "queues": {"prod": queue},
    }
    text = report.tenant_table({"default": result}, seeds=3)
    assert "preempted 117.2 GPU-hours in 55.7 jobs a seed" in text
    assert "55.6667" not in text


def test_alloc_at_100_that_the_curve_skips_is_explained_not_nan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two 8-GPU nodes and three 6-GPU pods: each pod is 37.5% of the cluster, so the arrived demand goes 37.5,
    # 75, 112.5% (a fourth would pass 130%): it never comes within a point of 100%.
    nodes = write(tmp_path / "nodes.csv", NODE_HEADER, NODES)
    pods = write(tmp_path / "pods.csv", POD_HEADER, [f"big{i},8000,16384,6,1000,,LS,Running,0,,0" for i in range(3)])
    out = tmp_path / "out.json"
    flags = ("--policy", "bestfit", "--seeds", "1", "--json", str(out))
    assert _simulate("--nodes", str(nodes), "--pods", str(pods), *flags) == 0
    table = capsys.readouterr().out
    result = json.loads(out.read_text())["results"]["bestfit"]
    assert result["alloc_at"]["100"] is None
    assert result["alloc_at"]["130"] == pytest.approx(75.0)  # two of the three placed, one per node
    assert "nan" not in table
    assert "n/a*" in table
    assert "n/a*         no pod arrived while the demand was within a point of 100% of the cluster's GPU" in table
    assert "alloc@X%     GPU allocated" in table  # the legend
    assert f"wrote {out} (the results as JSON)" in table


def test_the_command_says_where_it_wrote_the_plot(
    trace_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "alloc.png"
    assert _simulate(*_on(trace_files, "--policy", "fgd", "--seeds", "1", "--plot", str(png))) == 0
    assert f"wrote {png} (the charts)" in capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_policy_keeps_its_colour_whatever_else_is_plotted() -> None:
    from scheduler.sim import report

    alone = report.colours(["fgd"])
    together = report.colours(["random", "bestfit", "fgd", "default", "mine"])
    assert alone["fgd"] == together["fgd"]
    assert len(set(together.values())) == 5


def test_each_policy_is_measured_against_fgd_from_half_the_cluster_on() -> None:
    curve_fgd = {str(x): float(x) for x in range(0, 131)}
    # Loses 3 points at 90% and only there (a dip), wins 1 point at 130%, below 50% anything goes.
    other = {
        str(x): float(x) - (3.0 if x == 90 else 0.0) + (1.0 if x == 130 else 0.0) - (9.0 if x < 50 else 0.0)
        for x in range(0, 131)
    }
    results: dict[str, dict[str, object]] = {"fgd": {"curve": curve_fgd}, "default": {"curve": other}}
    report.versus(results)
    v = results["default"]["versus"]
    assert isinstance(v, dict)
    assert (v["worst_diff"], v["worst_at"]) == (-3.0, 90)
    assert v["mean_diff"] == pytest.approx(-2.0 / 81)
    assert results["fgd"]["versus"]["mean_diff"] == 0.0  # type: ignore[index]
    line = next(row for row in report.table(_with_columns(results), "130").splitlines() if row.startswith("default"))
    assert "-3.00 at 90%" in line and "-0.02" in line


def test_without_fgd_there_is_nothing_to_measure_against() -> None:
    results: dict[str, dict[str, object]] = {"bestfit": {"curve": {"50": 50.0}}}
    report.versus(results)
    assert "versus" not in results["bestfit"]
    assert "vs fgd" not in report.table(_with_columns(results), "130")


def _with_columns(results: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
    for r in results.values():
        r.update(
            alloc_at={},
            alloc_std_at={},
            frag_at={},
            failed_pods=0,
            fully_free_gpu_nodes=0,
            stranded_nodes=0,
            decisions_per_s=1.0,
            wall_s=1.0,
        )
    return results


def test_the_bound_and_each_policys_share_of_the_headroom(
    trace_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("scipy", reason="the bound's solver is the optional `sim` extra")
    out = tmp_path / "out.json"
    assert _simulate(*_on(trace_files, "--policy", "random,fgd", "--seeds", "1-2", "--json", str(out))) == 0
    data = json.loads(out.read_text())
    bounds = data["bound"]
    assert bounds["available"] and bounds["grid_milli"] == 1 and bounds["combinations"] > 0
    assert set(bounds["at"]) == {"100", "130"}
    for point, pair in bounds["at"].items():
        assert len(bounds["per_seed"][point]["forced"]) == 2
        # Pods may be refused in one and not in the other: the forced bound is never the higher.
        assert pair["forced"] <= pair["refusing"] + 1e-9
        for policy, result in data["results"].items():
            assert result["alloc_at"][point] <= pair["refusing"] + 1e-9, (policy, point)
    fgd = data["results"]["fgd"]
    assert set(fgd["headroom_share"]) == {"100", "130"}
    assert fgd["headroom_share"]["130"] in (0.0, None)  # None: fgd already at the bound
    table = capsys.readouterr().out
    assert "bound, refusing" in table and "bound, forced" in table


def test_the_table_says_when_the_solver_is_absent(
    trace_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from scheduler.sim import bound

    monkeypatch.setattr(bound, "available", lambda: False)
    out = tmp_path / "out.json"
    assert _simulate(*_on(trace_files, "--policy", "fgd", "--seeds", "1", "--json", str(out))) == 0
    table = capsys.readouterr().out
    assert (
        "bound        not computed: the bound needs scipy, an optional dependency: pip install 'gpusched[sim]'" in table
    )
    assert "bound, forced" not in table
    data = json.loads(out.read_text())
    assert data["bound"] == {"available": False, "reason": bound.INSTALL_HINT}
    assert "headroom_share" not in data["results"]["fgd"]


def test_the_share_of_the_headroom_divides_what_fgd_leaves() -> None:
    results: dict[str, dict[str, object]] = {
        "fgd": {"alloc_at": {"100": 95.0, "130": 95.0}},
        "better": {"alloc_at": {"100": 95.5, "130": 94.0}},
    }
    bounds = {"available": True, "at": {"100": {"refusing": 99.0, "forced": 97.0}, "130": {"forced": 95.01}}}
    report.headroom(results, bounds)
    share = results["better"]["headroom_share"]
    assert isinstance(share, dict)
    assert share["100"] == pytest.approx(0.25)  # half a point won of the two fgd leaves
    assert math.isnan(share["130"])  # fgd within 0.05 points of the bound: a share would divide by ~0
    assert results["fgd"]["headroom_share"]["100"] == 0.0  # type: ignore[index]


def test_the_table_says_when_the_bound_is_looser_or_forces_a_shorter_prefix() -> None:
    results = _with_columns({"fgd": {"curve": {"130": 90.0}}})
    results["fgd"]["alloc_at"] = {"100": 88.0, "130": 90.0}
    bounds = {
        "available": True,
        "at": {"100": {"refusing": 97.0, "forced": 91.0}, "130": {"refusing": 99.0, "forced": 92.5}},
        "forced_share": [0.95, 0.9],
        "grid_milli": 25,
    }
    report.headroom(results, bounds)
    text = report.table(results, "130", bounds)
    assert "bound, refusing       97.00%      99.00%" in text
    assert "bound, forced         91.00%      92.50%" in text
    assert "(before 90% on some seed: even relaxed, not every pod before 95% fits)" in text
    assert "(shared-GPU sizes rounded down to 25 milli to bound the combinations: looser)" in text


def test_a_bound_that_cannot_be_solved_says_why() -> None:
    results = _with_columns({"fgd": {"curve": {"130": 90.0}}})
    results["fgd"]["alloc_at"] = {"100": 88.0, "130": 90.0}
    nan = math.nan
    bounds = {
        "available": True,
        "at": {"100": {"refusing": 97.0, "forced": nan}, "130": {"refusing": 99.0, "forced": nan}},
        "forced_share": [0.0],
        "grid_milli": 1,
    }
    report.headroom(results, bounds)
    text = report.table(results, "130", bounds)
    assert "bound, forced           n/a*        n/a*" in text
    assert "n/a*         (bound) on some seed the CPU-only pods that arrive first do not fit, even relaxed" in text
    assert "nan" not in text


def test_a_tune_below_100_percent_reports_what_it_reached(
    trace_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --tune 0.8 stops before 100% arrived: the alloc@100% column has no value (it crashed with KeyError: '100').
    out = tmp_path / "tune.json"
    assert _simulate(*_on(trace_files, "--policy", "fgd", "--tune", "0.8", "--seeds", "42", "--json", str(out))) == 0
    at = json.loads(out.read_text())["results"]["fgd"]["alloc_at"]
    assert at["100"] is None and math.isfinite(at["80"])  # JSON writes a missing point as null
    assert "alloc@80%" in capsys.readouterr().out
