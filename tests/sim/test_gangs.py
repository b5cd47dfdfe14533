"""The gang scenario: jobs in, all-or-nothing placements out, no partial gang and no deadlock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler import cli
from scheduler.api.basics.errors import InvalidObject
from scheduler.sim import gangs, policies
from scheduler.sim.trace import NodeSpec

HEADER = "job,workers,gpus_per_worker,cpu_milli,memory_mib,arrival,duration\n"


def _write(tmp_path: Path, rows: str, name: str = "jobs.csv") -> Path:
    path = tmp_path / name
    path.write_text(HEADER + rows)
    return path


def test_jobs_load_sorted_by_arrival(tmp_path: Path) -> None:
    path = _write(tmp_path, "b,2,4,8000,16384,10,60\na,4,1,4000,8192,0,30\n")
    jobs = gangs.load_jobs(path)
    assert [j.name for j in jobs] == ["a", "b"]
    assert (jobs[0].workers, jobs[0].gpus_per_worker, jobs[0].gpus, jobs[0].duration) == (4, 1, 4, 30.0)


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ("a,two,1,1000,1024,0,10\n", "workers"),
        ("a,0,1,1000,1024,0,10\n", "workers"),
        ("a,2,1.5,1000,1024,0,10\n", "gpus_per_worker"),
        ("a,2,1,1000,1024,-3,10\n", "arrival"),
        ("a,2,1,1000,1024,0,inf\n", "duration"),
        (",2,1,1000,1024,0,10\n", "job"),
    ],
)
def test_bad_job_rows_name_the_file_line_and_column(tmp_path: Path, row: str, column: str) -> None:
    path = _write(tmp_path, "ok,1,1,1000,1024,0,10\n" + row)
    with pytest.raises(InvalidObject) as info:
        gangs.load_jobs(path)
    assert info.value.field == column
    assert f"file {path} line 3" in str(info.value)


def test_a_jobs_file_without_the_columns_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text("job,workers\na,2\n")
    with pytest.raises(InvalidObject, match="missing columns"):
        gangs.load_jobs(path)


def test_two_jobs_that_each_need_most_of_the_cluster_run_one_after_the_other() -> None:
    # Two nodes of 8 GPUs. Job a (3 workers x 4 GPUs = 12) arrives first and runs 100 s; job b (12 GPUs)
    # arrives at t=1, cannot fit beside a, holds nothing, and starts when a leaves at t=100.
    nodes = [NodeSpec(f"n{i}", 64_000, 262_144, 8, "A100") for i in range(2)]
    jobs = [
        gangs.Job("a", 3, 4, 4000, 8192, 0.0, 100.0),
        gangs.Job("b", 3, 4, 4000, 8192, 1.0, 50.0),
    ]
    run = gangs.run(nodes, jobs, policies.build("default", shapes=[], seed=0))
    assert (run.partial_gangs, run.deadlocks, run.placed_gangs, run.waiting_gangs) == (0, 0, 2, 0)
    # Waits: a 0 s, b 99 s.
    assert run.gang_wait_mean_s == pytest.approx(49.5)
    # Allocation is measured up to the last arrival (t=1): 12 of 16 GPUs for 1 s.
    assert run.gpu_allocation == pytest.approx(75.0)


def test_the_built_in_jobs_never_leave_a_gang_partly_placed() -> None:
    nodes = gangs.cluster(8)
    jobs = gangs.generate(40, cluster_gpus=64, seed=3)
    assert all(j.gpus <= 64 for j in jobs)
    run = gangs.run(nodes, jobs, policies.build("default", shapes=[], seed=3))
    assert run.partial_gangs == 0
    assert run.deadlocks == 0
    assert run.placed_gangs == 40


def test_simulate_scenario_gangs_writes_the_documented_json(tmp_path: Path) -> None:
    path = _write(tmp_path, "a,2,8,4000,8192,0,100\nb,4,2,4000,8192,5,50\nc,1,1,1000,1024,6,10\n")
    out = tmp_path / "gangs.json"
    code = cli.main(
        ["simulate", "--scenario", "gangs", "--jobs", str(path), "--seeds", "1", "--json", str(out), "--quiet"]
    )
    assert code == 0
    result = json.loads(out.read_text())["results"]["default"]
    for key in ("partial_gangs", "deadlocks", "gang_wait_mean_s", "gang_wait_p99_s", "gpu_allocation"):
        assert key in result
    assert (result["partial_gangs"], result["deadlocks"]) == (0, 0)
