"""Scheduling throughput on a real API server: gpusched against kube-scheduler, side by side.

For each case a fresh local control plane (tests/e2e/localcluster.py: etcd, kube-apiserver, controller manager,
kwok) gets ``--nodes`` kwok GPU nodes (8 x nvidia.com/gpu each); then ``--pods`` pods of one GPU are created at
once by an asynchronous creator with ``--concurrency`` requests in flight, so that creation is not what limits
the figure. A watch records when each pod first shows a node. Reported per case:

- pods/s: pods bound / seconds from the first create sent to the last pod bound;
- p50 and p99 of create-to-bound: from the moment the API server answered the pod's create to the moment the
  watch showed it bound (both read on this machine's monotonic clock).

Beside the rates, where the CPU went (benchmarks/proc_cpu.py), since on a machine of a few cores the scheduler and
the control plane take it from one another: per pod bound, the CPU milliseconds of the control plane (etcd,
kube-apiserver, kube-controller-manager, kwok: each given), of the scheduler's processes and of this harness, from
the start to the last bind; the scheduler's from the start until every pod bound has its ``Scheduled`` Event (a
scheduler that writes its Events behind its bindings does part of its writes after the last bind; polled every
0.5 s); how many cores the machine kept busy meanwhile; the control plane's cores when idle (measured for 5 s
before the pods are created: kwok's node heartbeats and leases); and what the API server served per pod (its
request and watch-event counters, every client together).

Cases: ``kube-scheduler`` (its default configuration, client QPS 50 / burst 100), ``kube-scheduler-qps`` (the
same with client QPS and burst raised by a KubeSchedulerConfiguration), ``gpusched`` (``gpusched run``, single
pods) and ``gangs`` (gpusched alone, ``--gangs`` PodGroups of ``--gang-size`` pods; kube-scheduler has no gangs).
``ceiling`` (backlog mode only) is benchmarks/null_binder.py: no decisions, no Events, bindings round-robin with
``--concurrency`` in flight and no client rate limit; its pods/s is what this API server takes on this machine,
and the table gives every case as a fraction of it when it ran in the same invocation. ``ceiling-events`` is the
same binder writing a ``Scheduled`` Event per pod after its binding, as the schedulers do.
``kube-scheduler-qps-anti`` and ``gpusched-anti`` are the QPS-matched pair with required pod anti-affinity on
every pod: ``--apps`` apps of equal size (label ``app``), each pod kept off any node that runs a pod of its own
app (topology key ``kubernetes.io/hostname``), as replicas of an inference service are spread.
The peers (tests/e2e/peer_schedulers.py, built by tests/e2e/build-peers.sh): ``volcano`` and ``coscheduling``
(single pods), ``volcano-gangs`` and ``coscheduling-gangs`` (the ``gangs`` workload as each peer expresses a
gang), at the same client QPS and burst as gpusched (``--peer-qps``, ``--peer-burst``).

    .venv/bin/python -m benchmarks.e2e_throughput [--nodes 1000 --pods 5000] [--cases kube-scheduler,gpusched]
                                                  [--json FILE]

Needs the control-plane binaries (tests/e2e/build-controlplane.sh) and, for the gpusched cases, ``gpusched run``.
A case that cannot run is reported as such, with the reason, and has no figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks import harness, proc_cpu

# Its sibling proc_cpu, also when it is loaded by path from elsewhere (tests/e2e/test_peer_schedulers.py).
from tests.e2e import kube, peer_schedulers
from tests.e2e.localcluster import LocalCluster

CASES = (
    "ceiling",
    "ceiling-events",
    "kube-scheduler",
    "kube-scheduler-qps",
    "gpusched",
    "gangs",
    "kube-scheduler-qps-anti",
    "gpusched-anti",
    "volcano",
    "volcano-gangs",
    "coscheduling",
    "coscheduling-gangs",
)
#: The peer each peer case runs (tests/e2e/peer_schedulers.py).
PEER_OF = {
    "volcano": "volcano",
    "volcano-gangs": "volcano",
    "coscheduling": "coscheduling",
    "coscheduling-gangs": "coscheduling",
}
#: The gang cases and whose gangs they are.
GANGS_OF = {"gangs": "gpusched", "volcano-gangs": "volcano", "coscheduling-gangs": "coscheduling"}
NAMESPACE = "bench"
#: Seconds the control plane is watched doing nothing before each case's pods are created.
IDLE_SECONDS = 5.0
#: The schedulerName of the ceiling case's pods: nobody else binds them.
NULL_BINDER = "null-binder"
#: The cases the null binder runs (benchmarks/null_binder.py), with and without its Events.
NULL_BINDER_CASES = ("ceiling", "ceiling-events")


@dataclass(frozen=True, slots=True)
class Result:
    case: str
    pods: int
    bound: int
    seconds: float
    pods_per_s: float
    p50_s: float
    p99_s: float
    note: str = ""
    #: Pods with a ``Scheduled`` Event once binding was done (Events are written behind the bindings).
    events: int = 0
    #: Seconds from the start to the first pod bound (the scheduler's start-up, listing and first cycle).
    first_bind_s: float = 0.0
    #: Pods bound per second from the first bind to the last: the rate once running, start-up left out for all.
    running_pods_per_s: float = 0.0
    #: CPU seconds from the start to the last bind (benchmarks/proc_cpu.py): ``control plane``, ``scheduler``,
    #: ``harness`` (this process: the watch, and the creates in burst mode) and ``machine`` (every core, all work).
    cpu: Mapping[str, float] = field(default_factory=dict)
    #: The scheduler's CPU seconds from the start until every pod bound had its ``Scheduled`` Event (0 when some
    #: never did): a scheduler that writes its Events behind its bindings spends part of its writes after the last
    #: bind, which ``cpu`` leaves out.
    scheduler_cpu_to_events: float = 0.0
    #: What the API server served over the same span (:meth:`Api.counters`), every client's requests together.
    requests: Mapping[str, float] = field(default_factory=dict)
    #: Cores each part kept busy over IDLE_SECONDS before the pods were created (the control plane's floor).
    idle_cores: Mapping[str, float] = field(default_factory=dict)

    def cpu_ms_per_pod(self, part: str) -> float:
        return 1000.0 * self.cpu.get(part, 0.0) / self.bound if self.bound else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "pods_per_s": round(self.pods_per_s, 1),
            "p50_s": round(self.p50_s, 3),
            "p99_s": round(self.p99_s, 3),
            "pods": self.pods,
            "bound": self.bound,
            "seconds": round(self.seconds, 2),
            "scheduled_events": self.events,
            "first_bind_s": round(self.first_bind_s, 2),
            "running_pods_per_s": round(self.running_pods_per_s, 1),
            "cpu_s": {part: round(seconds, 2) for part, seconds in self.cpu.items()},
            "scheduler_cpu_to_events_s": round(self.scheduler_cpu_to_events, 2),
            "idle_cores": {part: round(cores, 3) for part, cores in self.idle_cores.items()},
            "requests": {name: int(n) for name, n in sorted(self.requests.items())},
        }


def counters(metrics: str) -> dict[str, float]:
    """The request and watch-event counters of an API server's /metrics text: ``VERB resource[/subresource]`` (LIST
    and WATCH are verbs of their own) and ``watch events Kind`` (objects sent to watchers, one per watcher)."""
    found: dict[str, float] = {}
    for line in metrics.splitlines():
        metric, _, rest = line.partition("{")
        if metric not in ("apiserver_request_total", "apiserver_watch_events_total"):
            continue
        labels_text, _, value = rest.rpartition("} ")
        labels = dict(re.findall(r'(\w+)="([^"]*)"', labels_text))
        if metric == "apiserver_request_total":
            sub = labels.get("subresource", "")
            name = f"{labels.get('verb', '?')} {labels.get('resource', '?')}" + (f"/{sub}" if sub else "")
        else:
            name = f"watch events {labels.get('kind') or labels.get('resource') or '?'}"
        found[name] = found.get(name, 0.0) + float(value)
    return found


def percentile(values: list[float], q: float) -> float:
    """The q-quantile by the nearest-rank method (q in 0..1)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q * len(ordered) + 0.5)))
    return ordered[rank - 1]


class Api:
    """aiohttp against the local API server as admin; many requests in flight, one TLS context."""

    def __init__(self, cluster: LocalCluster, *, connections: int) -> None:
        self.server = cluster.server
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=cluster.ssl_context(), limit=connections),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )

    async def post(self, path: str, body: Mapping[str, Any]) -> None:
        for attempt in range(20):
            async with self.session.post(self.server + path, json=body) as resp:
                if resp.status in (200, 201):
                    await resp.read()
                    return
                text = await resp.text()
                # 429: the API server's priority and fairness asks us to slow down; anything else is a bug here.
                if resp.status != 429:
                    raise RuntimeError(f"POST {path}: HTTP {resp.status}: {text[:500]}")
            await asyncio.sleep(0.05 * (attempt + 1))
        raise RuntimeError(f"POST {path}: still throttled after 20 attempts")

    async def get(self, path: str, **query: str) -> Any:
        async with self.session.get(self.server + path, params=query) as resp:
            resp.raise_for_status()
            return await resp.json()

    async def counters(self) -> dict[str, float]:
        """The API server's request and watch-event counters now (:func:`counters` of its /metrics)."""
        async with self.session.get(self.server + "/metrics") as resp:
            resp.raise_for_status()
            text = await resp.text()
        return counters(text)

    async def close(self) -> None:
        await self.session.close()


async def bounded(concurrency: int, jobs: Iterable[Callable[[], Awaitable[None]]]) -> None:
    """Run the jobs with at most ``concurrency`` at once; the first failure cancels the rest."""
    queue: asyncio.Queue[Callable[[], Awaitable[None]]] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)

    async def worker() -> None:
        while not queue.empty():
            job = queue.get_nowait()
            await job()

    async with asyncio.TaskGroup() as group:
        for _ in range(min(concurrency, queue.qsize())):
            group.create_task(worker())


async def create_nodes(api: Api, count: int, *, concurrency: int) -> float:
    started = time.monotonic()
    manifests = [
        kube.gpu_node(f"gpu-{i:05d}", gpus=8, rack=f"r{i // 16:03d}", block=f"b{i // 128:02d}") for i in range(count)
    ]
    await bounded(concurrency, [lambda m=m: api.post("/api/v1/nodes", m) for m in manifests])

    async def all_ready() -> int:
        items = (await api.get("/api/v1/nodes"))["items"]
        return sum(
            any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))
            for n in items
        )

    deadline = time.monotonic() + 300
    while (ready := await all_ready()) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {ready} of {count} nodes Ready after 300 s")
        await asyncio.sleep(1)
    return time.monotonic() - started


class BindWatch:
    """A watch on the namespace's pods (every namespace's with ``namespace`` None) that notes when each one
    first shows a node, by pod name."""

    def __init__(self, api: Api, resource_version: str, *, namespace: str | None = NAMESPACE) -> None:
        self.api = api
        self.path = f"/api/v1/namespaces/{namespace}/pods" if namespace is not None else "/api/v1/pods"
        self.resource_version = resource_version
        self.bound_at: dict[str, float] = {}
        self.task: asyncio.Task[None] | None = None
        self.changed = asyncio.Event()

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        path = self.api.server + self.path
        while True:
            params = {"watch": "1", "resourceVersion": self.resource_version, "allowWatchBookmarks": "true"}
            async with self.api.session.get(path, params=params) as resp:
                resp.raise_for_status()
                buffer = b""
                async for chunk in resp.content.iter_any():
                    now = time.monotonic()
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if line.strip():
                            self._event(json.loads(line), now)
            # The server closes watches after a while (--min-request-timeout); resume from the last version.

    def _event(self, event: Mapping[str, Any], now: float) -> None:
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        if meta.get("resourceVersion"):
            self.resource_version = meta["resourceVersion"]
        if event.get("type") == "ERROR":
            raise RuntimeError(f"watch error: {obj}")
        name = meta.get("name")
        if name and (obj.get("spec") or {}).get("nodeName") and name not in self.bound_at:
            self.bound_at[name] = now
            self.changed.set()

    async def wait_for(self, count: int, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.bound_at) < count and time.monotonic() < deadline:
            self.changed.clear()
            with_timeout = max(0.1, min(1.0, deadline - time.monotonic()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), with_timeout)
            if self.task is not None and self.task.done():
                self.task.result()  # raise what killed the watch

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()


async def run_burst(
    cluster: LocalCluster,
    *,
    case: str,
    pods: int,
    scheduler_name: str,
    concurrency: int,
    timeout: float,
    gangs: int = 0,
    gang_size: int = 0,
    apps: int = 0,
    start_scheduler: Callable[[], None] | None = None,
    gang_peer: str = "gpusched",
    settle: Callable[[Api, int], Awaitable[str]] | None = None,
) -> Result:
    """Create the pods at once and time their binding.

    burst mode (``start_scheduler`` None): the scheduler is already running. backlog mode: every pod is created
    first, then ``settle`` (if any) waits for what a peer's controllers do with new pods, then
    ``start_scheduler`` is called; the clock starts there. Gangs are ``gang_peer``'s PodGroups and members.
    """
    api = Api(cluster, connections=concurrency + 8)
    try:
        await api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        listed = await api.get(f"/api/v1/namespaces/{NAMESPACE}/pods")
        watch = BindWatch(api, listed["metadata"]["resourceVersion"])
        watch.start()
        manifests = []
        if gangs:
            groups, manifests = peer_schedulers.gang_workload(
                gang_peer, gangs=gangs, gang_size=gang_size, namespace=NAMESPACE
            )
            for path, group in groups:
                await api.post(path, group)
        else:
            manifests = [kube.pod(f"pod-{i:05d}", gpus=1, scheduler_name=scheduler_name) for i in range(pods)]
            if apps:
                for i, manifest in enumerate(manifests):
                    anti_affinity(manifest, f"app-{i % apps:03d}")
        created_at: dict[str, float] = {}
        # What the control plane spends with nothing to schedule (kwok's node heartbeats and leases, mostly).
        idle = proc_cpu.Reading()
        await asyncio.sleep(IDLE_SECONDS)
        idle_cores = {part: seconds / IDLE_SECONDS for part, seconds in idle.spent().items()}

        async def create(manifest: Mapping[str, Any]) -> None:
            await api.post(f"/api/v1/namespaces/{NAMESPACE}/pods", manifest)
            created_at[manifest["metadata"]["name"]] = time.monotonic()

        started = time.monotonic()
        cpu, counted = proc_cpu.Reading(), await api.counters()
        await bounded(concurrency, [lambda m=m: create(m) for m in manifests])
        created = time.monotonic()
        note = f"created in {created - started:.1f} s"
        if start_scheduler is not None:
            if watch.bound_at:
                raise RuntimeError(f"{len(watch.bound_at)} pods were bound before the scheduler started")
            note = f"backlog created in {created - started:.1f} s, then the scheduler started"
            if settle is not None:
                note += await settle(api, len(manifests))
            started = time.monotonic()
            cpu, counted = proc_cpu.Reading(), await api.counters()
            await asyncio.to_thread(start_scheduler)
            created_at = dict.fromkeys(created_at, started)
        await watch.wait_for(len(manifests), timeout=timeout)
        used = cpu.spent()
        after = await api.counters()
        requests = {k: v - counted.get(k, 0.0) for k, v in after.items() if v > counted.get(k, 0.0)}
        watch.stop()
        bound = watch.bound_at
        # The null binder writes no Events (it is the floor of the work a scheduler does), but in ceiling-events.
        quiet = scheduler_name == NULL_BINDER and case != "ceiling-events"
        events = 0 if quiet else await scheduled_events(api, len(bound), timeout=60.0)
        to_events = cpu.spent().get("scheduler", 0.0) if events >= len(bound) and not quiet else 0.0
        latencies = [bound[name] - created_at[name] for name in bound if name in created_at]
        # With nothing bound, the case took the whole wait.
        first, last = (min(bound.values()), max(bound.values())) if bound else (started, time.monotonic())
        seconds = last - started
        if len(bound) < len(manifests):
            note += f"; only {len(bound)} of {len(manifests)} bound within {timeout:.0f} s"
        running = last - first if len(bound) > 1 else 0.0
        return Result(
            case=case,
            pods=len(manifests),
            bound=len(bound),
            seconds=seconds,
            pods_per_s=len(bound) / seconds if seconds > 0 else 0.0,
            p50_s=percentile(latencies, 0.50),
            p99_s=percentile(latencies, 0.99),
            note=note,
            events=events,
            first_bind_s=first - started,
            running_pods_per_s=(len(bound) - 1) / running if running > 0 else 0.0,
            cpu=used,
            scheduler_cpu_to_events=to_events,
            requests=requests,
            idle_cores=idle_cores,
        )
    finally:
        await api.close()


def anti_affinity(manifest: dict[str, Any], app: str) -> None:
    """Label ``manifest`` as a replica of ``app`` that must not share a node with another replica of it."""
    manifest["metadata"].setdefault("labels", {})["app"] = app
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}
    manifest["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


async def scheduled_events(api: Api, expected: int, *, timeout: float) -> int:
    """How many pods of the namespace have a ``Scheduled`` Event, waiting up to ``timeout`` s for ``expected``.

    Checked after the figures are taken: a scheduler may write Events behind its bindings, but every pod must
    get one (kubectl describe shows it).
    """
    deadline = time.monotonic() + timeout
    while True:
        named: set[str] = set()
        token = ""
        while True:
            query = {"fieldSelector": "reason=Scheduled", "limit": "1000"}
            if token:
                query["continue"] = token
            page = await api.get(f"/api/v1/namespaces/{NAMESPACE}/events", **query)
            # Pods only: Volcano and gpusched also write a Scheduled Event on each PodGroup.
            named.update(e["involvedObject"]["name"] for e in page["items"] if e["involvedObject"].get("kind") == "Pod")
            token = page["metadata"].get("continue") or ""
            if not token:
                break
        if len(named) >= expected or time.monotonic() > deadline:
            return len(named)
        await asyncio.sleep(0.5)


def run_case(case: str, args: argparse.Namespace) -> Result | str:
    """One case on a fresh cluster: a Result, or why the case could not run."""
    if case in NULL_BINDER_CASES and args.mode != "backlog":
        return "the null binder lists a backlog once: run it with --mode backlog"
    gpusched_case = case in ("gpusched", "gangs", "gpusched-anti")
    if gpusched_case and (missing := harness.gpusched_missing()) is not None:
        return missing
    peer = PEER_OF.get(case)
    peer_bin: Path | None = None
    if peer is not None:
        try:
            peer_bin = peer_schedulers.binaries()
        except (OSError, subprocess.CalledProcessError) as exc:
            return f"the peers could not be built ({exc}); see tests/e2e/build-peers.sh"
    options: dict[str, Any] = {}
    if case.startswith("kube-scheduler"):
        options["with_scheduler"] = True
    if case in ("kube-scheduler-qps", "kube-scheduler-qps-anti"):
        options.update(scheduler_qps=args.kube_qps, scheduler_burst=args.kube_burst)
    backlog = args.mode == "backlog"
    if backlog and not gpusched_case:
        options["defer_scheduler"] = True
    with LocalCluster(verbose=False, **options) as cluster:
        k = harness.for_gpusched(cluster)
        node_seconds = asyncio.run(create_nodes_now(cluster, args))
        print(f"[{case}] {args.nodes} nodes Ready in {node_seconds:.1f} s", file=sys.stderr, flush=True)
        replica = None
        binder: list[subprocess.Popen[bytes]] = []
        workdir = kube.scenario_workdir()
        start: Callable[[], None] | None = None
        peer_procs: list[peer_schedulers.PeerProcess] = []
        settle: Callable[[Api, int], Awaitable[str]] | None = None
        if peer is not None:
            assert peer_bin is not None
            peer_procs, start, settle = start_peer(cluster, peer_bin, case, peer, args, backlog=backlog)
        elif gpusched_case:
            replica = harness.gpusched(
                k, qps=args.gpusched_qps, burst=args.gpusched_burst, workdir=workdir, profile_as=case
            )
            if backlog:
                start = replica.start
            else:
                replica.start().wait_ready(timeout=180).wait_leader()
        elif case in NULL_BINDER_CASES:
            assert cluster.pki is not None

            def start_binder() -> None:
                argv = [sys.executable, str(harness.REPO / "benchmarks" / "null_binder.py"), "--server", cluster.server]
                argv += ["--ca", str(cluster.pki.ca_crt), "--cert", str(cluster.pki.admin_crt)]
                argv += ["--key", str(cluster.pki.admin_key), "--namespace", NAMESPACE]
                argv += ["--scheduler-name", NULL_BINDER, "--concurrency", str(args.binder_concurrency)]
                argv += ["--events"] if case == "ceiling-events" else []
                binder.append(subprocess.Popen(argv))

            start = start_binder
        elif backlog:
            start = cluster.start_scheduler
        try:
            pods = args.gangs * args.gang_size if case in GANGS_OF else args.pods
            if gpusched_case:
                scheduler_name = "gpusched"
            elif peer is not None:
                scheduler_name = peer_schedulers.scheduler_name(peer)
            else:
                scheduler_name = NULL_BINDER if case in NULL_BINDER_CASES else "default-scheduler"
            return asyncio.run(
                run_burst(
                    cluster,
                    case=case,
                    pods=pods,
                    scheduler_name=scheduler_name,
                    concurrency=args.concurrency,
                    timeout=args.timeout,
                    gangs=args.gangs if case in GANGS_OF else 0,
                    gang_peer=GANGS_OF.get(case, "gpusched"),
                    settle=settle,
                    gang_size=args.gang_size,
                    apps=args.apps if case.endswith("-anti") else 0,
                    start_scheduler=(lambda: None if start is None else start()) if backlog else None,
                )
            )
        finally:
            for process in binder:
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            if replica is not None:
                replica.stop()
                if replica.log_path.exists():
                    print(f"[{case}] gpusched log: {replica.log_path}", file=sys.stderr)
            for proc in reversed(peer_procs):
                proc.stop(cluster)


def start_peer(
    cluster: LocalCluster,
    bin_dir: Path,
    case: str,
    peer: str,
    args: argparse.Namespace,
    *,
    backlog: bool,
) -> tuple[list[peer_schedulers.PeerProcess], Callable[[], None] | None, Callable[[Api, int], Awaitable[str]] | None]:
    """Install ``peer``'s CRDs and start what must run before the pods exist; return its processes, the call
    that starts its scheduler in backlog mode (None in burst mode: already running) and the wait for its
    controllers (None when there is nothing to wait for).

    Volcano's controller manager runs from the start, as it would on any cluster with Volcano installed: its
    queue controller opens the default queue, and its podgroup controller makes plain pods PodGroups of one as
    they are created. In backlog mode the clock starts once every pod has its PodGroup, so that it times the
    scheduler, as for the other cases.
    """
    peer_schedulers.apply_crds(cluster, bin_dir, peer)
    procs: list[peer_schedulers.PeerProcess] = []
    settle: Callable[[Api, int], Awaitable[str]] | None = None
    if peer == "volcano":
        controllers, scheduler = peer_schedulers.volcano_processes(
            cluster, bin_dir, qps=args.peer_qps, burst=args.peer_burst
        )
        procs.append(controllers.start(cluster))
        controllers.wait_healthy()
        for queue in peer_schedulers.volcano_queues():
            cluster.request("POST", peer_schedulers.queue_path(), queue)
        opened = time.monotonic() + 120
        while (
            cluster.request("GET", peer_schedulers.queue_path(peer_schedulers.VOLCANO_QUEUE)).get("status") or {}
        ).get("state") != "Open":
            controllers.check_running()
            if time.monotonic() > opened:
                raise RuntimeError("Volcano's queue controller did not open the default queue within 120 s")
            time.sleep(0.5)
        if case == "volcano":
            settle = volcano_pods_grouped
    else:
        scheduler = peer_schedulers.coscheduling_process(cluster, bin_dir, qps=args.peer_qps, burst=args.peer_burst)
    procs.append(scheduler)
    if backlog:

        def start() -> None:
            scheduler.start(cluster)

        return procs, start, settle
    scheduler.start(cluster).wait_healthy()
    return procs, None, settle


async def volcano_pods_grouped(api: Api, count: int, *, timeout: float = 300.0) -> str:
    """Wait until Volcano's podgroup controller has given each of the ``count`` pods its PodGroup (the
    annotation its scheduler reads); the note says how long that took."""
    started = time.monotonic()
    while True:
        pods = (await api.get(f"/api/v1/namespaces/{NAMESPACE}/pods"))["items"]
        grouped = sum(
            1 for p in pods if (p["metadata"].get("annotations") or {}).get(peer_schedulers.VOLCANO_GROUP_ANNOTATION)
        )
        if grouped >= count:
            return f" (after {time.monotonic() - started:.1f} s more for Volcano's controller to group every pod)"
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"only {grouped} of {count} pods got a Volcano PodGroup within {timeout:.0f} s")
        await asyncio.sleep(1)


async def create_nodes_now(cluster: LocalCluster, args: argparse.Namespace) -> float:
    api = Api(cluster, connections=args.concurrency + 8)
    try:
        return await create_nodes(api, args.nodes, concurrency=args.concurrency)
    finally:
        await api.close()


def table(results: Mapping[str, Result | str]) -> str:
    base = results.get("kube-scheduler")
    ceiling = results.get("ceiling")
    head = ["case", "pods", "bound", "pods/s", "of the ceiling", "vs kube-scheduler", "p50 (s)", "p99 (s)"]
    head += ["Scheduled Events", "first bind (s)", "pods/s after it", "note"]
    rows: list[list[object]] = []
    for case, r in results.items():
        if isinstance(r, str):
            rows.append(harness.note_row(case, f"not run: {r}", len(head)))
            continue
        ratio = f"{r.pods_per_s / base.pods_per_s:.2f}x" if isinstance(base, Result) and base.pods_per_s else ""
        share = f"{r.pods_per_s / ceiling.pods_per_s:.0%}" if isinstance(ceiling, Result) and ceiling.pods_per_s else ""
        figures = [f"{r.pods_per_s:.1f}", share, ratio, f"{r.p50_s:.2f}", f"{r.p99_s:.2f}", r.events]
        rows.append([case, r.pods, r.bound, *figures, f"{r.first_bind_s:.2f}", f"{r.running_pods_per_s:.1f}", r.note])
    return harness.markdown_table(head, rows, align="l" + "r" * 10 + "l")


def cpu_table(results: Mapping[str, Result | str]) -> str:
    """Where each case's CPU went, per pod bound, from its start to its last bind; ``cores busy``: the machine's
    busy CPU seconds (everything on it) over the case's seconds, out of the machine's core count."""
    lines = [
        f"\nCPU per pod bound (ms) and cores busy (of {os.cpu_count()})",
        f"| case | control plane ({', '.join(proc_cpu.CONTROL_PLANE)}) | scheduler | harness | cores busy "
        "| control plane idle (cores) | scheduler, to the last Scheduled Event |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for case, r in results.items():
        if isinstance(r, Result) and r.cpu:
            plane = ", ".join(f"{r.cpu_ms_per_pod(part):.2f}" for part in proc_cpu.CONTROL_PLANE)
            parts = f"{r.cpu_ms_per_pod('control plane'):.2f} ({plane})"
            parts += "".join(f" | {r.cpu_ms_per_pod(part):.2f}" for part in ("scheduler", "harness"))
            busy = r.cpu.get("machine", 0.0) / r.seconds if r.seconds else 0.0
            floor = r.idle_cores.get("control plane", 0.0)
            to_events = f"{1000.0 * r.scheduler_cpu_to_events / r.bound:.2f}" if r.scheduler_cpu_to_events else ""
            lines.append(f"| {case} | {parts} | {busy:.2f} | {floor:.2f} | {to_events} |")
    names = sorted({n for r in results.values() if isinstance(r, Result) for n, v in r.requests.items() if v})
    ran = [(case, r) for case, r in results.items() if isinstance(r, Result) and r.requests and r.bound]
    if ran:
        lines += ["\nWhat the API server served per pod bound (every client; shown where any case has 0.05 or more)"]
        lines += ["| | " + " | ".join(case for case, _ in ran) + " |", "|---|" + "---:|" * len(ran)]
        for name in names:
            per_pod = [r.requests.get(name, 0.0) / r.bound for _, r in ran]
            if max(per_pod) >= 0.05:
                lines.append(f"| {name} | " + " | ".join(f"{v:.2f}" for v in per_pod) + " |")
    return "\n".join(lines)


def peer_ratios(results: Mapping[str, Result | str]) -> list[str]:
    """gpusched's pods/s over each peer's that ran, single pods against single pods and gangs against gangs."""
    pairs = [
        ("gpusched", "volcano"),
        ("gpusched", "coscheduling"),
        ("gpusched", "kube-scheduler-qps"),
        ("gangs", "volcano-gangs"),
        ("gangs", "coscheduling-gangs"),
    ]
    lines = []
    for ours, theirs in pairs:
        a, b = results.get(ours), results.get(theirs)
        if isinstance(a, Result) and isinstance(b, Result) and b.pods_per_s:
            running = (
                f", {a.running_pods_per_s / b.running_pods_per_s:.2f}x after each one's first bind"
                if b.running_pods_per_s
                else ""
            )
            lines.append(f"{ours} / {theirs}: {a.pods_per_s / b.pods_per_s:.2f}x pods/s{running}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--gangs", type=int, default=200)
    parser.add_argument("--gang-size", type=int, default=8)
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    parser.add_argument("--binder-concurrency", type=int, default=64, help="bindings in flight in the ceiling case")
    parser.add_argument("--apps", type=int, default=50, help="apps of the -anti cases (pods / apps replicas each)")
    parser.add_argument("--concurrency", type=int, default=64, help="creates in flight")
    parser.add_argument("--kube-qps", type=float, default=1000.0, help="client QPS of kube-scheduler-qps")
    parser.add_argument("--kube-burst", type=int, default=2000, help="client burst of kube-scheduler-qps")
    parser.add_argument("--gpusched-qps", type=float, default=1000.0, help="binding.qps given to gpusched run")
    parser.add_argument("--gpusched-burst", type=int, default=2000, help="binding.burst given to gpusched run")
    parser.add_argument(
        "--peer-qps", type=float, default=1000.0, help="client QPS of the Volcano and coscheduling cases"
    )
    parser.add_argument(
        "--peer-burst", type=int, default=2000, help="client burst of the Volcano and coscheduling cases"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for every pod to bind")
    parser.add_argument(
        "--mode",
        choices=("burst", "backlog"),
        default="burst",
        help="burst: pods are created while the scheduler runs (the clock starts at the first create); backlog: "
        "all pods are created first, then the scheduler is started (the clock starts there)",
    )
    harness.add_json(parser)
    args = parser.parse_args(argv)
    cases = harness.chosen(parser, args.cases, CASES)
    wanted = max(
        args.pods if set(cases) - set(GANGS_OF) else 0,
        args.gangs * args.gang_size if set(cases) & set(GANGS_OF) else 0,
    )
    if wanted > args.nodes * 8:
        parser.error("more one-GPU pods than the nodes' GPUs (8 a node): not every pod could bind")
    if any(c.endswith("-anti") for c in cases) and (args.apps < 1 or -(-args.pods // args.apps) > args.nodes):
        parser.error("--apps must be at least pods / nodes: one replica of an app a node")

    results: dict[str, Result | str] = {}
    for case in cases:
        print(f"[{case}] starting", file=sys.stderr, flush=True)
        results[case] = run_case(case, args)
        r = results[case]
        print(f"[{case}] {r if isinstance(r, str) else r.as_json()}", file=sys.stderr, flush=True)
    print(f"\n{args.mode} mode: {args.nodes} kwok nodes of 8 GPUs; pods of 1 GPU, created {args.concurrency} at a time")
    print(table(results))
    print(cpu_table(results))
    for line in peer_ratios(results):
        print(line)
    if args.json:
        out = {case: (r.as_json() if isinstance(r, Result) else {"not_run": r}) for case, r in results.items()}
        out["setup"] = {
            "nodes": args.nodes,
            "pods": args.pods,
            "gangs": args.gangs,
            "gang_size": args.gang_size,
            "concurrency": args.concurrency,
            "mode": args.mode,
            "kube_scheduler_qps": [args.kube_qps, args.kube_burst],
            "gpusched_qps": [args.gpusched_qps, args.gpusched_burst],
            "peer_qps": [args.peer_qps, args.peer_burst],
            "apps": args.apps,
        }
        harness.write_json(args.json, out)
    return 0 if all(isinstance(r, Result) and r.bound == r.pods for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
