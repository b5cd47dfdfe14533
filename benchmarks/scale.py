"""gpusched at scale: start-up, memory, pods/s and cycle time on a cluster of thousands of nodes and 100,000 pods.

For each size in ``--sizes`` (nodes), a fresh LocalCluster (tests/e2e/localcluster.py) gets:

- ``nodes`` GPU nodes of 8 GPUs (tests/e2e/kube.py's ``gpu_node``: 64 CPUs, 512 GiB, 110 pods, racks of 16);
- ``--running-per-node`` running pods per node (18 by default), bound at creation (``spec.nodeName``), as
  benchmarks/startup.py does, in namespace ``running``. Per node: 3 whole-GPU pods on GPUs 0, 1, 2, 4 half-GPU
  pods (``gpusched.io/gpu-milli: 500``) two on GPU 3 and two on GPU 4, and the rest CPU-only, each with the
  ``gpusched.io/gpu-ids`` gpusched would have written. That takes 5 of the node's 8 GPUs and leaves 3 free;
- ``--pending-per-node`` pending one-GPU pods per node for gpusched (2 by default, so the cluster ends at 7 of 8
  GPUs allocated), in namespace ``bench``: a ``--gang-share`` of them (half by default) in gangs of
  ``--gang-size`` (8) with a PodGroup each, the rest single pods;
- four Queues (``team-a`` .. ``team-d``, weight 1, no quota); the running pods, single pods and PodGroups are
  dealt round-robin over them.

Every object is created before gpusched starts (by an asynchronous creator, ``--concurrency`` requests in
flight; the setup is timed too), then ``gpusched run`` starts as a subprocess (tests/e2e/kube.py's ``Gpusched``,
binding concurrency 64, client QPS 1000 / burst 2000 as in benchmarks/e2e_throughput.py) and the script reports,
from the moment the process is spawned:

- ready: ``/readyz`` answering 200 (polled every 50 ms); first bind and last bind of the pending pods (a watch on
  ``bench``, benchmarks/e2e_throughput.py's ``BindWatch``);
- pods/s of the pending pods: bound / (last bind - process start), and bound / (last bind - first bind);
- memory of the ``gpusched run`` process: VmHWM (peak resident set) and VmRSS from /proc/PID/status, read
  once every pod is bound (or the wait ended); the API server's and etcd's RSS at the same moment;
- one scheduling cycle: ``gpusched_scheduling_cycle_duration_seconds`` from ``/metrics`` read at the end: its
  mean (sum / count) and p50 / p99 interpolated inside the histogram's buckets, as Prometheus'
  ``histogram_quantile`` does (so a quantile is only as precise as the buckets around it). A cycle is one
  pod or one whole gang.

With them: the seconds the setup took (control plane, nodes, running pods, PodGroups and pending pods), the
machine's least available memory (/proc/meminfo) and its 1-minute load average, sampled every 2 s while the size
runs, and a check that gpusched counted the running pods: the nodes given more pending GPUs than the running pods
left free (0 when it did).

Kwok is off by default (``--kwok`` turns it and the controller manager on): gpusched counts a bound pod on its
node whatever its phase, so the cluster it sees is the same, and on a 2-core machine kwok would otherwise write
a status for each of the 90,000 running pods and heartbeat 5,000 nodes, doubling the writes of the setup and
competing with gpusched for the CPU during the measurement. Without kwok the nodes never turn Ready, and the
API server's TaintNodesByCondition admission would taint each one ``node.kubernetes.io/not-ready``: it is turned
off, so that the nodes carry no taint, as Ready nodes do not (``--not-ready-taint`` keeps it, and the pending pods
tolerate it: every node then costs fit a taint check in each cycle).

``--sim-nodes`` / ``--sim-arrivals``: the simulator at scale: the ``default`` policy (the operator's profile)
on scheduler/sim/synthetic.py's cluster of that many nodes and its workload of that many arrivals, through
scheduler/sim/engine.py's ``run_arrivals`` (the same code ``gpusched simulate`` runs); decisions/s is arrivals
over the wall time of the run (kernels compiled beforehand, as the command does).

    .venv/bin/python -m benchmarks.scale --sizes 1000,2500,5000 --sim-nodes 10000 --sim-arrivals 100000 \\
        --json /tmp/scale.json
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import math
import os
import re
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import e2e_throughput, harness, startup
from tests.e2e import kube
from tests.e2e.localcluster import LocalCluster

#: The pending pods live here: e2e_throughput's BindWatch watches this namespace.
PENDING_NAMESPACE = e2e_throughput.NAMESPACE
RUNNING_NAMESPACE = "running"
QUEUES = ("team-a", "team-b", "team-c", "team-d")
CYCLE_METRIC = "gpusched_scheduling_cycle_duration_seconds"
NOT_READY = {"key": "node.kubernetes.io/not-ready", "operator": "Exists"}
#: What each node runs before gpusched starts: (whole GPUs, gpu-milli, GPU ids) per running pod, in order; the
#: pods past this list are CPU-only.
RUNNING_SHAPES = ((1, 0, "0"), (1, 0, "1"), (1, 0, "2"), (0, 500, "3"), (0, 500, "3"), (0, 500, "4"), (0, 500, "4"))
GPUS_TAKEN_BY_RUNNING = 5


@dataclass
class SizeResult:
    nodes: int
    running: int
    pending: int
    gangs: int
    setup_s: dict[str, float] = field(default_factory=dict)
    bound: int = 0
    ready_s: float = math.nan
    first_bind_s: float = math.nan
    last_bind_s: float = math.nan
    pods_per_s_from_start: float = math.nan
    pods_per_s_from_first_bind: float = math.nan
    peak_rss_mib: float = math.nan
    end_rss_mib: float = math.nan
    apiserver_rss_mib: float = math.nan
    etcd_rss_mib: float = math.nan
    cycles: int = 0
    cycle_mean_ms: float = math.nan
    cycle_p50_ms: float = math.nan
    cycle_p99_ms: float = math.nan
    attempts: dict[str, float] = field(default_factory=dict)
    load: dict[str, list[float]] = field(default_factory=dict)
    min_available_gib: float = math.nan
    overcommitted_nodes: int = -1
    #: Seconds spent in each plugin at each extension point in the sampled cycles (one in ten) of the run
    #: (``plugin/point``), from /metrics.
    plugin_seconds: dict[str, float] = field(default_factory=dict)
    #: Seconds from the process spawn to events of gpusched's own log (its clock, read from its timestamps).
    phases: dict[str, float] = field(default_factory=dict)
    note: str = ""


# --------------------------------------------------------------------------------------------------------------
# the workload


def running_pod(index: int, node: str, slot: int) -> dict[str, Any]:
    """The ``slot``-th running pod of ``node``, bound there at creation with the GPU ids gpusched would write."""
    queue = QUEUES[index % len(QUEUES)]
    if slot < len(RUNNING_SHAPES):
        gpus, milli, ids = RUNNING_SHAPES[slot]
        manifest = kube.pod(f"run-{index:06d}", gpus=gpus, gpu_milli=milli or None, queue=queue)
        manifest["metadata"]["annotations"][kube.ANNOTATION_GPU_IDS] = ids
    else:
        manifest = kube.pod(f"run-{index:06d}", queue=queue)
    manifest["spec"]["nodeName"] = node
    return manifest


def pending_workload(
    count: int, *, gang_share: float, gang_size: int, tolerate_not_ready: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(PodGroups, pods): ``count`` one-GPU pods, ``gang_share`` of them in gangs, dealt over the queues."""
    gangs = int(count * gang_share) // gang_size
    groups: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for g in range(gangs):
        name = f"gang-{g:05d}"
        groups.append(kube.podgroup(name, min_member=gang_size, queue=QUEUES[g % len(QUEUES)]))
        pods += [kube.pod(f"{name}-{m}", gpus=1, group=name) for m in range(gang_size)]
    for i in range(count - gangs * gang_size):
        pods.append(kube.pod(f"pod-{i:06d}", gpus=1, queue=QUEUES[i % len(QUEUES)]))
    if tolerate_not_ready:
        for manifest in pods:
            manifest["spec"]["tolerations"] = [dict(NOT_READY)]
    return groups, pods


# --------------------------------------------------------------------------------------------------------------
# reading the process and its metrics


def proc_status_mib(pid: int | None, key: str) -> float:
    """``key`` (VmRSS, VmHWM) of a process from /proc/PID/status, in MiB; NaN if it cannot be read."""
    if pid is None:
        return math.nan
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return math.nan
    found = re.search(rf"^{key}:\s+(\d+) kB", text, re.MULTILINE)
    return int(found.group(1)) / 1024 if found else math.nan


def available_gib() -> float:
    found = re.search(r"^MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
    return int(found.group(1)) / 2**20 if found else math.nan


def histogram(text: str, name: str) -> tuple[list[tuple[float, float]], float, float]:
    """A Prometheus histogram from exposition text: ([(upper bound, cumulative count)], sum, count)."""
    buckets: list[tuple[float, float]] = []
    total = count = math.nan
    for line in text.splitlines():
        if line.startswith(name + "_bucket{"):
            bound = re.search(r'le="([^"]+)"', line)
            if bound is not None:
                buckets.append((float(bound.group(1)), float(line.rsplit(" ", 1)[1])))
        elif line.startswith(name + "_sum "):
            total = float(line.rsplit(" ", 1)[1])
        elif line.startswith(name + "_count "):
            count = float(line.rsplit(" ", 1)[1])
    return sorted(buckets), total, count


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' ``histogram_quantile``: linear inside the bucket the rank falls in, the first bucket from 0,
    and the largest finite bound when the rank falls in +Inf."""
    if not buckets or buckets[-1][1] <= 0:
        return math.nan
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, cumulative in buckets:
        if cumulative >= rank:
            if math.isinf(bound):
                return lower_bound
            if cumulative == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (cumulative - lower_count)
        lower_bound, lower_count = bound, cumulative
    return buckets[-1][0]


def counter_by_label(text: str, name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(name + "_total{"):
            value = re.search(rf'{label}="([^"]*)"', line)
            if value is not None:
                out[value.group(1)] = float(line.rsplit(" ", 1)[1])
    return out


#: Events of gpusched's log that mark its start-up, and the names the report gives them.
PHASES = {
    "api client ready": "client",
    "kernels ready": "kernels",
    "leadership": "leader",
    "cache warm": "cache_warm",
}


def log_phases(path: Path, wall0: float) -> dict[str, float]:
    """Seconds from ``wall0`` to the first of each start-up event in the last start of a JSON log; also the
    seconds to the end of the pod listing (``listed`` with kind ``pods``)."""
    out: dict[str, float] = {}
    try:
        lines = path.read_text(errors="replace").split("===== start")[-1].splitlines()
    except OSError:
        return out
    for line in lines:
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
            at = datetime.datetime.fromisoformat(record["timestamp"]).timestamp() - wall0
        except (ValueError, KeyError):
            continue
        event = record.get("event")
        name = "pods_listed" if event == "listed" and record.get("kind") == "pods" else PHASES.get(str(event))
        if name is not None and name not in out:
            out[name] = at
    return out


def plugin_seconds(text: str) -> dict[str, float]:
    """``gpusched_plugin_duration_seconds_sum`` by ``plugin/extension_point``, largest first: where cycles go (in
    shares: gpusched times one cycle in ten, scheduler/k8s/serve/metrics.py's PLUGIN_SAMPLE)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("gpusched_plugin_duration_seconds_sum{"):
            plugin = re.search(r'plugin="([^"]*)"', line)
            point = re.search(r'extension_point="([^"]*)"', line)
            if plugin is not None and point is not None:
                out[f"{plugin.group(1)}/{point.group(1)}"] = float(line.rsplit(" ", 1)[1])
    return dict(sorted(out.items(), key=lambda item: -item[1]))


# --------------------------------------------------------------------------------------------------------------
# one size


async def create(api: e2e_throughput.Api, path: str, manifests: list[dict[str, Any]], concurrency: int) -> float:
    started = time.monotonic()
    await e2e_throughput.bounded(concurrency, [lambda m=m: api.post(path, m) for m in manifests])
    return time.monotonic() - started


async def populate(cluster: LocalCluster, result: SizeResult, args: argparse.Namespace) -> tuple[str, int]:
    """Create everything but gpusched; return the pending namespace's resourceVersion and the pods to bind."""
    api = e2e_throughput.Api(cluster, connections=args.concurrency + 8)
    try:
        for namespace in (PENDING_NAMESPACE, RUNNING_NAMESPACE):
            await api.post(
                "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            )
        for queue in QUEUES:
            await api.post(kube.Kube.custom_path("queues"), kube.queue(queue, weight=1))
        nodes = [
            kube.gpu_node(f"gpu-{i:05d}", gpus=8, rack=f"r{i // 16:04d}", block=f"b{i // 128:03d}")
            for i in range(result.nodes)
        ]
        result.setup_s["nodes"] = await create(api, "/api/v1/nodes", nodes, args.concurrency)
        log(f"{result.nodes} nodes in {result.setup_s['nodes']:.1f} s")
        running = [
            running_pod(i, f"gpu-{i // args.running_per_node:05d}", i % args.running_per_node)
            for i in range(result.running)
        ]
        result.setup_s["running_pods"] = await create(
            api, kube.Kube.pods_path(RUNNING_NAMESPACE), running, args.concurrency
        )
        del running
        log(f"{result.running} running pods in {result.setup_s['running_pods']:.1f} s")
        groups, pending = pending_workload(
            result.pending,
            gang_share=args.gang_share,
            gang_size=args.gang_size,
            tolerate_not_ready=args.not_ready_taint,
        )
        started = time.monotonic()
        await create(api, kube.Kube.custom_path("podgroups", PENDING_NAMESPACE), groups, args.concurrency)
        await create(api, kube.Kube.pods_path(PENDING_NAMESPACE), pending, args.concurrency)
        result.setup_s["pending_pods"] = time.monotonic() - started
        log(f"{len(groups)} PodGroups and {len(pending)} pending pods in {result.setup_s['pending_pods']:.1f} s")
        if args.kwok:
            started = time.monotonic()
            await wait_running(api, result.running, timeout=args.kwok_wait)
            result.setup_s["kwok_running"] = time.monotonic() - started
        listed = await api.get(kube.Kube.pods_path(PENDING_NAMESPACE), limit="1")
        return str(listed["metadata"]["resourceVersion"]), len(pending)
    finally:
        await api.close()


async def wait_running(api: e2e_throughput.Api, count: int, *, timeout: float) -> None:
    """Let kwok take the running pods to Running first, so that its status writes land before the clock starts."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        page = await api.get(kube.Kube.pods_path(RUNNING_NAMESPACE), fieldSelector="status.phase!=Running", limit="1")
        if not page["items"]:
            return
        await asyncio.sleep(2)
    log(f"kwok had not run all {count} running pods after {timeout:.0f} s; measuring anyway")


async def measure(
    cluster: LocalCluster,
    replica: kube.Gpusched,
    result: SizeResult,
    resource_version: str,
    expected: int,
    args: argparse.Namespace,
) -> None:
    api = e2e_throughput.Api(cluster, connections=8)
    watch = e2e_throughput.BindWatch(api, resource_version)
    watch.start()
    try:
        t0 = time.monotonic()
        wall0 = time.time()
        replica.start()
        assert replica.popen is not None
        pid = replica.popen.pid
        ready = f"http://127.0.0.1:{replica.health_port}/readyz"

        async def poll() -> None:
            # /readyz every 50 ms until it answers; a gpusched that died ends the wait at once.
            while True:
                if math.isnan(result.ready_s) and await asyncio.to_thread(startup.http_status, ready) == 200:
                    result.ready_s = time.monotonic() - t0
                if replica.popen is not None and replica.popen.poll() is not None:
                    raise RuntimeError(f"gpusched exited {replica.popen.returncode}:\n{replica.log_tail()}")
                await asyncio.sleep(0.05)

        poller = asyncio.create_task(poll())
        waiting = asyncio.create_task(watch.wait_for(expected, timeout=args.timeout))
        done, _ = await asyncio.wait({poller, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if poller in done:
            poller.result()
        poller.cancel()
        result.peak_rss_mib = proc_status_mib(pid, "VmHWM")
        result.end_rss_mib = proc_status_mib(pid, "VmRSS")
        result.apiserver_rss_mib = proc_status_mib(cluster.procs["kube-apiserver"].pid, "VmRSS")
        result.etcd_rss_mib = proc_status_mib(cluster.procs["etcd"].pid, "VmRSS")
        bound = watch.bound_at
        result.bound = len(bound)
        if bound:
            first, last = min(bound.values()), max(bound.values())
            result.first_bind_s, result.last_bind_s = first - t0, last - t0
            result.pods_per_s_from_start = len(bound) / (last - t0)
            if last > first:
                result.pods_per_s_from_first_bind = len(bound) / (last - first)
        if len(bound) < expected:
            result.note = f"only {len(bound)} of {expected} bound within {args.timeout:.0f} s"
        # Scraped after the last bind: the cycles of every pod are in, and no cycle of this run is left.
        text = await asyncio.to_thread(replica.metrics)
        buckets, total, count = histogram(text, CYCLE_METRIC)
        result.cycles = int(count) if not math.isnan(count) else 0
        if count:
            result.cycle_mean_ms = 1000 * total / count
            result.cycle_p50_ms = 1000 * histogram_quantile(0.50, buckets)
            result.cycle_p99_ms = 1000 * histogram_quantile(0.99, buckets)
        result.attempts = counter_by_label(text, "gpusched_schedule_attempts", "result")
        result.plugin_seconds = plugin_seconds(text)
        result.overcommitted_nodes = await overcommitted_nodes(api)
        result.phases = log_phases(replica.log_path, wall0)
    finally:
        watch.stop()
        await api.close()


async def overcommitted_nodes(api: e2e_throughput.Api) -> int:
    """Nodes given more pending pods than the GPUs the running pods left free: a sign that gpusched's cache did
    not count the running pods (bound but, without kwok, never Running) on their nodes."""
    per_node: dict[str, int] = {}
    token = ""
    while True:
        query = {"limit": "5000"} | ({"continue": token} if token else {})
        page = await api.get(kube.Kube.pods_path(PENDING_NAMESPACE), **query)
        for pod in page["items"]:
            node = kube.node_of(pod)
            if node:
                per_node[node] = per_node.get(node, 0) + kube.whole_gpus_of(pod)
        token = page["metadata"].get("continue") or ""
        if not token:
            break
    return sum(1 for used in per_node.values() if used > 8 - GPUS_TAKEN_BY_RUNNING)


class Sampler:
    """The machine's available memory and load, every 2 s in a thread, for as long as a size runs."""

    def __init__(self) -> None:
        self.available_gib: list[float] = []
        self.load1: list[float] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.available_gib.append(available_gib())
            self.load1.append(os.getloadavg()[0])
            self.stopping.wait(2.0)

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join()


def run_size(result: SizeResult, args: argparse.Namespace) -> None:
    """Fill ``result`` (partly, up to where it failed, if it raises)."""
    result.load["before"] = list(os.getloadavg())
    # Nodes without kwok never turn Ready: without --not-ready-taint they do not get the not-ready taint either (a
    # Ready node does not carry it, and fit checks it node by node).
    options = {} if args.kwok else harness.without_kubelets(not_ready_taint=args.not_ready_taint)
    started = time.monotonic()
    sampler = Sampler()
    try:
        with sampler, LocalCluster(bin_dir=args.bin_dir, verbose=False, **options) as cluster:
            result.setup_s["control_plane"] = time.monotonic() - started
            k = harness.for_gpusched(cluster)
            resource_version, expected = asyncio.run(populate(cluster, result, args))
            result.setup_s["total"] = time.monotonic() - started
            result.load["at_start"] = list(os.getloadavg())
            replica = harness.gpusched(k, identity="scale", qps=args.qps, burst=args.burst)
            try:
                asyncio.run(measure(cluster, replica, result, resource_version, expected, args))
            finally:
                replica.stop(timeout=30)
                log(f"gpusched log: {replica.log_path}")
            result.load["at_end"] = list(os.getloadavg())
    finally:
        result.min_available_gib = min(sampler.available_gib, default=math.nan)
        result.load["load1_samples_min_max"] = [
            min(sampler.load1, default=math.nan),
            max(sampler.load1, default=math.nan),
        ]


# --------------------------------------------------------------------------------------------------------------
# the simulator


def run_simulator(nodes: int, arrivals: int, seed: int) -> dict[str, Any]:
    from scheduler.framework import typical
    from scheduler.sim import engine, policies, synthetic

    cluster = synthetic.cluster(nodes)
    pods = synthetic.workload(arrivals, seed=seed)
    shapes = typical.typical_shapes([p.shape for p in pods])
    config = policies.build("default", shapes=shapes, seed=seed)
    # Compile the kernels first (numba caches them on disk), as gpusched simulate does.
    engine.run_arrivals(cluster[:4], pods[:8], config, shapes=shapes)
    load = os.getloadavg()
    run = engine.run_arrivals(cluster, pods, config, shapes=shapes)
    return {
        "nodes": nodes,
        "gpus": sum(n.gpus for n in cluster),
        "arrivals": arrivals,
        "placed": int(run.placed.sum()),
        "wall_s": run.wall_s,
        "decisions_per_s": arrivals / run.wall_s,
        "load_before": list(load),
        "load_after": list(os.getloadavg()),
    }


# --------------------------------------------------------------------------------------------------------------
# report


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S', time.gmtime())}] {message}", file=sys.stderr, flush=True)


def table(results: list[SizeResult]) -> str:
    rows = [
        ("nodes", lambda r: f"{r.nodes:,}"),
        ("running pods", lambda r: f"{r.running:,}"),
        ("pending pods (gangs of 8)", lambda r: f"{r.pending:,} ({r.gangs:,})"),
        ("pending bound", lambda r: f"{r.bound:,}"),
        ("setup: nodes + pods created (s)", lambda r: f"{r.setup_s.get('total', math.nan):.0f}"),
        ("start -> pods listed, per its log (s)", lambda r: f"{r.phases.get('pods_listed', math.nan):.1f}"),
        ("start -> cache warm, per its log (s)", lambda r: f"{r.phases.get('cache_warm', math.nan):.1f}"),
        ("start -> /readyz (s)", lambda r: f"{r.ready_s:.1f}"),
        ("start -> first bind (s)", lambda r: f"{r.first_bind_s:.1f}"),
        ("start -> last bind (s)", lambda r: f"{r.last_bind_s:.1f}"),
        ("pods/s from start", lambda r: f"{r.pods_per_s_from_start:.1f}"),
        ("pods/s from first bind", lambda r: f"{r.pods_per_s_from_first_bind:.1f}"),
        ("gpusched peak RSS (MiB)", lambda r: f"{r.peak_rss_mib:,.0f}"),
        ("gpusched RSS at the end (MiB)", lambda r: f"{r.end_rss_mib:,.0f}"),
        ("scheduling cycles", lambda r: f"{r.cycles:,}"),
        ("cycle mean (ms)", lambda r: f"{r.cycle_mean_ms:.2f}"),
        ("cycle p50 / p99 (ms, from buckets)", lambda r: f"{r.cycle_p50_ms:.2f} / {r.cycle_p99_ms:.1f}"),
        ("kube-apiserver / etcd RSS (MiB)", lambda r: f"{r.apiserver_rss_mib:,.0f} / {r.etcd_rss_mib:,.0f}"),
        ("machine: least memory available (GiB)", lambda r: f"{r.min_available_gib:.1f}"),
        (
            "machine: load average (1 min) seen",
            lambda r: "{:.1f} to {:.1f}".format(*r.load.get("load1_samples_min_max", (math.nan, math.nan))),
        ),
        ("nodes given more GPUs than they had free", lambda r: f"{r.overcommitted_nodes}"),
    ]
    lines = ["| | " + " | ".join(f"{r.nodes:,} nodes" for r in results) + " |"]
    lines.append("|---|" + "---:|" * len(results))
    for label, cell in rows:
        lines.append(f"| {label} | " + " | ".join(cell(r) for r in results) + " |")
    return "\n".join(lines)


def growth(results: list[SizeResult]) -> list[str]:
    """Each figure at the largest size over the smallest, next to the growth of the cluster itself."""
    if len(results) < 2:
        return []
    a, b = results[0], results[-1]
    out = [f"from {a.nodes:,} to {b.nodes:,} nodes ({b.nodes / a.nodes:.1f}x the nodes and pods):"]
    for label, key in (
        ("start -> /readyz", "ready_s"),
        ("start -> first bind", "first_bind_s"),
        ("pods/s from first bind", "pods_per_s_from_first_bind"),
        ("gpusched peak RSS", "peak_rss_mib"),
        ("cycle mean", "cycle_mean_ms"),
    ):
        x, y = getattr(a, key), getattr(b, key)
        out.append(f"  {label}: {y / x:.2f}x" if x else f"  {label}: n/a")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,2500,5000", help="comma-separated node counts, one run each")
    parser.add_argument("--running-per-node", type=int, default=18)
    parser.add_argument("--pending-per-node", type=int, default=2)
    parser.add_argument("--gang-share", type=float, default=0.5, help="share of the pending pods in gangs")
    parser.add_argument("--gang-size", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=64, help="creates in flight during the setup")
    parser.add_argument("--qps", type=float, default=1000.0, help="binding.qps given to gpusched run")
    parser.add_argument("--burst", type=int, default=2000, help="binding.burst given to gpusched run")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for every pending pod")
    parser.add_argument("--kwok", action="store_true", help="run kwok and the controller manager (see above)")
    parser.add_argument(
        "--not-ready-taint",
        action="store_true",
        help="without kwok: keep the API server's node.kubernetes.io/not-ready taint on every node (the pending "
        "pods tolerate it)",
    )
    parser.add_argument("--kwok-wait", type=float, default=900.0, help="seconds to wait for kwok to run the pods")
    parser.add_argument("--bin-dir", default=os.environ.get("GPUSCHED_E2E_BIN"))
    parser.add_argument("--sim-nodes", type=int, default=0, help="simulator: synthetic nodes (0: no simulator run)")
    parser.add_argument("--sim-arrivals", type=int, default=100_000, help="simulator: pods arriving")
    parser.add_argument("--sim-seed", type=int, default=0)
    harness.add_json(parser, help="write the figures here (rewritten after each size)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()] if args.sizes else []
    if args.running_per_node > 110 - args.pending_per_node:
        parser.error("more pods a node than its 110")
    if args.pending_per_node > 8 - GPUS_TAKEN_BY_RUNNING:
        parser.error(f"the running pods leave {8 - GPUS_TAKEN_BY_RUNNING} GPUs a node for the pending ones")

    results: list[SizeResult] = []
    out: dict[str, Any] = {"setup": vars(args) | {"json": str(args.json), "cpus": os.cpu_count()}}

    def save() -> None:
        out["sizes"] = [asdict(r) for r in results]
        harness.write_json(args.json, out)

    status = 0
    for nodes in sizes:
        log(f"size {nodes} nodes: starting")
        result = SizeResult(
            nodes=nodes,
            running=nodes * args.running_per_node,
            pending=nodes * args.pending_per_node,
            gangs=int(nodes * args.pending_per_node * args.gang_share) // args.gang_size,
        )
        results.append(result)
        try:
            run_size(result, args)
        except Exception as exc:
            # Reported with what was measured before it; the next sizes and the simulator still run.
            result.note = f"failed: {exc!r}"[:2000]
            log(f"size {nodes} nodes failed: {exc!r}")
        log(f"size {nodes} nodes: {json.dumps(asdict(result), default=str)}")
        if result.bound < result.pending:
            status = 1
        save()
    if results:
        how = "kwok running the pods" if args.kwok else "no kwok: bound pods stay Pending on their nodes"
        print(
            f"\n{args.running_per_node} running and {args.pending_per_node} pending pods a node ({how}); pending: "
            f"{args.gang_share:.0%} in gangs of {args.gang_size}; 4 queues; gpusched binding QPS {args.qps:g} / "
            f"burst {args.burst}"
        )
        print(table(results))
        for line in growth(results):
            print(line)
        for r in results:
            top = ", ".join(f"{name} {seconds:.1f}" for name, seconds in list(r.plugin_seconds.items())[:6])
            cycles = r.cycles * r.cycle_mean_ms / 1000 if r.cycles else math.nan
            print(f"{r.nodes} nodes: {cycles:.1f} s in cycles; plugin seconds in the sampled cycles (largest): {top}")
        for r in results:
            if r.note:
                print(f"{r.nodes} nodes: {r.note}")
    if args.sim_nodes:
        log(f"simulator: default policy, {args.sim_nodes} nodes, {args.sim_arrivals} arrivals")
        sim = run_simulator(args.sim_nodes, args.sim_arrivals, args.sim_seed)
        out["simulator"] = sim
        print(
            f"\nsimulator, default policy: {sim['nodes']:,} synthetic nodes ({sim['gpus']:,} GPUs), "
            f"{sim['arrivals']:,} arrivals ({sim['placed']:,} placed) in {sim['wall_s']:.1f} s: "
            f"{sim['decisions_per_s']:.0f} decisions/s"
        )
        save()
    return status


if __name__ == "__main__":
    sys.exit(main())
