"""Start-up to first bind of `gpusched run` on a cluster that already holds 10,000 bound pods on 1,000 nodes.

What a restart costs: the operator must list every node, pod, PodGroup and Queue (and count every bound pod on
its node) before its first decision. On a LocalCluster (etcd, kube-apiserver, controller manager, kwok on this
machine) the script creates ``--nodes`` kwok GPU nodes (8 GPUs each) and ``--pods`` pods already bound to them
(``spec.nodeName`` set at creation: 6 one-GPU pods and 4 CPU-only pods per node), waits for kwok to run them
(``--no-kwok``: no kwok and no controller manager, the pods stay Pending on their nodes and count the same),
creates one pending 2-GPU pod for gpusched, then starts ``gpusched run`` as a subprocess and times:

- ready: process start to ``/readyz`` answering 200 (the first full listing is in the cache);
- first bind: process start to the pending pod having ``spec.nodeName`` (read by polling the API server);
- peak memory: the process's VmHWM once that pod is bound;
- CPU: the process's CPU seconds (user + system, ``/proc/PID/stat``) when the bind is seen, which says more than
  the wall clock on a machine that other jobs share.

``--runs N`` restarts ``gpusched run`` N times on the same kept-up cluster, each time with a new pending pod (the
pods bound by the runs before stay, a handful more on 10,000), and prints every run and the medians.
``--checkout DIR`` runs the ``scheduler`` package of another source tree (a copy of another commit); given twice or
more, the trees take turns on the same cluster (run 1 of each, then run 2 of each...), so that a before/after pair
shares the cluster and whatever else the machine was doing, and the medians are printed per tree.

Each tree's ``scheduler`` package is byte-compiled first (``python -m compileall``, into its ``__pycache__``), as
the operator image's build does: a source checkout under ``PYTHONDONTWRITEBYTECODE=1`` (this machine's setting)
would otherwise compile gpusched's modules at every start, about 0.2 s of CPU that no deployment pays.
``--no-compileall`` leaves the trees as they are (how this script measured before 2026-11-28 16:40 UTC).

The 5,000-node start-up and its peak RSS: ``--nodes 5000 --pods 90000 --no-kwok`` (18 bound pods a node, as
benchmarks/scale.py has; without kwok, which would spend the two cores making 90,000 pods Running).

``GPUSCHED_BENCH_PROFILE=DIR`` runs each start under ``benchmarks.cpu_profile`` (``DIR/<pod name>.stacks`` and
``.stacks.txt``: where the process's CPU went until it was stopped, just after the first bind).

Run: ``.venv/bin/python -m benchmarks.startup [--nodes 1000 --pods 10000] [--runs 5]`` (needs the control-plane
binaries, see tests/e2e).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks import harness, proc_cpu
from scheduler.k8s import client as k8s
from tests.e2e.localcluster import GPU_RESOURCE, LocalCluster, free_port

GPUSCHED = (sys.executable, "-m", "scheduler.cli", "run", "--log-format", "json")


def _node(name: str, gpus: int) -> dict[str, Any]:
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def _pod(name: str, *, node: str = "", gpus: int = 0, scheduler: str = "default-scheduler") -> dict[str, Any]:
    limits = {GPU_RESOURCE: str(gpus)} if gpus else {}
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/app:latest",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": limits},
            }
        ],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


async def _create_all(client: k8s.Client, bodies: list[tuple[str, dict[str, Any]]], concurrency: int = 48) -> None:
    slots = asyncio.Semaphore(concurrency)

    async def one(kind: str, body: dict[str, Any]) -> None:
        async with slots:
            for _ in range(5):
                if kind == "node":
                    answer = await client.call(client.core.create_node, body=body)
                else:
                    answer = await client.call(client.core.create_namespaced_pod, namespace="default", body=body)
                if answer.ok or answer.status == 409:
                    return
                await asyncio.sleep(0.5)
            raise RuntimeError(f"cannot create {kind}: {answer.status} {answer.message}")

    await asyncio.gather(*(one(kind, body) for kind, body in bodies))


async def _populate(kubeconfig: str, nodes: int, pods: int) -> None:
    client = await k8s.connect(k8s.ClientSettings(kubeconfig=kubeconfig, qps=0, connections=64))
    try:
        await _create_all(client, [("node", _node(f"gpu-{i}", 8)) for i in range(nodes)])
        per_node = max(1, pods // nodes)
        bodies = []
        for i in range(pods):
            node, slot = divmod(i, per_node)
            bodies.append(("pod", _pod(f"run-{i}", node=f"gpu-{node % nodes}", gpus=1 if slot < 6 else 0)))
        await _create_all(client, bodies)
    finally:
        await client.close()


def http_status(url: str) -> int:
    """The HTTP status of a GET of ``url`` (0: no answer within a second); also used by benchmarks/scale.py."""
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--bin-dir", default=os.environ.get("GPUSCHED_E2E_BIN"))
    parser.add_argument("--log", help="keep the operator's log here")
    parser.add_argument(
        "--no-kwok",
        dest="kwok",
        action="store_false",
        help="no kwok and no controller manager: nodes stay as created, bound pods stay Pending (still counted)",
    )
    parser.add_argument("--kwok-wait", type=float, default=900, help="seconds to wait for kwok to run the pods")
    parser.add_argument("--runs", type=int, default=1, help="start gpusched this many times on the same cluster")
    parser.add_argument(
        "--checkout",
        type=Path,
        action="append",
        help="run the scheduler package of this source tree (a copy of another commit); twice or more: the trees "
        "take turns, run by run, on the same cluster (default: this tree)",
    )
    parser.add_argument(
        "--no-compileall",
        dest="compileall",
        action="store_false",
        help="do not byte-compile the trees first (each start then compiles gpusched's modules: see above)",
    )
    args = parser.parse_args()
    checkouts: list[Path] = args.checkout or [harness.REPO]
    if args.compileall:
        for checkout in checkouts:
            harness.byte_compile(checkout)
    cluster_options = {} if args.kwok else harness.without_kubelets(not_ready_taint=True)
    with LocalCluster(bin_dir=args.bin_dir, verbose=False, **cluster_options) as cluster:
        cluster.kubectl("apply", "-f", str(harness.REPO / "crds"))
        for crd in ("podgroups", "queues", "topologies"):
            cluster.kubectl("wait", "--for=condition=established", "--timeout=60s", f"crd/{crd}.scheduling.gpusched.io")
        cluster.request("POST", "/api/v1/namespaces", {"metadata": {"name": "gpusched-system"}})
        started = time.monotonic()
        asyncio.run(_populate(str(cluster.kubeconfig), args.nodes, args.pods))
        print(f"created {args.nodes} nodes and {args.pods} bound pods in {time.monotonic() - started:.1f}s")
        if args.kwok:
            # Let kwok take the pods to Running, so that its status writes do not land during the measurement.
            deadline = time.monotonic() + args.kwok_wait
            while time.monotonic() < deadline:
                listing = cluster.request("GET", "/api/v1/pods?fieldSelector=status.phase!=Running&limit=1")
                if not listing["items"]:
                    break
                time.sleep(2)
            left = cluster.request("GET", "/api/v1/pods?fieldSelector=status.phase!=Running&limit=1")
            waiting = len(left["items"]) + int(left["metadata"].get("remainingItemCount") or 0)
            print(f"{waiting} pods not Running yet after {time.monotonic() - started:.1f}s")
        runs: dict[Path, list[tuple[float, float, float, float]]] = {checkout: [] for checkout in checkouts}
        for run in range(args.runs):
            for index, checkout in enumerate(checkouts):
                name = f"first-{run}" if args.runs > 1 else "first"
                measured = _start_once(cluster, args, checkout, name=f"{name}-{index}" if len(checkouts) > 1 else name)
                if measured is None:
                    print(f"the pending pod was not bound within 300 s ({checkout})")
                    return 1
                runs[checkout].append(measured)
                if args.runs > 1 or len(checkouts) > 1:
                    ready, bound, peak, cpu = measured
                    print(
                        f"  run {run + 1}{f' of {checkout}' if len(checkouts) > 1 else ''}: ready {ready:.2f} s, "
                        f"first bind {bound:.2f} s, peak RSS {peak:.0f} MiB, CPU {cpu:.2f} s"
                    )
        for checkout, measured_runs in runs.items():
            print(
                f"gpusched run{f' of {checkout}' if len(checkouts) > 1 else ''} with {args.nodes} nodes and "
                f"{args.pods} existing pods"
                + (f", median of {len(measured_runs)} runs:" if len(measured_runs) > 1 else ":")
            )
            ready = statistics.median(r[0] for r in measured_runs)
            bound = statistics.median(r[1] for r in measured_runs)
            peak = statistics.median(r[2] for r in measured_runs)
            cpu = statistics.median(r[3] for r in measured_runs)
            print(f"  process start -> ready (full listing in the cache): {ready:.2f} s")
            print(f"  process start -> first bind:                        {bound:.2f} s")
            print(f"  peak RSS (VmHWM) at the first bind:                 {peak:.0f} MiB")
            print(f"  CPU seconds of the process at the first bind:       {cpu:.2f} s")
    return 0


def _start_once(
    cluster: LocalCluster, args: argparse.Namespace, checkout: Path, *, name: str
) -> tuple[float, float, float, float] | None:
    """Create the pending pod ``name``, start ``gpusched run``, and time it: (ready s, first bind s, VmHWM MiB, CPU s),
    or None when the pod was not bound within 300 s. The process is stopped before returning."""
    first = _pod(name, gpus=2, scheduler="gpusched")
    if not args.kwok:
        # The API server taints new nodes not-ready; without kwok nothing makes them Ready.
        first["spec"]["tolerations"] = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]
    cluster.request("POST", "/api/v1/namespaces/default/pods", first)
    health = free_port()
    log = open(args.log, "a") if args.log else tempfile.TemporaryFile("w")  # noqa: SIM115
    argv = [*GPUSCHED, "--kubeconfig", str(cluster.kubeconfig), "--health-port", str(health), "--metrics-port", "0"]
    profiled = harness.profiled_cli(name)  # of the same tree, as the working directory below
    if profiled is not None:
        argv = [*profiled, *argv[3:]]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=checkout,  # `-m scheduler.cli` imports the package from the working directory first
    )
    ready = bound = None
    peak = cpu = 0.0
    try:
        while time.monotonic() - t0 < 300 and bound is None:
            if ready is None and http_status(f"http://127.0.0.1:{health}/readyz") == 200:
                ready = time.monotonic() - t0
            pod = cluster.get_pod("default", name)
            if pod["spec"].get("nodeName"):
                bound = time.monotonic() - t0
                peak = _peak_rss_mib(proc.pid)
                cpu = proc_cpu.cpu_seconds(proc.pid)
                break
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
    if bound is None:
        return None
    # The bind can be seen before /readyz is polled again; ready is then no later than the bind.
    return (bound if ready is None else ready), bound, peak, cpu


def _peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory (VmHWM) in MiB; 0 where /proc does not tell."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


if __name__ == "__main__":
    sys.exit(main())
