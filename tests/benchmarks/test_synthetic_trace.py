"""The synthetic trace (benchmarks/synthetic_trace.py) loads as the Alibaba trace does, and a churn runs on it."""

from __future__ import annotations

from pathlib import Path

from benchmarks import synthetic_trace
from scheduler.sim import trace


def test_the_synthetic_trace_loads_as_the_alibaba_trace_with_times(tmp_path: Path) -> None:
    nodes, pods = synthetic_trace.write(tmp_path, nodes=20, pods=50, seed=1)
    assert len(trace.load_nodes(nodes)) == 20
    loaded = trace.load_pods(pods)
    assert len(loaded) == 50
    assert all(p.creation is not None and p.deletion is not None and p.deletion > p.creation for p in loaded)
    assert any(p.num_gpu == 1 and 0 < p.gpu_milli < 1000 for p in loaded)  # shared GPUs among them
    assert synthetic_trace.write(tmp_path / "again", nodes=20, pods=50, seed=1)[1].read_text() == pods.read_text()
