"""The gpusched command: node-topology and bench, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler import cli

SAMPLES = Path(__file__).parent / "api" / "data" / "nvidia-smi"


def test_node_topology_prints_the_annotation(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["node-topology", "--from-nvidia-smi", str(SAMPLES / "nvlink-pairs-4gpu.txt")]) == 0
    annotation = json.loads(capsys.readouterr().out)
    assert [g["index"] for g in annotation["gpus"]] == [0, 1, 2, 3]
    assert annotation["gpus"][0]["nvlink"] == {"1": 2}


def test_node_topology_names_the_file_on_garbled_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "topo.txt"
    bad.write_text("not a matrix\n")
    assert cli.main(["node-topology", "--from-nvidia-smi", str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err


def test_node_topology_names_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["node-topology", "--from-nvidia-smi", str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt" in capsys.readouterr().err


def test_bench_kernels_prints_json_with_every_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "kernels", "--nodes", "64", "--pods", "2", "--repeat", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["nodes"] == 64
    for name in (
        "fit",
        "spread",
        "binpack",
        "resource_strategy",
        "scarce_avoidance",
        "balance",
        "bestfit",
        "dotprod",
        "fgd",
    ):
        entry = report["kernels"][name]
        assert entry["numba_ns_per_node"] > 0 and entry["numpy_ns_per_node"] > 0 and entry["speedup"] > 0


def test_run_refuses_a_config_with_an_unknown_key_before_connecting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "gpusched.yaml"
    bad.write_text("binding: {concurrency: 8, qps: 100, burts: 10}\n")
    kubeconfig = tmp_path / "missing-kubeconfig"
    assert cli.main(["run", "--config", str(bad), "--kubeconfig", str(kubeconfig), "--log-format", "json"]) == 2
    err = capsys.readouterr().err
    assert f"config {bad} field binding.burts: unknown key" in err
