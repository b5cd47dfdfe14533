"""A backlog of DRA pods on a real API server: gpusched against kube-scheduler, side by side, allocations checked.

For each scheduler a fresh local control plane (tests/e2e/localcluster.py: etcd, kube-apiserver,
kube-controller-manager, kwok) gets the same objects:

- ``--nodes`` kwok nodes (64 CPUs, 512 GiB, 110 pods) with no ``nvidia.com/gpu`` capacity: their 8 GPUs are
  published only through one ResourceSlice per node, as NVIDIA's DRA driver publishes them (tests/api/dra_objects.py:
  devices ``gpu-<i>`` with type, uuid, productName, pcieBusID and ``resource.kubernetes.io/pcieRoot``, two PCIe
  roots of 4 GPUs, capacity memory), and NVIDIA's ``gpu.nvidia.com`` DeviceClass;
- ResourceClaimTemplates ``gpu-1``, ``gpu-2``, ``gpu-4`` and ``gpu-8`` (that many GPUs of the class; ``gpu-4``
  with a ``matchAttribute`` constraint on ``resource.kubernetes.io/pcieRoot``: the 4 GPUs under one PCIe root);
- ``--pods`` pods that each take one claim from a template: all ``gpu-1`` by default; with ``--mix``, per 20 pods
  2 of 8 GPUs, 3 of 4, 5 of 2 and 10 of 1, created largest first (so that a scheduler taking them in creation
  order can pack them whole, whatever node it picks for each);
- ``--nodes`` defaults to the fewest nodes whose GPUs hold the backlog, plus 10 %.

The scheduler is held back until every pod exists and kube-controller-manager's resourceclaim controller has made
each pod's claim from its template and written it into the pod's ``status.resourceClaimStatuses``. Then the
scheduler is started and the clock starts. Reported per scheduler: seconds from the start to the last pod bound,
pods/s over them, the first bind, p50 and p99 of start-to-bind per pod (every pod was created before the start,
so this is each pod's wait in the scheduler; a create-to-bind would add the time the backlog was built), the
scheduler's CPU a pod bound from its start to the end of the wait (the last bind; ``--idle`` seconds later when pods
are left pending; benchmarks/proc_cpu.py, start-up included), and the allocations found valid afterwards. A run ends
when every pod is bound or no pod has been bound for ``--idle`` seconds (a pod no node has room for left pending,
with its last FailedScheduling message in the report).

A pod's allocation is valid when each of its claims is allocated, lists the pod in ``status.reservedFor``, has
exactly the devices its request asks for, all on the pod's node and all in the node's ResourceSlice, none held by
another claim, and (``gpu-4``) all under one PCIe root.

Cases: ``kube-scheduler`` (the stock kube-scheduler of the control plane, its DynamicResources plugin, started
with LocalCluster's ``defer_scheduler``; client QPS and burst set by a KubeSchedulerConfiguration) and
``gpusched`` (``gpusched run``, as benchmarks/e2e_throughput.py starts it in backlog mode), both at the client
QPS and burst given by ``--qps`` / ``--burst``.

    .venv/bin/python -m benchmarks.dra_backlog [--pods 2000] [--mix] [--nodes N] [--cases kube-scheduler,gpusched]
                                               [--qps 1000 --burst 2000] [--json FILE]

Needs the control-plane binaries (tests/e2e/build-controlplane.sh) and, for gpusched, ``gpusched run``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import platform
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import e2e_throughput, harness, proc_cpu, scale
from benchmarks.e2e_throughput import Api
from tests.api import dra_objects
from tests.e2e import kube
from tests.e2e.localcluster import LocalCluster

CASES = ("kube-scheduler", "gpusched")
#: e2e_throughput's BindWatch watches this namespace.
NAMESPACE = e2e_throughput.NAMESPACE
GPUS_PER_NODE = 8
RESOURCE = "/apis/resource.k8s.io/v1"
#: The request name in every template (tests/api/dra_objects.py's default).
REQUEST = "gpus"
#: GPUs per claim -> whether its devices must share one PCIe root.
TEMPLATES = {1: False, 2: False, 4: True, 8: False}
#: ``--mix``: GPUs per claim and pods of that size per 20 pods, largest first.
MIX = ((8, 2), (4, 3), (2, 5), (1, 10))
SCHEDULER_NAME = {"kube-scheduler": "default-scheduler", "gpusched": kube.SCHEDULER_NAME}


def template_name(gpus: int) -> str:
    return f"gpu-{gpus}"


def claim_template(gpus: int) -> dict[str, Any]:
    same = dra_objects.PCIE_ROOT if TEMPLATES[gpus] else ""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": template_name(gpus), "namespace": NAMESPACE},
        "spec": {"spec": dra_objects.claim_spec(dra_objects.request(REQUEST, gpus), same=same)},
    }


def sizes(pods: int, *, mix: bool) -> list[int]:
    """GPUs per pod, in creation order: all 1, or the mix's shares rounded, largest first, summing to ``pods``."""
    if not mix:
        return [1] * pods
    per = sum(n for _, n in MIX)
    counts = {gpus: pods * n // per for gpus, n in MIX}
    counts[1] += pods - sum(counts.values())
    return [gpus for gpus, _ in MIX for _ in range(counts[gpus])]


def dra_pod(name: str, gpus: int, *, scheduler_name: str) -> dict[str, Any]:
    """kube.pod (1 CPU, 1 GiB, no extended resources) with one claim made from the ``gpus`` template."""
    manifest = kube.pod(name, scheduler_name=scheduler_name)
    manifest["metadata"]["labels"]["gpus"] = str(gpus)
    manifest["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template_name(gpus)}]
    manifest["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return manifest


@dataclass(slots=True)
class Result:
    case: str
    pods: int
    bound: int = 0
    seconds: float = math.nan
    first_bind_s: float = math.nan
    p50_s: float = math.nan
    p99_s: float = math.nan
    valid: int = 0
    setup_s: float = math.nan
    claims_s: float = math.nan
    problems: list[str] = field(default_factory=list)
    note: str = ""
    #: gpusched only, from its /metrics after the last bind: one scheduling cycle, and seconds per plugin.
    cycle_mean_ms: float = math.nan
    cycle_p99_ms: float = math.nan
    plugin_seconds: dict[str, float] = field(default_factory=dict)
    #: CPU seconds of the scheduler's processes from its start to the end of the wait for binds (the last bind, or
    #: ``--idle`` seconds after it when pods are left pending), start-up included (benchmarks/proc_cpu.py: every
    #: process this one started, the control plane's left out).
    scheduler_cpu_s: float = math.nan

    @property
    def pods_per_s(self) -> float:
        return self.bound / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_ms_per_pod(self) -> float:
        return 1000.0 * self.scheduler_cpu_s / self.bound if self.bound else math.nan

    def as_json(self) -> dict[str, Any]:
        return {
            "pods": self.pods,
            "bound": self.bound,
            "seconds": round(self.seconds, 2),
            "pods_per_s": round(self.pods_per_s, 1),
            "first_bind_s": round(self.first_bind_s, 2),
            "p50_s": round(self.p50_s, 2),
            "p99_s": round(self.p99_s, 2),
            "valid": self.valid,
            "setup_s": round(self.setup_s, 1),
            "claims_s": round(self.claims_s, 1),
            "problems": self.problems[:20],
            "note": self.note,
            "cycle_mean_ms": round(self.cycle_mean_ms, 2),
            "cycle_p99_ms": round(self.cycle_p99_ms, 2),
            "plugin_seconds": {k: round(v, 2) for k, v in list(self.plugin_seconds.items())[:8]},
            "scheduler_cpu_s": round(self.scheduler_cpu_s, 2),
        }


async def list_all(api: Api, path: str) -> list[dict[str, Any]]:
    """Every item of a list, 500 a page."""
    items: list[dict[str, Any]] = []
    token = ""
    while True:
        query = {"limit": "500", **({"continue": token} if token else {})}
        page = await api.get(path, **query)
        items.extend(page["items"])
        token = page["metadata"].get("continue") or ""
        if not token:
            return items


async def create_nodes(api: Api, count: int, *, concurrency: int) -> None:
    """``count`` kwok nodes without GPU capacity, one ResourceSlice each, the DeviceClass; wait until all are Ready."""
    names = [f"gpu-{i:05d}" for i in range(count)]
    nodes = [kube.gpu_node(n, gpus=0, rack=f"r{i // 16:03d}", block=f"b{i // 128:02d}") for i, n in enumerate(names)]
    await api.post(f"{RESOURCE}/deviceclasses", dra_objects.gpu_class())
    await e2e_throughput.bounded(concurrency, [lambda m=m: api.post("/api/v1/nodes", m) for m in nodes])
    slices = [dra_objects.gpu_slice(n, GPUS_PER_NODE) for n in names]
    await e2e_throughput.bounded(concurrency, [lambda s=s: api.post(f"{RESOURCE}/resourceslices", s) for s in slices])
    deadline = time.monotonic() + 300
    while True:
        ready = sum(
            any(c["type"] == "Ready" and c["status"] == "True" for c in (n.get("status") or {}).get("conditions", []))
            for n in await list_all(api, "/api/v1/nodes")
        )
        if ready >= count:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {ready} of {count} nodes Ready after 300 s")
        await asyncio.sleep(1)


async def wait_claims(api: Api, count: int, *, timeout: float) -> None:
    """Until the resourceclaim controller has made every pod's claim and named it in the pod's status."""
    deadline = time.monotonic() + timeout
    while True:
        claims = await list_all(api, f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims")
        pods = await list_all(api, f"/api/v1/namespaces/{NAMESPACE}/pods")
        named = sum(
            1 for p in pods if any(s.get("resourceClaimName") for s in p["status"].get("resourceClaimStatuses", []))
        )
        if len(claims) >= count and named >= count:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"after {timeout:.0f} s: {len(claims)} claims, {named} pods naming theirs, of {count}")
        await asyncio.sleep(2)


async def validate(api: Api, expected: Mapping[str, int]) -> tuple[int, list[str]]:
    """The pods (name -> GPUs) whose allocations are valid (see the module's docstring), and what was wrong."""
    pods = {p["metadata"]["name"]: p for p in await list_all(api, f"/api/v1/namespaces/{NAMESPACE}/pods")}
    listed = await list_all(api, f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims")
    claims = {c["metadata"]["name"]: c for c in listed}
    devices: dict[tuple[str, str, str], tuple[str, str]] = {}  # (driver, pool, device) -> (node, PCIe root)
    for s in await list_all(api, f"{RESOURCE}/resourceslices"):
        spec = s["spec"]
        for d in spec.get("devices", []):
            root = ((d.get("attributes") or {}).get(dra_objects.PCIE_ROOT) or {}).get("string", "")
            devices[(spec["driver"], spec["pool"]["name"], d["name"])] = (spec.get("nodeName", ""), root)
    holders: dict[tuple[str, str, str], list[str]] = {}
    for name, c in claims.items():
        for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", []):
            holders.setdefault((r["driver"], r["pool"], r["device"]), []).append(name)
    problems: list[str] = []
    for key, names in holders.items():
        if len(names) > 1:
            problems.append(f"device {'/'.join(key)} in {len(names)} claims: {', '.join(sorted(names))}")
    shared = {name for names in holders.values() if len(names) > 1 for name in names}
    valid = 0
    for name, gpus in expected.items():
        wrong = pod_problems(pods.get(name), gpus, claims, devices, shared)
        if wrong:
            problems.append(f"pod {name} ({gpus} GPUs): {wrong}")
        else:
            valid += 1
    return valid, problems


def pod_problems(
    pod: Mapping[str, Any] | None,
    gpus: int,
    claims: Mapping[str, Mapping[str, Any]],
    devices: Mapping[tuple[str, str, str], tuple[str, str]],
    shared: set[str],
) -> str:
    """What is wrong with one pod's allocation, or '' when it is valid."""
    if pod is None:
        return "gone"
    node = pod["spec"].get("nodeName")
    if not node:
        return "not bound"
    statuses = pod.get("status", {}).get("resourceClaimStatuses", [])
    made = [s.get("resourceClaimName") for s in statuses if s.get("name") == "gpu"]
    if not made or not made[0]:
        return "no claim named in status.resourceClaimStatuses"
    claim = claims.get(made[0])
    if claim is None:
        return f"claim {made[0]} missing"
    status = claim.get("status") or {}
    reserved = status.get("reservedFor", [])
    if not any(r.get("resource") == "pods" and r.get("uid") == pod["metadata"]["uid"] for r in reserved):
        return f"claim {made[0]}: reservedFor {reserved} does not name the pod"
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results", [])
    if not results:
        return f"claim {made[0]} not allocated"
    if made[0] in shared:
        return f"claim {made[0]} holds a device another claim holds"
    if len(results) != gpus or any(r.get("request") != REQUEST for r in results):
        asked = [r.get("request") for r in results]
        return f"claim {made[0]}: {len(results)} results for requests {asked}, want {gpus} for {REQUEST}"
    placed = [devices.get((r["driver"], r["pool"], r["device"])) for r in results]
    if any(p is None for p in placed):
        return f"claim {made[0]}: a device in no ResourceSlice: {results}"
    nodes = {p[0] for p in placed if p is not None}
    if nodes != {node}:
        return f"claim {made[0]}: devices on {sorted(nodes)}, pod on {node}"
    roots = {p[1] for p in placed if p is not None}
    if TEMPLATES[gpus] and len(roots) != 1:
        return f"claim {made[0]}: devices under PCIe roots {sorted(roots)}, want one"
    return ""


async def run_backlog(
    cluster: LocalCluster,
    *,
    case: str,
    per_pod: Sequence[int],
    nodes: int,
    start_scheduler: Callable[[], object],
    concurrency: int,
    timeout: float,
    idle: float,
) -> Result:
    api = Api(cluster, connections=concurrency + 8)
    result = Result(case=case, pods=len(per_pod))
    try:
        began = time.monotonic()
        await create_nodes(api, nodes, concurrency=concurrency)
        await api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        for gpus in TEMPLATES:
            await api.post(f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaimtemplates", claim_template(gpus))
        listed = await api.get(f"/api/v1/namespaces/{NAMESPACE}/pods")
        watch = e2e_throughput.BindWatch(api, listed["metadata"]["resourceVersion"])
        watch.start()
        expected = {f"pod-{i:05d}": gpus for i, gpus in enumerate(per_pod)}
        manifests = [dra_pod(n, g, scheduler_name=SCHEDULER_NAME[case]) for n, g in expected.items()]
        path = f"/api/v1/namespaces/{NAMESPACE}/pods"
        await e2e_throughput.bounded(concurrency, [lambda m=m: api.post(path, m) for m in manifests])
        created = time.monotonic()
        await wait_claims(api, len(manifests), timeout=timeout)
        result.setup_s = created - began
        result.claims_s = time.monotonic() - created
        print(
            f"[{case}] {nodes} nodes, slices and {len(manifests)} pods in {result.setup_s:.1f} s; "
            f"every claim made {result.claims_s:.1f} s later",
            file=sys.stderr,
            flush=True,
        )
        if watch.bound_at:
            raise RuntimeError(f"{len(watch.bound_at)} pods were bound before the scheduler started")
        started = time.monotonic()
        cpu = proc_cpu.Reading()
        await asyncio.to_thread(start_scheduler)
        deadline = started + timeout
        while len(watch.bound_at) < len(manifests) and time.monotonic() < deadline:
            await watch.wait_for(len(manifests), timeout=min(5.0, deadline - time.monotonic()))
            # Pods the scheduler finds no room for would otherwise hold the run until the timeout.
            if time.monotonic() - max(watch.bound_at.values(), default=started) > idle:
                break
        result.scheduler_cpu_s = cpu.spent().get("scheduler", math.nan)
        watch.stop()
        waits = [at - started for at in watch.bound_at.values()]
        result.bound = len(waits)
        if waits:
            result.seconds = max(waits)
            result.first_bind_s = min(waits)
            result.p50_s = e2e_throughput.percentile(waits, 0.50)
            result.p99_s = e2e_throughput.percentile(waits, 0.99)
        if result.bound < result.pods:
            pending = [n for n in expected if n not in watch.bound_at]
            by_size = Counter(expected[n] for n in pending)
            shape = ", ".join(f"{c} of {g} GPUs" for g, c in sorted(by_size.items(), reverse=True))
            result.note = f"{len(pending)} left pending ({shape}): no bind for {idle:.0f} s, or {timeout:.0f} s passed"
            result.problems = await why_pending(api, pending)
        valid, problems = await validate(api, expected)
        result.valid = valid
        result.problems += problems
        return result
    finally:
        await api.close()


async def why_pending(api: Api, names: Sequence[str], *, most: int = 5) -> list[str]:
    """The last FailedScheduling message of the first ``most`` pods left pending."""
    events = await list_all(api, f"/api/v1/namespaces/{NAMESPACE}/events")
    last: dict[str, str] = {}
    for e in sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or ""):
        if e.get("reason") == "FailedScheduling":
            last[e["involvedObject"]["name"]] = e.get("message") or e.get("note") or ""
    return [f"pod {n} pending: {last.get(n, 'no FailedScheduling Event')}" for n in names[:most]]


def run_case(case: str, args: argparse.Namespace, per_pod: Sequence[int]) -> Result | str:
    """One scheduler on a fresh cluster: a Result, or why it could not run."""
    options: dict[str, Any] = {}
    if case == "gpusched":
        if (missing := harness.gpusched_missing()) is not None:
            return missing
    else:
        options = harness.kube_scheduler(args.qps, args.burst)
    with LocalCluster(verbose=False, **options) as cluster:
        replica: kube.Gpusched | None = None
        start: Callable[[], object] = cluster.start_scheduler
        if case == "gpusched":
            k = harness.for_gpusched(cluster)
            # As benchmarks/e2e_throughput.py's backlog mode: the process is spawned when the clock starts.
            replica = harness.gpusched(k, qps=args.qps, burst=args.burst)
            start = replica.start
        try:
            result = asyncio.run(
                run_backlog(
                    cluster,
                    case=case,
                    per_pod=per_pod,
                    nodes=args.nodes,
                    start_scheduler=start,
                    concurrency=args.concurrency,
                    timeout=args.timeout,
                    idle=args.idle,
                )
            )
            if replica is not None:
                cycles(result, replica.metrics())
        finally:
            if replica is not None:
                replica.stop()
                print(f"[{case}] gpusched log: {replica.log_path}", file=sys.stderr, flush=True)
        if result.bound < result.pods or result.valid < result.pods:
            log = replica.log_path if replica is not None else cluster.procs["kube-scheduler"].log_path
            print(f"[{case}] the scheduler's log ends:\n{log_tail(log, 30)}", file=sys.stderr, flush=True)
        return result


def cycles(result: Result, metrics: str) -> None:
    """gpusched's cycle time and per-plugin seconds from its /metrics (benchmarks/scale.py's readers)."""
    buckets, total, count = scale.histogram(metrics, scale.CYCLE_METRIC)
    if count:
        result.cycle_mean_ms = 1000 * total / count
        result.cycle_p99_ms = 1000 * scale.histogram_quantile(0.99, buckets)
    result.plugin_seconds = scale.plugin_seconds(metrics)


def log_tail(path: Path, lines: int) -> str:
    """The last lines of a log, without kube-scheduler's complaint, every few seconds, that the local control plane
    has no request-header CA (it has no aggregated API servers)."""
    try:
        kept = [line for line in path.read_text(errors="replace").splitlines() if "extension-apiserver" not in line]
        return "\n".join(kept[-lines:])
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"


def table(results: Mapping[str, Result | str]) -> str:
    head = ["scheduler", "pods", "bound", "seconds", "pods/s", "first bind (s)", "p50 (s)", "p99 (s)"]
    head += ["scheduler CPU ms a pod", "valid allocations"]
    rows: list[list[object]] = []
    for case, r in results.items():
        if isinstance(r, str):
            rows.append(harness.note_row(case, f"not run: {r}", len(head)))
            continue
        figures = [
            f"{r.seconds:.1f}",
            f"{r.pods_per_s:.1f}",
            f"{r.first_bind_s:.2f}",
            f"{r.p50_s:.2f}",
            f"{r.p99_s:.2f}",
            f"{r.cpu_ms_per_pod:.2f}",
        ]
        rows.append([case, r.pods, r.bound, *figures, f"{r.valid}/{r.pods}"])
    return harness.markdown_table(head, rows, align="l" + "r" * 9)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--mix", action="store_true", help="claims of 1, 2, 4 (one PCIe root) and 8 GPUs")
    parser.add_argument("--nodes", type=int, default=0, help="default: the GPUs the backlog takes, plus 10 %%")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    parser.add_argument("--qps", type=float, default=1000.0, help="client QPS of both schedulers")
    parser.add_argument("--burst", type=int, default=2000, help="client burst of both schedulers")
    parser.add_argument("--concurrency", type=int, default=64, help="creates in flight while building the backlog")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the claims, then the binds")
    parser.add_argument("--idle", type=float, default=120.0, help="stop waiting after this many seconds without a bind")
    harness.add_json(parser)
    args = parser.parse_args(argv)
    cases = harness.chosen(parser, args.cases, CASES)
    per_pod = sizes(args.pods, mix=args.mix)
    gpus = sum(per_pod)
    if not args.nodes:
        args.nodes = math.ceil(gpus * 1.1 / GPUS_PER_NODE)
    if gpus > args.nodes * GPUS_PER_NODE:
        parser.error(f"the backlog takes {gpus} GPUs, more than {args.nodes} nodes of {GPUS_PER_NODE} have")

    results: dict[str, Result | str] = {}
    for case in cases:
        print(f"[{case}] starting", file=sys.stderr, flush=True)
        results[case] = r = run_case(case, args, per_pod)
        print(f"[{case}] {r if isinstance(r, str) else r.as_json()}", file=sys.stderr, flush=True)
    shape = ", ".join(f"{n} x {g} GPU" for g, n in sorted(Counter(per_pod).items(), reverse=True))
    print(
        f"\n{args.nodes} kwok nodes of {GPUS_PER_NODE} GPUs (ResourceSlices only); {len(per_pod)} pods with one claim "
        f"each from a template ({shape}; {gpus} GPUs); client QPS {args.qps:g} / burst {args.burst} for both "
        f"schedulers; {platform.python_implementation()} {platform.python_version()}"
    )
    print(table(results))
    for case, r in results.items():
        if isinstance(r, Result) and r.plugin_seconds:
            top = ", ".join(f"{k} {v:.1f} s" for k, v in list(r.plugin_seconds.items())[:5])
            print(f"\n{case}: cycle mean {r.cycle_mean_ms:.1f} ms, p99 {r.cycle_p99_ms:.1f} ms; plugins: {top}")
        if isinstance(r, Result) and r.note:
            print(f"\n{case}: {r.note}")
        if isinstance(r, Result) and r.problems:
            print(f"\n{case}: {len(r.problems)} problems, the first ones:")
            for line in r.problems[:10]:
                print(f"  {line}")
    if args.json:
        out: dict[str, Any] = {c: r.as_json() if isinstance(r, Result) else {"not_run": r} for c, r in results.items()}
        out["setup"] = {"nodes": args.nodes, "pods": len(per_pod), "mix": args.mix, "gpus": gpus}
        out["setup"].update(qps=args.qps, burst=args.burst, concurrency=args.concurrency)
        harness.write_json(args.json, out)
    return 0 if all(isinstance(r, Result) and r.valid == r.pods for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
