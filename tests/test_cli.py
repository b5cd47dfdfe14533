"""The gpusched command: node-topology and bench, as a user runs them."""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

import scheduler
from scheduler import cli

SAMPLES = Path(__file__).parent / "api" / "data" / "nvidia-smi"
#: The collector's thresholds as the tests run with them.
THRESHOLDS = gc.get_threshold()


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


def test_node_topology_refuses_a_binary_file_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary = tmp_path / "topo.bin"
    binary.write_bytes(b"\xff\xfe\x00\x81" * 16)
    assert cli.main(["node-topology", "--from-nvidia-smi", str(binary)]) == 2
    err = capsys.readouterr().err
    assert err == f"gpusched: file {binary}: not text\n"


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
    assert gc.get_threshold() == THRESHOLDS, "a run that ended before its kernels were warm left full passes off"


def test_run_imports_and_starts_without_full_collections_and_is_given_their_restore(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import scheduler.k8s.run as run

    young, middle, _ = THRESHOLDS
    seen: list[tuple[int, int, int]] = []

    def main(args: argparse.Namespace) -> int:
        assert gc.isenabled()  # the young passes go on
        seen.append(gc.get_threshold())
        args.restore_collector()  # as the run does once its kernels are warm and frozen
        seen.append(gc.get_threshold())
        gc.set_threshold(5000, 50, 5)  # the command's own choice since then is kept
        return 0

    monkeypatch.setattr(run, "main", main)
    try:
        assert cli.main(["run", "--kubeconfig", "/nonexistent"]) == 0
        assert seen[0][:2] == (young, middle) and seen[0][2] > 1_000_000
        assert seen[1] == THRESHOLDS
        assert gc.get_threshold() == (5000, 50, 5)
    finally:
        gc.set_threshold(*THRESHOLDS)
    # Other commands leave the collector as it is.
    assert cli.main(["node-topology", "--from-nvidia-smi", str(SAMPLES / "nvlink-pairs-4gpu.txt")]) == 0
    assert gc.get_threshold() == THRESHOLDS and gc.isenabled()


def _one_line(err: str) -> str:
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    ("words", "says"),
    [
        (["bench", "kernels", "--nodes", "-5"], "argument --nodes: -5 is outside 1..1000000"),
        (["bench", "kernels", "--nodes", "0"], "argument --nodes: 0 is outside 1..1000000"),
        (["bench", "kernels", "--nodes", "5000000000"], "argument --nodes: 5000000000 is outside"),
        (["bench", "kernels", "--pods", "x"], "argument --pods: 'x' is not a whole number"),
        (["bench", "kernels", "--repeat", "0"], "argument --repeat: 0 is outside 1..1000"),
        (["bench", "kernels", "--nodes", "2.5"], "argument --nodes: '2.5' is not a whole number"),
        (["bench"], "the following arguments are required: WHAT"),
        (["node-topology"], "the following arguments are required: --from-nvidia-smi"),
        (["simulate", "--colour", "red"], "unrecognized arguments: --colour red"),
        (["simulate", "--tune", "lots"], "argument --tune: invalid float value: 'lots'"),
        (["nope"], "argument COMMAND: invalid choice: 'nope'"),
        (["run", "--scheduler-name", " "], "argument --scheduler-name: ' ' is not a scheduler name"),
        ([], "the following arguments are required: COMMAND"),
    ],
)
def test_a_bad_command_line_is_one_line_and_exit_2(
    words: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.main(words)
    assert caught.value.code == 2
    err = _one_line(capsys.readouterr().err)
    assert says in err
    assert err.rstrip().endswith("--help)")  # and where to read more


def test_bench_refuses_a_count_below_one_when_called_directly() -> None:
    from scheduler.kernels import bench

    with pytest.raises(ValueError, match="nodes must be at least 1, not -5"):
        bench.run(nodes=-5)


def test_help_imports_no_command_so_it_answers_at_once() -> None:
    # `gpusched --help` took 1.6-3.2 s when it imported every command; the heavy modules must stay unloaded.
    code = (
        "import sys\n"
        "from scheduler import cli\n"
        "try:\n"
        "    cli.main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('numpy', 'numba', 'matplotlib', 'kopf', 'kubernetes_asyncio', 'scheduler.sim', 'scheduler.k8s',"
        " 'scheduler.core')\n"
        "print('LOADED', sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "LOADED []" in done.stdout
    for command in ("run", "explain", "simulate", "trace", "bench", "node-topology"):
        assert command in done.stdout


def _help(*words: str) -> str:
    with pytest.raises(SystemExit):
        cli.main([*words, "--help"])
    return ""


@pytest.mark.parametrize(
    ("words", "shown"),
    [
        (["simulate"], ["(default: 1.3)", "(default: 42-44; 42 with --scenario topology)"]),
        (["bench", "kernels"], ["(default: 10000)", "(default: 20)", "(default: 3)"]),
        (["run"], ["(default: gpusched-system)", "(default: gpusched)", "(default: 8080)", "(default: 8081)"]),
        (["run"], ["--log-format {auto,json,console}", "(default: auto)"]),
        (["explain"], ["the pod's or PodGroup's namespace (default: default)"]),
        (["trace"], ["(default: $GPUSCHED_TRACE_DIR, else"]),
    ],
)
def test_every_option_shows_its_default(words: list[str], shown: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    _help(*words)
    text = " ".join(capsys.readouterr().out.split())
    for part in shown:
        assert part in text


def test_the_help_names_every_target_explain_takes(capsys: pytest.CaptureFixture[str]) -> None:
    _help()
    listed = " ".join(capsys.readouterr().out.split())
    assert "podgroup/NAME" in listed and "queue/NAME" in listed
    _help("explain")
    own = " ".join(capsys.readouterr().out.split())
    assert "podgroup/NAME" in own and "queue/NAME" in own


@pytest.mark.parametrize("command", ["run", "explain", "simulate", "trace", "bench", "node-topology"])
def test_every_command_says_what_it_is_for(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    _help(command)
    usage, description = capsys.readouterr().out.split("\n\n")[:2]
    assert usage.startswith(f"usage: gpusched {command}")
    assert len(description.split()) >= 5


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"gpusched {scheduler.__version__}\n"


def test_version_answers_without_loading_a_command() -> None:
    # As a user types it (the `gpusched` script calls main): one line, and nothing heavy imported to say it.
    code = (
        "import sys; from scheduler import cli\n"
        "try:\n    cli.main(['--version'])\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
        "print('LOADED', sorted(m for m in ('numba', 'kopf', 'scheduler.k8s', 'scheduler.sim') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == f"gpusched {scheduler.__version__}\nLOADED []\n"
    assert Version(scheduler.__version__) >= Version("0.1.0")  # a PEP 440 version, as pip and the image tag need
