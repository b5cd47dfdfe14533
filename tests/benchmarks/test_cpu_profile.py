"""benchmarks/cpu_profile.py: the sampling profiler's summary and its timeline of a process's start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks import cpu_profile

ROOT = Path(__file__).resolve().parents[2]


def test_a_sample_is_labelled_by_its_deepest_frame_of_the_scheduler_else_the_module_imported() -> None:
    in_cycle = ("scheduler/cli.py:main", "scheduler/core/cycle.py:place", "numpy/_core/fromnumeric.py:sum:86")
    assert cpu_profile._label(in_cycle) == "scheduler/core/cycle.py:place"
    at_leaf = ("scheduler/cli.py:main", "scheduler/core/cycle.py:place:120")
    assert cpu_profile._label(at_leaf) == "scheduler/core/cycle.py:place"  # the leaf's line left out
    importing = ("scheduler/cli.py:<module>", "aiohttp/connector.py:<module>", ".11/ssl.py:create_default_context:770")
    assert cpu_profile._label(importing) == "aiohttp/connector.py:<module>"
    assert cpu_profile._label((".11/selectors.py:select:468",)) == ".11/selectors.py:select"
    # Below the event loop, what it called back: gpusched's frames there, else the callback (not the loop's caller).
    loop = ("scheduler/k8s/run.py:_run_bounded", ".11/asyncio/base_events.py:_run_once", ".11/asyncio/events.py:_run")
    assert cpu_profile._label((*loop, "kopf/_core/reactor/queueing.py:worker", "kopf/x.py:y:3")) == (
        "kopf/_core/reactor/queueing.py:worker"
    )
    assert (
        cpu_profile._label((*loop, "scheduler/k8s/operator.py:run", "numpy/a.py:b:1"))
        == "scheduler/k8s/operator.py:run"
    )
    assert cpu_profile._label((*loop[:2], ".11/selectors.py:select:468")) == "scheduler/k8s/run.py:_run_bounded"


def test_the_timeline_has_a_row_per_window_with_samples_in_order() -> None:
    samples = [(0.01, "a"), (0.02, "a"), (0.03, "b"), (0.21, "c"), (0.06, "b")]
    head, *rows = cpu_profile._timeline(samples)
    assert "50 ms" in head
    assert rows == ["   0.00 s    3  2 a, 1 b\n", "   0.05 s    1  1 b\n", "   0.20 s    1  1 c\n"]


def test_a_profiled_command_writes_its_stacks_summary_and_timeline(tmp_path: Path) -> None:
    out = tmp_path / "topology.stacks"
    sample = ROOT / "tests" / "api" / "data" / "nvidia-smi" / "nvlink-pairs-4gpu.txt"
    command = [sys.executable, "-m", "benchmarks.cpu_profile", str(out), "scheduler.cli", "node-topology"]
    done = subprocess.run([*command, "--from-nvidia-smi", str(sample)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert '"gpus"' in done.stdout  # the command itself ran
    assert out.read_text().strip() and "samples" in Path(f"{out}.txt").read_text()
    rows = Path(f"{out}.timeline.txt").read_text().splitlines()[1:]
    assert rows and rows[0].split()[0] == "0.00"  # its imports, from the process start
