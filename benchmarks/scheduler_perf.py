"""Kubernetes' own scheduler benchmark, scheduler_perf, run against kube-scheduler and gpusched side by side.

kube-scheduler's scheduler_perf suite (test/integration/scheduler_perf in k8s.io/kubernetes) defines its standard
workloads in YAML: per topic a ``performance-config.yaml`` of test cases, each a ``workloadTemplate`` of ops
(createNodes, createNamespaces, createPods, churn, createAny, createResourceDriver, ...) and ``workloads`` that
give the ops' parameters at several sizes, with node and pod templates beside them. This benchmark reads that
YAML from the Go module cache (the control plane's pin, v1.36.4), and plays each selected workload's ops against
a local control plane (tests/e2e/localcluster.py: etcd and kube-apiserver; nodes are API objects with no kubelet,
as in the suite; kube-controller-manager only with its resourceclaim controller, for the DRA case), once with
the control plane's own kube-scheduler and once with ``gpusched run``, each on a fresh cluster and each started
before the first op, as the suite starts its scheduler. Pods get ``spec.schedulerName`` of the scheduler under
test; both run at client QPS and burst 5000, the suite's setting.

Measured as the suite measures (its throughputCollector): over the pods of the op marked ``collectMetrics``
only, once a second from the op's start, skipping the first sample with a pod bound, one sample per second of
the pods newly bound over the seconds since the last sample (a second with none bound is folded into the next);
``pods/s`` is the average of those samples (SchedulingThroughput's Average). ``first-to-last`` is the measured
pods bound per second from the first of them bound to the last. Each bind is seen by a watch on every pod.
As in the suite, the measured pods are created while the scheduler runs (30 at a time), so no scheduler can bind
them faster than they are created: ``created/s`` says how fast that was; where both schedulers are near it, the
figure measures the creator and the API server, not the schedulers.

Departures from the suite, all forced by running two schedulers as separate processes on a real API server:
pods are named ``<generateName><op>-<i>`` rather than generated (to follow them by name); a pod template's
``spec.priority`` (the suite's API server has no Priority admission) becomes a PriorityClass of that value named
``scheduler-perf-priority-<value>``; feature gates a workload sets are not applied (both schedulers run the
v1.36.4 defaults); the suite's scheduler shares its informer with the collector, here a watch sees the binds.

Sizes (``--size``): ``mid`` takes each test case's smallest workload of 100 to 1000 nodes (the suite's
"500Nodes" variants; 1000 nodes for PreemptionBasic, 100 for the DRA case), ``short`` its first
``integration-test``/``short`` workload (5 nodes: a smoke run, too short for more than a sample or two),
``performance`` its smallest ``performance`` workload (5000 nodes for most: far beyond a 2-core machine);
``--scale`` multiplies every count of objects of the selected workloads (nodes and pods alike; not a per-node
capacity such as ``maxClaimsPerNode``).

    .venv/bin/python -m benchmarks.scheduler_perf [--size mid] [--scale 1.0] [--cases SchedulingBasic,...]
                                                  [--schedulers kube-scheduler,gpusched] [--json FILE]

Needs the control-plane binaries (tests/e2e/build-controlplane.sh), ``gpusched run`` for gpusched, and the Go
module cache holding k8s.io/kubernetes@v1.36.4 (``go mod download k8s.io/kubernetes@v1.36.4`` from a module that
requires it, or ``--suite DIR``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import fnmatch
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks import e2e_throughput, harness
from benchmarks.e2e_throughput import Api
from tests.e2e.localcluster import LocalCluster

KUBERNETES = "k8s.io/kubernetes@v1.36.4"
SUITE_SUBDIR = "test/integration/scheduler_perf"
#: The topics (folders of the suite) whose test cases this benchmark can play.
TOPICS = ("misc", "affinity", "topology_spreading", "dra")
#: The test cases run by default: the suite's standard workloads that apply to a standalone scheduler.
DEFAULT_CASES = (
    "SchedulingBasic",
    "SchedulingPodAntiAffinity",
    "SchedulingPodAffinity",
    "SchedulingNodeAffinity",
    "TopologySpreading",
    "PreemptionBasic",
    "Unschedulable",
    "SchedulingWithResourceClaimTemplate",
)
SCHEDULERS = ("kube-scheduler", "gpusched")
SCHEDULER_NAME = {"kube-scheduler": "default-scheduler", "gpusched": "gpusched"}
#: The ops this benchmark plays, each by its Player method; a test case with any other op is skipped, naming it.
OP_METHODS = {
    "createNodes": "create_nodes",
    "createNamespaces": "create_namespaces",
    "createPods": "create_pods",
    "churn": "churn",
    "createAny": "create_any",
    "createResourceDriver": "create_resource_driver",
}
#: Where createAny puts the kinds the played test cases create: (API path, namespaced).
ANY_KINDS = {
    "DeviceClass": ("/apis/resource.k8s.io/v1/deviceclasses", False),
    "ResourceClaimTemplate": ("/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates", True),
    "ResourceClaim": ("/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims", True),
    "Pod": ("/api/v1/namespaces/{ns}/pods", True),
}
#: The pod a createPods op with no template makes (the suite's makeBasePod is the same pod).
BASE_POD = "../templates/pod-default.yaml"
#: Pods created at once, as the suite's pod creator (30 workers).
CREATE_WORKERS = 30


class SuiteError(RuntimeError):
    """The suite's configuration is missing or uses something this benchmark does not play."""


def suite_dir(explicit: Path | None) -> Path:
    """The scheduler_perf folder in the Go module cache (or ``explicit``); a clear error when it is absent."""
    if explicit is not None:
        candidates = [explicit]
    else:
        cache = os.environ.get("GOMODCACHE")
        if not cache:
            try:
                cache = subprocess.run(
                    ["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True
                ).stdout.strip()
            except (OSError, subprocess.CalledProcessError):
                cache = str(Path.home() / "go" / "pkg" / "mod")
        candidates = [Path(cache) / KUBERNETES / SUITE_SUBDIR]
    for candidate in candidates:
        if all((candidate / topic / "performance-config.yaml").is_file() for topic in TOPICS):
            return candidate
    raise SuiteError(
        f"kube-scheduler's scheduler_perf suite is not at {candidates[0]} (needs "
        f"{', '.join(t + '/performance-config.yaml' for t in TOPICS)}): download {KUBERNETES} into the Go module "
        "cache or pass --suite DIR"
    )


@dataclass(frozen=True)
class Workload:
    """One workload of a test case, with everything needed to play it."""

    case: str
    name: str
    topic_dir: Path
    ops: tuple[dict[str, Any], ...]
    params: Mapping[str, Any]
    default_pod_template: str | None
    labels: tuple[str, ...]
    feature_gates: Mapping[str, bool]

    @property
    def title(self) -> str:
        return f"{self.case}/{self.name}"

    def count(self, op: Mapping[str, Any], key: str = "count") -> int:
        if key in op:
            return int(op[key])
        param = op.get(key + "Param")
        if param is None:
            raise SuiteError(f"{self.title}: op {op.get('opcode')} has neither {key} nor {key}Param")
        return int(self.params[str(param).lstrip("$")])

    def template(self, path: str) -> dict[str, Any]:
        text = (self.topic_dir / path).read_text()
        if "{{" in text:
            raise SuiteError(f"{self.title}: template {path} is a Go template, which this benchmark does not expand")
        loaded = yaml.safe_load(text)
        if not isinstance(loaded, dict):
            raise SuiteError(f"{self.title}: template {path} is not one object")
        return loaded


def node_count(params: Mapping[str, Any]) -> int:
    return sum(int(v) for k, v in params.items() if k.lower().endswith("nodes") or "nodeswith" in k.lower())


def load_cases(directory: Path) -> dict[str, tuple[Path, dict[str, Any]]]:
    cases: dict[str, tuple[Path, dict[str, Any]]] = {}
    for topic in TOPICS:
        config = yaml.safe_load((directory / topic / "performance-config.yaml").read_text())
        for case in config:
            cases[case["name"]] = (directory / topic, case)
    return cases


def select(cases: Mapping[str, tuple[Path, dict[str, Any]]], name: str, size: str, scale: float) -> Workload:
    """The workload of test case ``name`` at ``size``, its counts multiplied by ``scale``; SuiteError if none."""
    if name not in cases:
        raise SuiteError(f"no test case {name} in the suite's {', '.join(TOPICS)} configurations")
    topic_dir, case = cases[name]
    unsupported = sorted({op["opcode"] for op in case["workloadTemplate"]} - OP_METHODS.keys())
    if unsupported:
        raise SuiteError(f"{name} uses op(s) {', '.join(unsupported)}, which this benchmark does not play")
    for op in case["workloadTemplate"]:
        if op["opcode"] == "churn" and op.get("mode") != "create":
            raise SuiteError(f"{name}: churn mode {op.get('mode')!r} (only 'create' is played)")
        if op.get("persistentVolumeTemplatePath") or op.get("persistentVolumeClaimTemplatePath"):
            raise SuiteError(f"{name}: pods with a PersistentVolume and claim each are not played")
    case_labels = list(case.get("labels") or [])
    workloads = case["workloads"]

    def labels(w: Mapping[str, Any]) -> set[str]:
        return set(case_labels) | set(w.get("labels") or [])

    chosen: dict[str, Any] | None = None
    if size == "short":
        chosen = next((w for w in workloads if {"integration-test", "short"} <= labels(w)), None)
    elif size == "performance":
        perf = [w for w in workloads if "performance" in labels(w)]
        chosen = min(perf, key=lambda w: node_count(w["params"]), default=None)
    else:
        mid = [w for w in workloads if 100 <= node_count(w["params"]) <= 1000]
        chosen = min(mid, key=lambda w: node_count(w["params"]), default=None)
    if chosen is None:
        raise SuiteError(f"{name} has no workload of size {size}")
    # Only counts of objects scale; a per-node capacity (maxClaimsPerNode) stays as the suite sizes it.
    counts = {str(op["countParam"]).lstrip("$") for op in case["workloadTemplate"] if "countParam" in op}
    params = {
        k: max(1, round(v * scale)) if k in counts and isinstance(v, int) and v > 0 else v
        for k, v in chosen["params"].items()
    }
    gates = dict(case.get("featureGates") or {}) | dict(chosen.get("featureGates") or {})
    return Workload(
        case=name,
        name=chosen["name"],
        topic_dir=topic_dir,
        ops=tuple(case["workloadTemplate"]),
        params=params,
        default_pod_template=case.get("defaultPodTemplatePath"),
        labels=tuple(sorted(labels(chosen))),
        feature_gates=gates,
    )


@dataclass
class Run:
    """One workload played under one scheduler."""

    scheduler: str
    workload: str
    measured: int = 0
    bound: int = 0
    #: SchedulingThroughput's Average: the mean of the once-a-second samples (None: too short to sample).
    pods_per_s: float | None = None
    samples: int = 0
    first_to_last_pods_per_s: float = 0.0
    #: The measured pods created per second: a scheduler cannot bind them faster than they come.
    created_per_s: float = 0.0
    seconds: float = 0.0
    note: str = ""
    phases: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "pods_per_s": None if self.pods_per_s is None else round(self.pods_per_s, 1),
            "samples": self.samples,
            "first_to_last_pods_per_s": round(self.first_to_last_pods_per_s, 1),
            "created_per_s": round(self.created_per_s, 1),
            "measured_pods": self.measured,
            "bound": self.bound,
            "seconds": round(self.seconds, 2),
            "phases_s": {k: round(v, 1) for k, v in self.phases.items()},
            "note": self.note,
        }


def sampled_throughput(started: float, binds: Sequence[float]) -> tuple[float | None, int]:
    """The suite's SchedulingThroughput Average from the measured pods' bind times, and how many samples.

    Ticks come once a second from ``started`` until the last bind; the first tick with a pod bound only starts
    the count; each later tick with new binds records their number over the seconds since the last recorded
    tick, once per second elapsed (ticks with none bound are folded into the next)."""
    ordered = sorted(binds)
    if not ordered:
        return None, 0
    samples: list[float] = []
    last_count, last_time, begun, skipped = 0, started, False, 0
    tick = 1
    index = 0
    while started + tick <= ordered[-1] + 1e-9:
        now = started + tick
        while index < len(ordered) and ordered[index] <= now:
            index += 1
        tick += 1
        if index == 0:
            continue
        if not begun:
            begun, last_count, last_time = True, index, now
            continue
        if index == last_count:
            skipped += 1
            continue
        rate = (index - last_count) / (now - last_time)
        samples.extend([rate] * (skipped + 1))
        last_count, last_time, skipped = index, now, 0
    if not samples:
        return None, 0
    return sum(samples) / len(samples), len(samples)


class Player:
    """Plays a workload's ops against one cluster for one scheduler."""

    def __init__(self, api: Api, workload: Workload, scheduler: str, *, timeout: float, idle: float) -> None:
        self.api = api
        self.workload = workload
        self.scheduler_name = SCHEDULER_NAME[scheduler]
        self.timeout = timeout
        self.idle = idle
        self.namespaces: set[str] = set()
        self.priority_classes: set[str] = set()
        self.nodes_made = 0
        self.churn_tasks: list[asyncio.Task[None]] = []
        self.watch: e2e_throughput.BindWatch | None = None
        self.run = Run(scheduler=scheduler, workload=workload.title)

    async def create(self, path: str, body: Mapping[str, Any], *, exists_ok: bool = False) -> None:
        for attempt in range(20):
            async with self.api.session.post(self.api.server + path, json=body) as resp:
                if resp.status in (200, 201) or (exists_ok and resp.status == 409):
                    await resp.read()
                    return
                text = await resp.text()
                if resp.status != 429:
                    name = (body.get("metadata") or {}).get("name")
                    raise RuntimeError(f"{self.workload.title}: POST {path} ({name}): HTTP {resp.status}: {text[:400]}")
            await asyncio.sleep(0.05 * (attempt + 1))
        raise RuntimeError(f"POST {path}: still throttled after 20 attempts")

    async def namespace(self, name: str) -> None:
        if name not in self.namespaces:
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            await self.create("/api/v1/namespaces", body, exists_ok=True)
            self.namespaces.add(name)

    async def play(self) -> Run:
        listed = await self.api.get("/api/v1/pods", limit="1")
        self.watch = e2e_throughput.BindWatch(self.api, listed["metadata"]["resourceVersion"], namespace=None)
        self.watch.start()
        try:
            for index, op in enumerate(self.workload.ops):
                started = time.monotonic()
                await getattr(self, OP_METHODS[op["opcode"]])(index, op)
                key = f"{index}:{op['opcode']}"
                self.run.phases[key] = time.monotonic() - started
        finally:
            for task in self.churn_tasks:
                task.cancel()
            for task in self.churn_tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self.watch.stop()
        return self.run

    async def create_nodes(self, index: int, op: Mapping[str, Any]) -> None:
        template = self.workload.template(op.get("nodeTemplatePath", "../templates/node-default.yaml"))
        count = self.workload.count(op)
        strategy = op.get("labelNodePrepareStrategy")
        manifests = []
        for i in range(count):
            node = copy.deepcopy(template)
            meta = node.setdefault("metadata", {})
            # The suite names each node from its generateName and sets the usual hostname label.
            name = meta.pop("generateName", "scheduler-perf-") + f"{self.nodes_made + i:05d}"
            meta["name"] = name
            labels = meta.setdefault("labels", {})
            labels["kubernetes.io/hostname"] = name
            if strategy:
                # Round-robin over the values in name order, as the suite's label strategy.
                values = strategy["labelValues"]
                labels[strategy["labelKey"]] = values[i % len(values)]
            manifests.append(node)
        self.nodes_made += count
        await e2e_throughput.bounded(CREATE_WORKERS, [lambda m=m: self.create("/api/v1/nodes", m) for m in manifests])

    async def create_namespaces(self, index: int, op: Mapping[str, Any]) -> None:
        for i in range(self.workload.count(op)):
            await self.namespace(f"{op['prefix']}-{i}")

    async def pod_manifest(self, template: Mapping[str, Any], name: str) -> dict[str, Any]:
        pod = copy.deepcopy(dict(template))
        meta = pod.setdefault("metadata", {})
        meta.pop("generateName", None)
        meta["name"] = name
        spec = pod.setdefault("spec", {})
        spec["schedulerName"] = self.scheduler_name
        priority = spec.pop("priority", None)
        if priority is not None and not spec.get("priorityClassName"):
            # The suite's API server takes spec.priority as given; with Priority admission it comes from a class.
            class_name = f"scheduler-perf-priority-{priority}"
            if class_name not in self.priority_classes:
                body = {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": class_name},
                    "value": int(priority),
                }
                await self.create("/apis/scheduling.k8s.io/v1/priorityclasses", body, exists_ok=True)
                self.priority_classes.add(class_name)
            spec["priorityClassName"] = class_name
        return pod

    async def create_pods(self, index: int, op: Mapping[str, Any]) -> None:
        assert self.watch is not None
        namespace = op.get("namespace") or f"namespace-{index}"
        await self.namespace(namespace)
        # With neither, the suite's base pod, which is its pod-default.yaml (pause, 100m CPU, 500Mi).
        template_path = op.get("podTemplatePath") or self.workload.default_pod_template or BASE_POD
        template = self.workload.template(template_path)
        count = self.workload.count(op)
        prefix = (template.get("metadata") or {}).get("generateName") or "pod-"
        names = [f"{prefix}{index}-{i}" for i in range(count)]
        manifests = [await self.pod_manifest(template, name) for name in names[:1]]
        manifests += [copy.deepcopy(manifests[0]) for _ in names[1:]]
        for manifest, name in zip(manifests, names, strict=True):
            manifest["metadata"]["name"] = name
        path = f"/api/v1/namespaces/{namespace}/pods"
        started = time.monotonic()
        await e2e_throughput.bounded(CREATE_WORKERS, [lambda m=m: self.create(path, m) for m in manifests])
        created = time.monotonic() - started
        if op.get("skipWaitToCompletion"):
            return
        bound = await self.wait_bound(names)
        if op.get("collectMetrics"):
            binds = [self.watch.bound_at[n] for n in names if n in self.watch.bound_at]
            run = self.run
            run.measured, run.bound = count, len(binds)
            run.created_per_s = count / created if created > 0 else 0.0
            run.pods_per_s, run.samples = sampled_throughput(started, binds)
            if len(binds) > 1:
                first, last = min(binds), max(binds)
                run.first_to_last_pods_per_s = (len(binds) - 1) / (last - first) if last > first else 0.0
            run.seconds = (max(binds) if binds else time.monotonic()) - started
            if run.pods_per_s is None:
                run.note = "too short for the suite's once-a-second samples"
        if bound < count:
            message = f"op {index} ({namespace}): only {bound} of {count} pods bound"
            self.run.note = "; ".join(filter(None, [self.run.note, message]))
            if not op.get("collectMetrics"):
                raise RuntimeError(f"{self.workload.title}: {message}; the measured op would not be the suite's")

    async def wait_bound(self, names: Sequence[str]) -> int:
        """Wait until every pod of ``names`` is bound, the timeout passes, or none was bound for ``idle`` s."""
        assert self.watch is not None
        wanted = set(names)
        deadline = time.monotonic() + self.timeout
        last_count, last_change = -1, time.monotonic()
        while True:
            count = len(wanted & self.watch.bound_at.keys())
            now = time.monotonic()
            if count != last_count:
                last_count, last_change = count, now
            if count >= len(wanted) or now > deadline or now - last_change > self.idle:
                return count
            await self.watch.wait_for(len(self.watch.bound_at) + 1, timeout=1.0)

    async def churn(self, index: int, op: Mapping[str, Any]) -> None:
        namespace = op.get("namespace") or f"namespace-{index}"
        await self.namespace(namespace)
        templates = [self.workload.template(p) for p in op["templatePaths"]]
        interval = float(op.get("intervalMilliseconds", 500)) / 1000.0
        limit = int(op.get("number", 0))

        async def churn() -> None:
            made = 0
            while limit <= 0 or made < limit:
                template = templates[made % len(templates)]
                if template.get("kind") != "Pod":
                    raise SuiteError(f"{self.workload.title}: churn of {template.get('kind')} is not played")
                prefix = (template.get("metadata") or {}).get("generateName") or "churn-"
                pod = await self.pod_manifest(template, f"{prefix}{index}-{made}")
                await self.create(f"/api/v1/namespaces/{namespace}/pods", pod)
                made += 1
                await asyncio.sleep(interval)

        self.churn_tasks.append(asyncio.create_task(churn()))

    async def create_any(self, index: int, op: Mapping[str, Any]) -> None:
        body = self.workload.template(op["templatePath"])
        kind = body.get("kind", "")
        if kind not in ANY_KINDS:
            raise SuiteError(f"{self.workload.title}: createAny of {kind} is not played")
        path, namespaced = ANY_KINDS[kind]
        if namespaced:
            namespace = op.get("namespace") or f"namespace-{index}"
            await self.namespace(namespace)
            path = path.format(ns=namespace)
        await self.create(path, body)

    async def create_resource_driver(self, index: int, op: Mapping[str, Any]) -> None:
        """One ResourceSlice per matching node with maxClaimsPerNode devices, as the suite's test driver."""
        driver = op["driverName"]
        devices_per_node = self.workload.count(op, "maxClaimsPerNode")
        nodes = (await self.api.get("/api/v1/nodes"))["items"]
        names = [n["metadata"]["name"] for n in nodes if fnmatch.fnmatchcase(n["metadata"]["name"], op["nodes"])]
        slices = []
        for node in names:
            devices = [
                {
                    "name": f"instance-{i}",
                    "attributes": {
                        "model": {"string": "A100"},
                        "family": {"string": "GPU"},
                        "driverVersion": {"version": "1.2.3"},
                        "dra.example.com/numa": {"int": i},
                    },
                    "capacity": {"memory": {"value": "1Gi"}},
                }
                for i in range(devices_per_node)
            ]
            slices.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": {"name": node},
                    "spec": {
                        "driver": driver,
                        "nodeName": node,
                        "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
                        "devices": devices,
                    },
                }
            )
        path = "/apis/resource.k8s.io/v1/resourceslices"
        await e2e_throughput.bounded(CREATE_WORKERS, [lambda s=s: self.create(path, s) for s in slices])


def uses_dra(workload: Workload) -> bool:
    return any(op["opcode"] in ("createResourceDriver", "createAny") for op in workload.ops)


def play(workload: Workload, scheduler: str, args: argparse.Namespace) -> Run:
    """``workload`` under ``scheduler`` on a fresh cluster."""
    # As the suite's API server (no kubelets, so no TaintNodesByCondition admission and no node lifecycle
    # controller). The DRA case needs the controller manager's resourceclaim controller only (claims from templates).
    options = harness.without_kubelets()
    if uses_dra(workload):
        options.update(
            with_controller_manager=True, extra_controller_manager_args=["--controllers=resourceclaim-controller"]
        )
    if scheduler == "kube-scheduler":
        options.update(harness.kube_scheduler(args.qps, args.burst, deferred=False))
    with LocalCluster(verbose=False, **options) as cluster:
        replica = None
        if scheduler == "gpusched":
            k = harness.for_gpusched(cluster)
            replica = harness.gpusched(k, identity="scheduler-perf", qps=args.qps, burst=args.burst)
            replica.start().wait_ready(timeout=180).wait_leader()
        try:
            return asyncio.run(play_async(cluster, workload, scheduler, args))
        finally:
            if replica is not None:
                replica.stop()
                print(f"[{workload.title}] gpusched log: {replica.log_path}", file=sys.stderr)


async def play_async(cluster: LocalCluster, workload: Workload, scheduler: str, args: argparse.Namespace) -> Run:
    api = Api(cluster, connections=CREATE_WORKERS + 8)
    try:
        player = Player(api, workload, scheduler, timeout=args.timeout, idle=args.idle)
        return await player.play()
    finally:
        await api.close()


def ratio(ours: float | None, theirs: float | None) -> str:
    return f"{ours / theirs:.2f}x" if ours and theirs else ""


def table(workloads: Mapping[str, Workload | str], runs: Mapping[str, Mapping[str, Run | str]]) -> str:
    head = ["workload", "measured pods", "kube-scheduler pods/s", "gpusched pods/s", "ratio"]
    head += ["kube-scheduler first-to-last", "gpusched first-to-last", "ratio", "created/s (kube-scheduler, gpusched)"]
    head.append("note")
    rows: list[list[object]] = []
    for case, workload in workloads.items():
        if isinstance(workload, str):
            rows.append(harness.note_row(case, f"skipped: {workload}", len(head)))
            continue
        pair = runs.get(case, {})
        k, g = pair.get("kube-scheduler"), pair.get("gpusched")
        cells, notes = [], []
        for scheduler, r in (("kube-scheduler", k), ("gpusched", g)):
            if isinstance(r, Run):
                cells.append(f"{r.pods_per_s:.1f}" if r.pods_per_s is not None else "")
                if r.note:
                    notes.append(f"{scheduler}: {r.note}")
            else:
                cells.append("")
                if r is not None:
                    notes.append(f"{scheduler}: {r}")
        ks = k if isinstance(k, Run) else None
        gs = g if isinstance(g, Run) else None
        either = ks or gs
        measured = either.measured if either is not None else ""
        fl = [f"{r.first_to_last_pods_per_s:.1f}" if r else "" for r in (ks, gs)]
        created = ", ".join(f"{r.created_per_s:.0f}" if r else "-" for r in (ks, gs))
        rows.append(
            [
                workload.title,
                measured,
                *cells,
                ratio(gs.pods_per_s if gs else None, ks.pods_per_s if ks else None),
                *fl,
                ratio(gs.first_to_last_pods_per_s if gs else None, ks.first_to_last_pods_per_s if ks else None),
                created,
                "; ".join(notes),
            ]
        )
    return harness.markdown_table(head, rows, align="l" + "r" * 8 + "l")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", type=Path, help="the scheduler_perf folder (default: the Go module cache's)")
    parser.add_argument("--size", choices=("short", "mid", "performance"), default="mid")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the workloads' node and pod counts")
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES), help="comma-separated test case names")
    parser.add_argument("--schedulers", default=",".join(SCHEDULERS))
    parser.add_argument("--qps", type=float, default=5000.0, help="client QPS of both schedulers (the suite's)")
    parser.add_argument("--burst", type=int, default=5000, help="client burst of both schedulers (the suite's)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for an op's pods to bind")
    parser.add_argument("--idle", type=float, default=60.0, help="give up an op when no pod bound for this long")
    harness.add_json(parser)
    args = parser.parse_args(argv)
    schedulers = harness.chosen(parser, args.schedulers, SCHEDULERS, what="scheduler")
    if not 0 < args.scale <= 1000:
        parser.error("--scale must be positive")
    try:
        cases = load_cases(suite_dir(args.suite))
    except SuiteError as exc:
        print(f"scheduler_perf: {exc}", file=sys.stderr)
        return 2
    if "gpusched" in schedulers and (missing := harness.gpusched_missing()) is not None:
        print(f"scheduler_perf: {missing}", file=sys.stderr)
        return 2
    workloads: dict[str, Workload | str] = {}
    for name in harness.names(args.cases):
        try:
            workloads[name] = select(cases, name, args.size, args.scale)
        except SuiteError as exc:
            workloads[name] = str(exc)
    runs: dict[str, dict[str, Run | str]] = {}
    began = time.monotonic()
    for name, workload in workloads.items():
        if isinstance(workload, str):
            print(f"[{name}] skipped: {workload}", file=sys.stderr, flush=True)
            continue
        for scheduler in schedulers:
            print(f"[{workload.title}] {scheduler}: {dict(workload.params)}", file=sys.stderr, flush=True)
            try:
                result: Run | str = play(workload, scheduler, args)
            except (RuntimeError, SuiteError, OSError) as exc:
                result = f"failed: {exc}"
            runs.setdefault(name, {})[scheduler] = result
            shown = result.as_json() if isinstance(result, Run) else result
            print(f"[{workload.title}] {scheduler}: {shown}", file=sys.stderr, flush=True)
    load = os.getloadavg()
    print(
        f"\nscheduler_perf ({KUBERNETES}), size {args.size}, scale {args.scale}; "
        f"{time.monotonic() - began:.0f} s; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end"
    )
    print(table(workloads, runs))
    if args.json:
        out: dict[str, Any] = {
            "setup": {
                "suite": KUBERNETES,
                "size": args.size,
                "scale": args.scale,
                "qps": args.qps,
                "burst": args.burst,
                "load_average_at_end": [round(x, 2) for x in load],
                "seconds": round(time.monotonic() - began, 1),
            }
        }
        for name, workload in workloads.items():
            if isinstance(workload, str):
                out[name] = {"skipped": workload}
                continue
            entry: dict[str, Any] = {"workload": workload.name, "params": dict(workload.params)}
            entry["feature_gates_not_applied"] = dict(workload.feature_gates)
            for scheduler, r in runs.get(name, {}).items():
                entry[scheduler] = r.as_json() if isinstance(r, Run) else {"failed": r}
            out[name] = entry
        harness.write_json(args.json, out)
    complete = all(isinstance(r, Run) and r.bound == r.measured for pair in runs.values() for r in pair.values())
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
