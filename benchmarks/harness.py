"""What the benchmarks share, so that each script holds only its own measurement: where things are, the argument
conventions (comma-separated names, ``--json``), the Markdown tables they print, timing by the best of rounds, the
Alibaba trace, and the start of a local cluster for one scheduler.

Imported as ``benchmarks.harness`` (run the scripts with ``python -m benchmarks.NAME``). The cluster helpers import
the e2e suite's modules (``tests.e2e.kube``) only when called, so that the in-process benchmarks need neither the
control plane nor its Python dependencies.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler.sim.trace import NodeSpec, PodSpec
    from tests.e2e import kube
    from tests.e2e.localcluster import LocalCluster

#: The repository's root.
REPO = Path(__file__).resolve().parents[1]
#: The shared data beside the repository (traces and the FGD paper's reference results).
SHARED = REPO.parent / "shared"
#: The Alibaba GPU trace of 2023 (``gpusched trace`` downloads it).
TRACE = SHARED / "traces" / "alibaba-gpu-v2023"
#: The simulator's documentation, whose marked sections the trace benchmarks rewrite with ``--doc``.
SIMULATOR_DOC = REPO / "docs" / "simulator.md"


# --- arguments ---------------------------------------------------------------------------------------------------


def names(text: str) -> list[str]:
    """A comma-separated list (``--cases a,b``), blanks left out."""
    return [name.strip() for name in text.split(",") if name.strip()]


def chosen(parser: argparse.ArgumentParser, text: str, known: Sequence[str], *, what: str = "case") -> list[str]:
    """The names of ``text`` (comma-separated), each one of ``known``; an unknown one is the parser's error."""
    picked = names(text)
    if unknown := [name for name in picked if name not in known]:
        parser.error(f"unknown {what}(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    return picked


def add_json(parser: argparse.ArgumentParser, help: str = "write the figures here") -> None:
    parser.add_argument("--json", type=Path, help=help)


def write_json(path: Path | None, data: Any) -> None:
    """``data`` as indented JSON into ``path`` (None: nowhere); what JSON cannot hold is written as its text."""
    if path is not None:
        path.write_text(json.dumps(data, indent=2, default=str) + "\n")


# --- tables and timing -------------------------------------------------------------------------------------------


def markdown_table(head: Sequence[str], rows: Iterable[Sequence[object]], *, align: str) -> str:
    """A Markdown table: ``align`` says per column ``l`` (text) or ``r`` (figures, right-aligned)."""
    assert len(align) == len(head), (head, align)
    lines = ["| " + " | ".join(head) + " |", "|" + "".join("---|" if a == "l" else "---:|" for a in align)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(re.sub(r"\|  (?=\|)", "| ", line) for line in lines)


def note_row(first: str, note: str, columns: int) -> list[str]:
    """A table row with only its first cell and a note in its last (a case that did not run, and why)."""
    return [first, *[""] * (columns - 2), note]


def best_us(
    run: Callable[[], object], cycles: int, rounds: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    """The best of ``rounds`` rounds of ``cycles`` runs, in microseconds per run on ``clock`` (``time.process_time``:
    this process's CPU time, which other work on a shared machine does not inflate as it does the wall clock's)."""
    best = float("inf")
    for _ in range(rounds):
        started = clock()
        for _ in range(cycles):
            run()
        best = min(best, (clock() - started) / cycles * 1e6)
    return best


# --- the Alibaba trace -------------------------------------------------------------------------------------------


def trace_nodes() -> list[NodeSpec]:
    from scheduler.sim import trace

    return trace.load_nodes(TRACE / "openb_node_list_gpu_node.csv")


def trace_pods(name: str) -> list[PodSpec]:
    """Pod list ``name`` of the trace (``default``, ``multigpu40``...)."""
    from scheduler.sim import trace

    return trace.load_pods(TRACE / f"openb_pod_list_{name}.csv")


def trace_lists(text: str = "") -> list[str]:
    """The pod lists named in ``text`` (comma-separated), or, when it names none, every list of the trace."""
    return names(text) or sorted(p.stem.removeprefix("openb_pod_list_") for p in TRACE.glob("openb_pod_list_*.csv"))


def write_doc(text: str, begin: str, end: str, doc: Path = SIMULATOR_DOC) -> None:
    """Put ``text`` between the markers ``begin`` and ``end`` of ``doc``, in place of what was there."""
    old = doc.read_text()
    if begin not in old or end not in old:
        raise SystemExit(f"{doc} has no {begin} ... {end} section to write into")
    head, rest = old.split(begin, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(f"{head}{begin}\n{text}\n{end}{tail}")


# --- local clusters ----------------------------------------------------------------------------------------------


def gpusched_missing() -> str | None:
    """None if ``gpusched run`` can start in this checkout, else the sentence a case that needs it reports."""
    from tests.e2e import kube

    missing = kube.gpusched_run_available()
    return None if missing is None else f"`gpusched run` is not available in this checkout ({missing})"


def kube_scheduler(qps: float, burst: int, *, deferred: bool = True) -> dict[str, Any]:
    """LocalCluster options for the control plane's own kube-scheduler with client ``qps`` and ``burst``;
    ``deferred``: started by the benchmark (``cluster.start_scheduler()``), once its workload is in place."""
    return {"with_scheduler": True, "defer_scheduler": deferred, "scheduler_qps": qps, "scheduler_burst": burst}


def without_kubelets(*, not_ready_taint: bool = False) -> dict[str, Any]:
    """LocalCluster options for nodes that are only API objects: no kwok, no controller manager (with no kubelet,
    its node lifecycle controller would taint every node unreachable after 40 s) and, unless ``not_ready_taint``,
    no TaintNodesByCondition admission, which would give each new node the not-ready taint a Ready node lacks.
    (LocalCluster's own flag turns ServiceAccount admission off; this one comes later and wins.)"""
    options: dict[str, Any] = {"with_kwok": False, "with_controller_manager": False}
    if not not_ready_taint:
        options["extra_apiserver_args"] = ["--disable-admission-plugins=ServiceAccount,TaintNodesByCondition"]
    return options


def for_gpusched(cluster: LocalCluster) -> kube.Kube:
    """The client of ``cluster`` with what ``gpusched run`` needs there: its CRDs and its namespace."""
    from tests.e2e import kube

    k = kube.Kube.of_local(cluster)
    k.apply_crds()
    k.ensure_namespace(kube.SYSTEM_NAMESPACE)
    return k


def gpusched(
    k: kube.Kube,
    *,
    identity: str = "bench",
    qps: float | None = None,
    burst: int = 0,
    workdir: Path | None = None,
    profile_as: str = "",
) -> kube.Gpusched:
    """A ``gpusched run`` replica for ``k``'s cluster, not started yet; with ``qps``, it binds 64 pods at a time at
    that client QPS and ``burst`` (without, at its defaults).

    With ``GPUSCHED_BENCH_PROFILE=DIR`` in the environment it runs under ``benchmarks.cpu_profile``, which writes
    where its CPU went to ``DIR/<profile_as or identity>.stacks`` (and ``.stacks.txt``) when it stops."""
    from tests.e2e import kube as e2e_kube

    byte_compile()
    config = None if qps is None else {"binding": {"concurrency": 64, "qps": qps, "burst": int(burst)}}
    where = workdir or e2e_kube.scenario_workdir()
    profiled = profiled_cli(profile_as or identity)
    if profiled is None:
        return e2e_kube.Gpusched(k, identity=identity, workdir=where, config=config)

    class Profiled(e2e_kube.Gpusched):
        """``gpusched run`` as ``python -m benchmarks.cpu_profile OUT scheduler.cli run ...``."""

        @property
        def argv(self) -> list[str]:
            return [*profiled, *super().argv[len(e2e_kube.gpusched_command()) :]]

    return Profiled(k, identity=identity, workdir=where, config=config)


def byte_compile(checkout: Path | None = None) -> None:
    """Byte-compile the ``scheduler`` package of ``checkout`` (by default the one this process imports, which the
    ``gpusched run`` it starts imports too: the same ``sys.path``) into its ``__pycache__``, as the operator image's
    build does (Dockerfile, ``compileall``). A source checkout under ``PYTHONDONTWRITEBYTECODE=1`` (this machine's
    setting, and CI's) has none, so each start would compile gpusched's modules again: 0.17 to 0.25 s of CPU that no
    deployment pays, counted into every figure of CPU per pod. Files already compiled are left as they are."""
    if checkout is None:
        import scheduler

        package = Path(scheduler.__file__).resolve().parent
    else:
        package = checkout.resolve() / "scheduler"
    if not compileall.compile_dir(str(package), quiet=1):
        raise RuntimeError(f"byte-compiling {package} failed")


def profiled_cli(name: str) -> list[str] | None:
    """With ``GPUSCHED_BENCH_PROFILE=DIR`` in the environment, the command that stands for ``python -m
    scheduler.cli`` and runs it under ``benchmarks.cpu_profile``, which writes where its CPU went to
    ``DIR/NAME.stacks`` (and ``.stacks.txt``) when it stops; without, None."""
    profile_dir = os.environ.get(PROFILE_ENV)
    if not profile_dir:
        return None
    out = Path(profile_dir).resolve() / f"{name}.stacks"
    out.parent.mkdir(parents=True, exist_ok=True)
    return [sys.executable, "-m", "benchmarks.cpu_profile", str(out), "scheduler.cli"]


#: The environment variable that runs the benchmarks' ``gpusched run`` under ``benchmarks.cpu_profile``.
PROFILE_ENV = "GPUSCHED_BENCH_PROFILE"
