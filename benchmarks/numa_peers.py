"""NUMA side by side: gpusched against scheduler-plugins' NodeResourceTopologyMatch, judged by the kubelet's rules.

On nodes whose kubelet runs the Topology Manager with ``single-numa-node`` or ``restricted``, a scheduler that binds
a pod where no zone (or not the fewest zones) can give its GPUs, whole CPUs and memory gets it refused by the
kubelet with ``TopologyAffinityError`` (issue 42). kwok admits everything, so every binding each scheduler made is
replayed afterwards, in binding order, by benchmarks/numa_oracle.py (the Topology Manager written apart from
gpusched's own replay) on the zones as they were published.

Each case gets a fresh local control plane (tests/e2e/localcluster.py, kwok nodes) with the same setup:

- ``--nodes`` nodes of 8 GPUs, 64 CPUs and 512 GiB in two NUMA zones (GPUs 0-3 on zone 0, 4-7 on zone 1, as the
  ``gpusched.io/gpu-topology`` annotation says), the zones fragmented by pods already running there (bound by
  name, Guaranteed, each inside one zone, their GPU indices annotated), one pattern of :data:`FRAGMENTS` a node;
- one NodeResourceTopology object a node (``topology.node.k8s.io/v1alpha2``, the CRD from its Go module), its
  ``available`` net of those pods and the agents' podset fingerprint of them
  (``scheduler.cache.numa_store.pods_fingerprint``), published once before the scheduler starts and never again: no
  agent runs, as kwok leaves it, so a scheduler must count the pods it binds itself (and, restarted, tell by the
  fingerprint that the object already shows the pods running there);
- a stream of ``--pods`` Guaranteed pods of whole CPUs, the shapes of :data:`SHAPES` in turn (1 to 6 GPUs, one
  CPU-only pod; the 6-GPU pods fit no zone, so only ``restricted`` can admit them), created one at a time: each
  after the previous one was bound or marked unschedulable, so that every scheduler decides the same pods in the
  same order on what it knows. Then ``--settle`` seconds for late bindings (a cache resync may release a pod).

Cases: ``gpusched`` (``gpusched run`` as the e2e suite runs it, default profile), ``nrt-leastnuma``
(scheduler-plugins' kube-scheduler with NodeResourceTopologyMatch, scoring LeastNUMANodes, its default cache that
reads the objects as published) and ``nrt-overreserve`` (the same plugin scoring MostAllocated, with the
overreserve cache that counts the pods it reserved until the objects are resynced, ``cacheResyncPeriodSeconds``
``--resync``; the stream starts two resync periods after it is up, since it trusts no node running pods of
another scheduler until a resync has matched the object's fingerprint). The peer is tests/e2e/build-peers.sh's
``sp-scheduler`` (scheduler-plugins v0.34.7); a case that cannot run says why. Each case runs once per
``--policies`` entry.

Per case: pods bound; of them, those the kubelet would refuse; pods left unbound that some node's kubelet would
have admitted when their turn came (``missed``); for gpusched, whose ``gpusched.io/gpu-ids`` annotation names the
GPUs it picked, how many pods got exactly the GPUs of the zone(s) the kubelet would take them from. Beside them, a
reference: the pods the kubelet's rules admit when each goes to the first node that admits it, on the true zones.

    .venv/bin/python -m benchmarks.numa_peers [--nodes 16 --pods 48] [--cases gpusched,nrt-leastnuma]
                                              [--policies single-numa-node,restricted] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import harness, numa_oracle
from scheduler.api.devices import numa
from scheduler.cache import numa_store

CASES = ("gpusched", "nrt-leastnuma", "nrt-overreserve")
NAMESPACE = "numa"
GPU = "nvidia.com/gpu"
ZONES = 2
GPUS_PER_ZONE = 4
CPUS_PER_ZONE = 32
MEMORY_PER_ZONE_MIB = 256 * 1024
#: Memory of every pod (the zones never run short of it: the figures are about GPUs and CPUs).
POD_MEMORY_MIB = 1024
NRT_PATH = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies"
HERE = Path(__file__).resolve().parent
FETCH_CRDS = HERE.parent / "tests" / "e2e" / "fetch-workload-crds.sh"

#: The pods already on each node, one pattern a node in turn: (zone, GPUs, CPUs) each.
FRAGMENTS: tuple[tuple[tuple[int, int, int], ...], ...] = (
    ((0, 1, 4), (1, 2, 8)),  # 3 + 2 GPUs free
    ((0, 2, 8), (1, 1, 4)),  # 2 + 3
    ((0, 1, 28), (1, 1, 4)),  # 3 + 3 GPUs, but zone 0 has 4 CPUs left
    ((0, 3, 6),),  # 1 + 4
    ((1, 3, 6),),  # 4 + 1
    ((0, 2, 4), (1, 2, 4)),  # 2 + 2: 4 GPUs free on the node, no zone holds 3
    ((0, 1, 2), (1, 1, 30)),  # 3 + 3 GPUs, zone 1 has 2 CPUs left
    (),  # 4 + 4
)
#: The stream's pods in turn: (GPUs, CPUs).
SHAPES: tuple[tuple[int, int], ...] = (
    (1, 4),
    (2, 8),
    (4, 16),
    (1, 2),
    (3, 12),
    (2, 16),
    (1, 4),
    (4, 8),
    (2, 4),
    (6, 12),
    (0, 24),
    (3, 6),
)


# --- the workload: pure data -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fragment:
    name: str
    node: str
    zone: int
    gpu_ids: tuple[int, ...]
    cpus: int


@dataclass(frozen=True, slots=True)
class StreamPod:
    name: str
    gpus: int
    cpus: int


@dataclass(frozen=True, slots=True)
class Workload:
    nodes: tuple[str, ...]
    fragments: tuple[Fragment, ...]
    stream: tuple[StreamPod, ...]

    def free(self, node: str) -> list[dict[str, int]]:
        """What each zone of ``node`` has left once its fragments run: the objects' ``available`` (CPUs whole,
        memory in MiB)."""
        free = [{GPU: GPUS_PER_ZONE, "cpu": CPUS_PER_ZONE, "memory": MEMORY_PER_ZONE_MIB} for _ in range(ZONES)]
        for f in self.fragments:
            if f.node == node:
                free[f.zone][GPU] -= len(f.gpu_ids)
                free[f.zone]["cpu"] -= f.cpus
                free[f.zone]["memory"] -= POD_MEMORY_MIB
        return free


def workload(*, nodes: int, pods: int, prefix: str = "numa") -> Workload:
    """``nodes`` nodes fragmented by :data:`FRAGMENTS` in turn and a stream of ``pods`` pods of :data:`SHAPES` in
    turn; names start with ``prefix``."""
    names = tuple(f"{prefix}-{i:02d}" for i in range(nodes))
    fragments = []
    for i, node in enumerate(names):
        used = [0] * ZONES
        for j, (zone, gpus, cpus) in enumerate(FRAGMENTS[i % len(FRAGMENTS)]):
            first = zone * GPUS_PER_ZONE + used[zone]
            used[zone] += gpus
            fragments.append(Fragment(f"{node}-held-{j}", node, zone, tuple(range(first, first + gpus)), cpus))
    stream = tuple(StreamPod(f"{prefix}-pod-{k:03d}", *SHAPES[k % len(SHAPES)]) for k in range(pods))
    return Workload(names, tuple(fragments), stream)


def zone_of_gpu(index: int) -> int:
    return index // GPUS_PER_ZONE


def node_manifest(name: str) -> dict[str, Any]:
    from tests.e2e import kube

    return kube.gpu_node(
        name, gpus=ZONES * GPUS_PER_ZONE, cpu=str(ZONES * CPUS_PER_ZONE), memory="512Gi", nvlink_groups=ZONES
    )


def pod_manifest(name: str, *, gpus: int, cpus: int, scheduler_name: str) -> dict[str, Any]:
    """A Guaranteed pod: requests equal to limits, whole CPUs."""
    requests = {"cpu": str(cpus), "memory": f"{POD_MEMORY_MIB}Mi"} | ({GPU: str(gpus)} if gpus else {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "numa-peers"}, "annotations": {}},
        "spec": {
            "schedulerName": scheduler_name,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/train:latest",
                    "resources": {"requests": requests, "limits": dict(requests)},
                }
            ],
        },
    }


def fragment_manifest(f: Fragment) -> dict[str, Any]:
    """A fragment: bound by name (no scheduler), its GPU indices annotated as gpusched would have written them."""
    from tests.e2e import kube

    body = pod_manifest(f.name, gpus=len(f.gpu_ids), cpus=f.cpus, scheduler_name="default-scheduler")
    body["spec"]["nodeName"] = f.node
    if f.gpu_ids:
        body["metadata"]["annotations"][kube.ANNOTATION_GPU_IDS] = ",".join(map(str, f.gpu_ids))
    return body


def nrt_manifest(
    node: str, free: Sequence[Mapping[str, int]], *, policy: str, pods: Sequence[tuple[str, str]]
) -> dict[str, Any]:
    """The node's NodeResourceTopology as NFD's topology-updater publishes it: ``available`` = ``free``, and the
    fingerprint of ``pods`` (namespace, name), the pods running there."""
    capacity = {GPU: GPUS_PER_ZONE, "cpu": CPUS_PER_ZONE, "memory": MEMORY_PER_ZONE_MIB}

    def resource(name: str, left: int) -> dict[str, str]:
        unit = "Mi" if name == "memory" else ""
        cap = f"{capacity[name]}{unit}"
        return {"name": name, "capacity": cap, "allocatable": cap, "available": f"{left}{unit}"}

    zones = [
        {
            "name": f"node-{i}",
            "type": "Node",
            "costs": [{"name": f"node-{j}", "value": 10 if i == j else 20} for j in range(len(free))],
            "resources": [resource(name, zone[name]) for name in ("cpu", "memory", GPU)],
        }
        for i, zone in enumerate(free)
    ]
    legacy = {"single-numa-node": "SingleNUMANodeContainerLevel", "restricted": "RestrictedContainerLevel"}[policy]
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": node},
        "topologyPolicies": [legacy],
        "attributes": [
            {"name": "topologyManagerPolicy", "value": policy},
            {"name": "topologyManagerScope", "value": "container"},
            {"name": numa.FINGERPRINT, "value": numa_store.pods_fingerprint(pods)},
            {"name": numa.FINGERPRINT_METHOD, "value": numa.FINGERPRINT_ALL},
        ],
        "zones": zones,
    }


# --- judging -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Binding:
    pod: str
    node: str
    #: The GPU indices the scheduler says it picked (``gpusched.io/gpu-ids``; empty when it names none).
    gpu_ids: tuple[int, ...] = ()


@dataclass(slots=True)
class Played:
    """What a scheduler did with the stream."""

    #: In the order they were seen (a poll's new ones in creation order).
    bindings: list[Binding]
    #: Pods left unbound at the end -> the scheduler's message on each ("" if it wrote none).
    unbound: dict[str, str]
    #: Pods neither bound nor marked unschedulable within the wait.
    unanswered: int


@dataclass(slots=True)
class Outcome:
    case: str
    policy: str
    pods: int
    bound: int
    #: Bound pods the kubelet would refuse: (pod, node, "G GPUs C CPUs").
    refused: list[tuple[str, str, str]] = field(default_factory=list)
    #: Pods left unbound though a node's kubelet would have admitted them when their turn came (:func:`missed`).
    missed: list[str] = field(default_factory=list)
    #: Pods with GPUs admitted whose picked GPU indices the scheduler named, and of them those whose GPUs per zone
    #: are what the kubelet takes from each zone.
    gpus_named: int = 0
    gpus_in_zone: int = 0
    #: The others: (pod, node, the GPU indices picked, GPUs the kubelet takes per zone).
    gpus_elsewhere: list[tuple[str, str, tuple[int, ...], dict[int, int]]] = field(default_factory=list)
    #: Pods neither bound nor marked unschedulable within the wait.
    unanswered: int = 0
    #: Pods left unbound -> "G GPUs C CPUs: the scheduler's message".
    unbound: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "pods": self.pods,
            "bound": self.bound,
            "refused_by_kubelet": len(self.refused),
            "admitted": self.bound - len(self.refused),
            "missed": self.missed,
            "refused": [list(r) for r in self.refused],
            "gpus_named": self.gpus_named,
            "gpus_in_zone": self.gpus_in_zone,
            "gpus_elsewhere": [[pod, node, list(ids), kubelet] for pod, node, ids, kubelet in self.gpus_elsewhere],
            "unanswered": self.unanswered,
            "unbound": self.unbound,
            "seconds": round(self.seconds, 1),
        }


def kubelets(w: Workload, policy: str) -> dict[str, numa_oracle.Node]:
    """Each node's zones as published, for the oracle."""
    capacity = [{GPU: GPUS_PER_ZONE, "cpu": CPUS_PER_ZONE, "memory": MEMORY_PER_ZONE_MIB}] * ZONES
    return {name: numa_oracle.Node.of(name, policy=policy, capacity=capacity, free=w.free(name)) for name in w.nodes}


def oracle_pod(p: StreamPod) -> numa_oracle.Pod:
    return numa_oracle.Pod(p.name, ({GPU: p.gpus, "cpu": p.cpus, "memory": POD_MEMORY_MIB},))


def first_fit(w: Workload, policy: str) -> int:
    """A reference: the pods bound by taking the stream in order, each to the first node whose kubelet admits it
    (by name), on the true zones."""
    nodes = kubelets(w, policy)
    return sum(any(numa_oracle.admit(oracle_pod(p), nodes[n]).admitted for n in w.nodes) for p in w.stream)


def missed(w: Workload, bindings: Sequence[Binding], policy: str) -> list[str]:
    """The pods left unbound although, when their turn came (the stream in order, each bound one where it was
    bound), some node's kubelet would have admitted them."""
    nodes = kubelets(w, policy)
    where = {b.pod: b.node for b in bindings}
    out = []
    for p in w.stream:
        if p.name in where:
            numa_oracle.admit(oracle_pod(p), nodes[where[p.name]])
        elif any(numa_oracle.would_admit(oracle_pod(p), node) for node in nodes.values()):
            out.append(p.name)
    return out


def judge(w: Workload, played: Played, *, case: str, policy: str) -> Outcome:
    """Replay the bindings (in binding order) with the oracle on the zones as published."""
    shapes = {p.name: p for p in w.stream}
    nodes = kubelets(w, policy)
    bindings = played.bindings
    out = Outcome(case, policy, pods=len(w.stream), bound=len(bindings), missed=missed(w, bindings, policy))
    out.unanswered = played.unanswered
    out.unbound = {
        name: f"{shapes[name].gpus} GPUs {shapes[name].cpus} CPUs: {message}"
        for name, message in played.unbound.items()
    }
    for b in bindings:
        shape = shapes[b.pod]
        verdict = numa_oracle.admit(oracle_pod(shape), nodes[b.node])
        if not verdict.admitted:
            out.refused.append((b.pod, b.node, f"{shape.gpus} GPUs {shape.cpus} CPUs"))
        elif shape.gpus and b.gpu_ids:
            out.gpus_named += 1
            picked = Counter(zone_of_gpu(i) for i in b.gpu_ids)
            kubelet = {z: t.get(GPU, 0) for z, t in enumerate(verdict.taken) if t.get(GPU, 0)}
            if dict(picked) == kubelet:
                out.gpus_in_zone += 1
            else:
                out.gpus_elsewhere.append((b.pod, b.node, b.gpu_ids, kubelet))
    return out


# --- playing the stream on a cluster -----------------------------------------------------------------------------


def _unschedulable(pod: Mapping[str, Any]) -> str | None:
    """The scheduler's message on a pod it marked unschedulable, else None."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            return str(c.get("message") or "")
    return None


def play(
    create: Callable[[dict[str, Any]], Any],
    list_pods: Callable[[], list[dict[str, Any]]],
    w: Workload,
    *,
    scheduler_name: str,
    wait: float = 30.0,
    settle: float = 0.0,
) -> Played:
    """Create the stream one pod at a time, each once the previous one was bound or marked unschedulable, then
    wait ``settle`` seconds for late bindings."""
    from tests.e2e import kube

    seen: dict[str, Binding] = {}
    order = {p.name: i for i, p in enumerate(w.stream)}

    def poll() -> dict[str, dict[str, Any]]:
        pods = {p["metadata"]["name"]: p for p in list_pods() if p["metadata"]["name"] in order}
        for name in sorted((n for n, p in pods.items() if kube.node_of(p) and n not in seen), key=order.__getitem__):
            seen[name] = Binding(name, kube.node_of(pods[name]), kube.gpu_ids_of(pods[name]))
        return pods

    unanswered = 0
    for p in w.stream:
        create(pod_manifest(p.name, gpus=p.gpus, cpus=p.cpus, scheduler_name=scheduler_name))
        deadline = time.monotonic() + wait
        while True:
            pod = poll().get(p.name)
            if p.name in seen or (pod is not None and _unschedulable(pod) is not None):
                break
            if time.monotonic() > deadline:
                unanswered += 1
                break
            time.sleep(0.1)
    end = time.monotonic() + settle
    while time.monotonic() < end:
        poll()
        time.sleep(0.5)
    last = poll()
    unbound = {name: _unschedulable(pod) or "" for name, pod in last.items() if name not in seen}
    return Played(list(seen.values()), unbound, unanswered)


def nrt_crd() -> Path:
    """The NodeResourceTopology CRD from its Go module (tests/e2e/fetch-workload-crds.sh's cache)."""
    out = subprocess.run([str(FETCH_CRDS)], check=True, stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip().splitlines()[-1]) / "crds" / "crd.yaml"


def install_nrt_crd(k: Any, crd: Path) -> None:
    k.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    k.kubectl("wait", "--for=condition=established", "--timeout=60s", "-f", str(crd))


def nodes_ready(k: Any) -> int:
    from tests.e2e import kube

    return sum((kube.condition(n, "Ready") or {}).get("status") == "True" for n in k.nodes())


def publish(k: Any, w: Workload, *, policy: str, namespace: str, wait_running: bool = True) -> None:
    """The fragments, running, then each node's object, once."""
    from tests.e2e import kube

    for f in w.fragments:
        k.request("POST", kube.Kube.pods_path(namespace), fragment_manifest(f))
    if wait_running:
        names = {f.name for f in w.fragments}

        def running() -> bool:
            pods = k.request("GET", kube.Kube.pods_path(namespace))["items"]
            return sum(p["metadata"]["name"] in names and kube.phase_of(p) == "Running" for p in pods) == len(names)

        kube.wait_until(running, timeout=120, what="the fragments Running")
    for node in w.nodes:
        pods = [(namespace, f.name) for f in w.fragments if f.node == node]
        k.request("POST", NRT_PATH, nrt_manifest(node, w.free(node), policy=policy, pods=pods))


@contextlib.contextmanager
def scheduler(case: str, cluster: Any, k: Any, args: argparse.Namespace) -> Iterator[str]:
    """Start ``case``'s scheduler; yield the schedulerName its pods ask for; stop it at the end."""
    from tests.e2e import kube, peer_schedulers

    if case == "gpusched":
        replica = harness.gpusched(k)
        replica.start().wait_ready(timeout=180).wait_leader()
        try:
            yield kube.SCHEDULER_NAME
        finally:
            replica.stop()
        return
    scoring, resync = ("LeastNUMANodes", None) if case == "nrt-leastnuma" else ("MostAllocated", args.resync)
    proc = peer_schedulers.nrt_process(cluster, args.peer_bin, scoring=scoring, resync_seconds=resync)
    proc.start(cluster).wait_healthy()
    if resync is not None:
        # Its informer saw the fragments as pods of another scheduler: it trusts no node with such pods until a
        # resync finds the object's fingerprint matching the pods there. Let the first resyncs pass.
        time.sleep(2 * resync + 1)
    try:
        yield peer_schedulers.NRT_SCHEDULER_NAME
    finally:
        proc.stop(cluster)


def run_case(case: str, policy: str, args: argparse.Namespace) -> Outcome | str:
    from tests.e2e import kube
    from tests.e2e.localcluster import LocalCluster

    if case == "gpusched" and (missing := harness.gpusched_missing()):
        return missing
    if case != "gpusched" and args.peer_bin is None:
        return str(args.peer_missing)
    w = workload(nodes=args.nodes, pods=args.pods)
    with LocalCluster(verbose=False) as cluster:
        k = harness.for_gpusched(cluster) if case == "gpusched" else kube.Kube.of_local(cluster)
        k.ensure_namespace(NAMESPACE)
        install_nrt_crd(k, args.crd)
        for node in w.nodes:
            k.request("POST", "/api/v1/nodes", node_manifest(node))
        kube.wait_until(lambda: nodes_ready(k) >= len(w.nodes), timeout=120, what="the nodes Ready")
        publish(k, w, policy=policy, namespace=NAMESPACE)
        with scheduler(case, cluster, k, args) as name:
            started = time.monotonic()
            played = play(
                lambda body: k.request("POST", kube.Kube.pods_path(NAMESPACE), body),
                lambda: k.request("GET", kube.Kube.pods_path(NAMESPACE))["items"],
                w,
                scheduler_name=name,
                settle=args.settle,
            )
            seconds = time.monotonic() - started
    out = judge(w, played, case=case, policy=policy)
    out.seconds = seconds
    return out


def table(results: Mapping[tuple[str, str], Outcome | str], reference: Mapping[str, int]) -> str:
    """One row per policy and case; ``reference``: :func:`first_fit`'s count per policy."""
    head = ["policy", "case", "pods", "bound", "refused by the kubelet", "admitted", "missed", "first fit"]
    head += ["GPUs in the kubelet's zone", "note"]
    rows: list[list[object]] = []
    for (policy, case), r in results.items():
        if isinstance(r, str):
            rows.append([policy, *harness.note_row(case, f"not run: {r}", len(head) - 1)])
            continue
        gpus = f"{r.gpus_in_zone} of {r.gpus_named}" if r.gpus_named else "n/a (names no GPUs)"
        note = f"{r.unanswered} unanswered" if r.unanswered else ""
        admitted = r.bound - len(r.refused)
        rows.append([policy, case, r.pods, r.bound, len(r.refused), admitted, len(r.missed), reference[policy], gpus])
        rows[-1].append(note)
    return harness.markdown_table(head, rows, align="llrrrrrrrl")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--pods", type=int, default=48)
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    parser.add_argument("--policies", default=",".join(numa_oracle.POLICIES))
    parser.add_argument("--resync", type=int, default=5, help="cacheResyncPeriodSeconds of nrt-overreserve")
    parser.add_argument("--settle", type=float, default=12.0, help="seconds to wait for late bindings")
    harness.add_json(parser)
    args = parser.parse_args(argv)
    cases = harness.chosen(parser, args.cases, CASES)
    policies = harness.chosen(parser, args.policies, numa_oracle.POLICIES, what="policy")
    from tests.e2e.localcluster import ClusterError

    args.crd = nrt_crd()
    args.peer_bin, args.peer_missing = None, ""
    if set(cases) - {"gpusched"}:
        from tests.e2e import peer_schedulers

        try:
            args.peer_bin = peer_schedulers.binaries()
        except subprocess.CalledProcessError as exc:
            args.peer_missing = f"tests/e2e/build-peers.sh failed (exit {exc.returncode})"
    results: dict[tuple[str, str], Outcome | str] = {}
    for policy in policies:
        for case in cases:
            print(f"[{policy} {case}] starting", file=sys.stderr, flush=True)
            try:
                r = results[policy, case] = run_case(case, policy, args)
            except ClusterError as exc:  # the control plane did not start: the case says so, the others run
                r = results[policy, case] = f"the local control plane failed: {str(exc).splitlines()[0]}"
            print(f"[{policy} {case}] {r if isinstance(r, str) else json.dumps(r.as_json())}", file=sys.stderr)
    print(f"\n{args.nodes} kwok nodes of 2 NUMA zones (4 GPUs, 32 CPUs each), fragmented; {args.pods} Guaranteed pods")
    w = workload(nodes=args.nodes, pods=args.pods)
    reference = {policy: first_fit(w, policy) for policy in policies}
    print(table(results, reference))
    for r in results.values():
        if isinstance(r, str):
            continue
        for pod, node, shape in r.refused:
            print(f"refused by the kubelet ({r.policy}, {r.case}): {pod} ({shape}) on {node}")
        for pod, node, ids, kubelet in r.gpus_elsewhere:
            print(
                f"GPUs outside the kubelet's zone ({r.policy}, {r.case}): {pod} on {node} picked GPUs {ids}, "
                f"the kubelet takes {kubelet} (zone: GPUs)"
            )
    if args.json:
        out: dict[str, Any] = {
            f"{policy}/{case}": (r.as_json() if isinstance(r, Outcome) else {"not_run": r})
            for (policy, case), r in results.items()
        }
        out["first_fit"] = reference
        out["setup"] = {"nodes": args.nodes, "pods": args.pods, "resync_seconds": args.resync, "settle": args.settle}
        harness.write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
