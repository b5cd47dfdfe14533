"""Dynamic MIG on a real API server: a seeded stream of MIG claims, pods leaving after their lifetimes, gpusched
against kube-scheduler side by side, every counter checked from the API server's state afterwards.

For each (scheduler, load, seed) a fresh local control plane (tests/e2e/localcluster.py) gets the same objects:

- ``--nodes`` kwok nodes of 8 H100 GPUs published only through DRA, as NVIDIA's driver publishes dynamic MIG
  (tests/api/dra_objects.py ``mig_slices``: per GPU a counter set of eight memory slices and seven compute slices,
  the full GPU and every MIG placement of the 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb and 7g.80gb profiles consuming
  from it), and NVIDIA's ``mig.nvidia.com`` DeviceClass;
- a ResourceClaimTemplate per profile, and pods, each taking one claim from a template, drawn from a seeded mix (per
  20 claims: 7 of 1g, 5 of 2g, 3 of 3g, 3 of 4g, 2 of 7g), each with a seeded lifetime (uniform between ``--life`` / 2
  and 3 ``--life`` / 2 seconds) counted from its bind: then the pod is deleted (its claim goes with it). A pod not
  bound keeps waiting (nothing withdraws it).

The stream, defined from issue 33's words ("pods leaving after seeded lifetimes so that the offered load stays near
the cluster's capacity", "claims placed over the stream"):

- *Offered load* is the compute slices the claims ask times their lifetimes, over the cluster's compute slices times
  the stream's duration (its arrivals' span and the gap drawn after the last one). The seeded exponential gaps are
  scaled so that each seed's stream offers exactly ``--load`` (its own mix and lifetimes, not only on average over
  seeds).
- *Stays near*: the cluster starts empty, so ``--warmup`` seconds of arrivals (default 1.5 ``--life``, the longest
  lifetime: by then the held slices are those of a cluster long under this load) come first and are not counted;
  then the ``--claims`` counted ones; arrivals go on after them, not counted, until the run ends. ``--describe``
  prints, per stream, the load offered inside the counted window (each claim held from its arrival for its
  lifetime, time-weighted), without a cluster.
- *Placed over the stream*: a counted claim is placed if its pod is bound by ``--grace`` seconds (default 2: a claim
  that fits is made and bound well within it by both schedulers) after the last counted arrival. The run goes on
  until ``--late`` seconds after it (default 10), and the claims placed by then are reported too. (Until this
  definition, the stream started on an empty cluster, with 120 claims spanning less than three lifetimes, and
  counted claims bound by 10 s after the last arrival with no arrivals meanwhile, the gaps drawn for the load on
  average over seeds: over a run, seeds 42-44 offered 0.66 to 0.90 of the cluster at a nominal 1.0, 0.86 to 1.16
  at 1.4.)

*Issue 46's churn stream* (``--leave-after LOW,HIGH``, with ``--mix``, ``--rate`` and ``--deadline``): the
``--claims`` arrivals all counted, no warm-up, profiles drawn by the weights of ``--mix`` (default 1g 40%, 2g 25%,
3g 15%, 4g 12%, 7g 8%), exponential gaps at ``--rate`` arrivals a second, each pod deleted once a seeded number of
later arrivals (LOW to HIGH) have come; a pod not bound ``--deadline`` seconds after its creation is deleted
unplaced. ``--loads`` and ``--life`` do not shape it (``offered`` is not computed for it), and a claim is placed if
bound before its deadline. ``benchmarks/mig_packing.py`` replays it too, with the same options.

Reported per case: the load offered in the counted window, claims placed of those asked, the placed share of the
4g and 7g claims, the compute slices in use on average over the counted window (of the cluster's), counted pods
placed per second of it, the counter sets over-consumed in any allocation the API server holds (read every second:
it must be 0 for both), and the claims placed by the late end. Per case on stderr, and in ``--json``: the claims not
placed by profile, the mean wait (arrival to bind) by profile, every counted claim's arrival and bind, and for
gpusched its scheduling attempts by result and the CPU seconds its process spent (start-up included).
``benchmarks/mig_packing.py`` replays the same streams without a cluster, as an ideal scheduler would place them.

    .venv/bin/python -m benchmarks.mig_stream [--nodes 2] [--claims 120] [--loads 0.8,1.0,1.2] [--seeds 42,43,44]
                                              [--life 20] [--warmup S] [--grace 2] [--late 10]
                                              [--cases kube-scheduler,gpusched] [--json FILE]
    .venv/bin/python -m benchmarks.mig_stream --describe [--loads ...] [--seeds ...]
    .venv/bin/python -m benchmarks.mig_stream --combine FILE.json ...   # the table of runs made apart

Needs the control-plane binaries (tests/e2e/build-controlplane.sh) and, for gpusched, ``gpusched run``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import platform
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import dra_backlog, e2e_throughput, harness
from benchmarks.e2e_throughput import Api
from tests.api import dra_objects
from tests.e2e import kube
from tests.e2e.localcluster import LocalCluster

CASES = ("kube-scheduler", "gpusched")
NAMESPACE = e2e_throughput.NAMESPACE
RESOURCE = dra_backlog.RESOURCE
GPUS_PER_NODE = 8
COMPUTE_PER_GPU = 7
#: Per 20 claims: profile -> how many.
MIX = {"1g.10gb": 7, "2g.20gb": 5, "3g.40gb": 3, "4g.40gb": 3, "7g.80gb": 2}
BIG = ("4g.40gb", "7g.80gb")


@dataclass(slots=True)
class Arrival:
    name: str
    profile: str
    at: float
    life: float
    #: Counted in the results (arrivals of the warm-up and the cool-down keep the load, and are not counted).
    counted: bool = True
    #: The churn stream's: the pod leaves when this many later arrivals have come (``life`` is then unused).
    leave_after: int | None = None


@dataclass(slots=True)
class Result:
    case: str
    load: float
    seed: int
    asked: int
    placed: int = 0
    #: Counted claims placed by ``--late`` seconds after the last counted arrival (the run goes on until then).
    placed_late: int = 0
    big_asked: int = 0
    big_placed: int = 0
    #: The load the stream offers over the counted window (``offered``), and the compute slices held in it.
    offered: float = math.nan
    compute_in_use: float = math.nan
    stream_s: float = math.nan
    over_consumed: int = 0
    #: Compute slices held by bound pods at the stream's end.
    compute_at_end: int = 0
    #: The most an arrival was created after its time (seconds): the benchmark's own lag on a loaded machine.
    driver_lag: float = math.nan
    problems: list[str] = field(default_factory=list)
    #: Profile -> seconds from creation to bind of each claim placed; profile -> claims not placed.
    waits: dict[str, list[float]] = field(default_factory=dict)
    missed: dict[str, int] = field(default_factory=dict)
    #: Every counted claim: name, profile, arrival, creation and bind (None: never), seconds of the stream.
    claims: list[tuple[str, str, float, float | None, float | None]] = field(default_factory=list)
    #: gpusched only: its scheduling attempts by result at the run's end (``gpusched_schedule_attempts_total``),
    #: each one a pod taken off the queue, so the unschedulable ones count the wake-ups that placed nothing.
    attempts: dict[str, int] = field(default_factory=dict)
    #: gpusched only: the CPU seconds its process spent from its start to the run's end
    #: (``process_cpu_seconds_total``), NaN if it did not answer.
    cpu_s: float = math.nan

    @property
    def pods_per_s(self) -> float:
        return self.placed / self.stream_s if self.stream_s > 0 else math.nan


def compute_slices(profile: str) -> int:
    return dra_objects.MIG_PROFILES[profile][1]


def stream(
    *, claims: int, load: float, life: float, nodes: int, seed: int, warmup: float, cooldown: float
) -> list[Arrival]:
    """The seeded arrivals: ``warmup`` seconds of arrivals not counted, the ``claims`` counted ones, then
    ``cooldown`` seconds more not counted; profiles from the mix, lifetimes, and exponential gaps scaled so that the
    whole stream offers exactly ``load``: its claims' compute slices times lifetimes, over the cluster's compute
    slices times the stream's duration."""
    rng = random.Random(seed)
    profiles = [p for p, n in MIX.items() for _ in range(n)]
    mean_compute = sum(compute_slices(p) * n for p, n in MIX.items()) / sum(MIX.values())
    capacity = nodes * GPUS_PER_NODE * COMPUTE_PER_GPU
    rate = load * capacity / (mean_compute * life)  # arrivals per second, on average over seeds
    before, after = round(rate * warmup), round(rate * cooldown)
    total = before + claims + after
    chosen = [rng.choice(profiles) for _ in range(total)]
    lives = [rng.uniform(life / 2, 3 * life / 2) for _ in range(total)]
    gaps = [rng.expovariate(1.0) for _ in range(total)]
    # The drawn gaps, scaled: the seed's own mix and lifetimes offer ``load`` over the stream (the arrivals and the
    # gap after the last one), not only on average over seeds.
    span = sum(compute_slices(p) * t for p, t in zip(chosen, lives, strict=True)) / (capacity * load)
    scale = span / sum(gaps)
    out = []
    at = 0.0
    for i, (profile, lifetime, gap) in enumerate(zip(chosen, lives, gaps, strict=True)):
        out.append(Arrival(f"mig-{i:04d}", profile, at, lifetime, counted=before <= i < before + claims))
        at += gap * scale
    return out


def churn_stream(
    *, claims: int, mix: dict[str, float], leave_after: tuple[int, int], rate: float, seed: int
) -> list[Arrival]:
    """Issue 46's stream: ``claims`` arrivals, all counted, profiles drawn from ``mix`` (weights), exponential gaps
    at ``rate`` arrivals per second, each pod leaving when a seeded number of later arrivals (between the two of
    ``leave_after``) have come."""
    rng = random.Random(seed)
    profiles, weights = list(mix), list(mix.values())
    out = []
    at = 0.0
    for i in range(claims):
        profile = rng.choices(profiles, weights)[0]
        out.append(Arrival(f"mig-{i:04d}", profile, at, 0.0, leave_after=rng.randint(*leave_after)))
        at += rng.expovariate(rate)
    return out


def offered(arrivals: list[Arrival], *, start: float, end: float, capacity: int) -> float:
    """The compute slices the claims would hold between ``start`` and ``end`` if each ran from its arrival for its
    lifetime (time-weighted), as a share of the cluster's: the load the stream offers in that window."""
    held = sum(compute_slices(a.profile) * max(0.0, min(a.at + a.life, end) - max(a.at, start)) for a in arrivals)
    return held / (capacity * (end - start)) if end > start else math.nan


def template(profile: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": f"mig-{profile.replace('.', '-')}", "namespace": NAMESPACE},
        "spec": {"spec": dra_objects.claim_spec(dra_objects.mig_request(profile, "mig"))},
    }


def mig_pod(arrival: Arrival, *, scheduler_name: str) -> dict[str, Any]:
    manifest = kube.pod(arrival.name, scheduler_name=scheduler_name)
    manifest["metadata"]["labels"]["profile"] = arrival.profile
    name = f"mig-{arrival.profile.replace('.', '-')}"
    manifest["spec"]["resourceClaims"] = [{"name": "mig", "resourceClaimTemplateName": name}]
    manifest["spec"]["containers"][0]["resources"]["claims"] = [{"name": "mig"}]
    return manifest


async def delete(api: Api, path: str) -> None:
    async with api.session.delete(api.server + path) as resp:
        if resp.status not in (200, 202, 404):
            raise RuntimeError(f"DELETE {path}: HTTP {resp.status}: {(await resp.text())[:300]}")


async def over_consumed(api: Api, slices: list[dict[str, Any]]) -> list[str]:
    """Counters that the allocations the API server holds consume more of than their set has (``slices``: the
    ResourceSlices, which do not change during a run)."""
    limits: dict[tuple[str, str, str], int] = {}
    uses: dict[tuple[str, str], list[tuple[str, str, int]]] = {}
    for s in slices:
        pool = s["spec"]["pool"]["name"]
        for counter_set in s["spec"].get("sharedCounters") or []:
            for name, value in counter_set["counters"].items():
                limits[(pool, counter_set["name"], name)] = int(value["value"])
        for device in s["spec"].get("devices") or []:
            uses[(pool, device["name"])] = [
                (use["counterSet"], name, int(value["value"]))
                for use in device.get("consumesCounters") or []
                for name, value in use["counters"].items()
            ]
    used: Counter[tuple[str, str, str]] = Counter()
    for claim in await dra_backlog.list_all(api, f"{RESOURCE}/resourceclaims"):
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            for counter_set, name, amount in uses.get((result["pool"], result["device"]), []):
                used[(result["pool"], counter_set, name)] += amount
    return [f"{k}: {v} > {limits.get(k, 0)}" for k, v in used.items() if v > limits.get(k, 0)]


async def run_stream(
    cluster: LocalCluster,
    *,
    case: str,
    arrivals: list[Arrival],
    nodes: int,
    grace: float,
    late: float,
    start: Any,
    deadline: float | None = None,
) -> Result:
    api = Api(cluster, connections=64)
    counted = [a for a in arrivals if a.counted]
    result = Result(case=case, load=0.0, seed=0, asked=len(counted))
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    try:
        await api.post(f"{RESOURCE}/deviceclasses", dra_objects.mig_class())
        names = [f"gpu-{i:05d}" for i in range(nodes)]
        for n in names:
            await api.post("/api/v1/nodes", kube.gpu_node(n, gpus=0))
            for raw in dra_objects.mig_slices(n, GPUS_PER_NODE):
                await api.post(f"{RESOURCE}/resourceslices", raw)
        await api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        for profile in MIX:
            await api.post(f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaimtemplates", template(profile))
        listed = await api.get(f"/api/v1/namespaces/{NAMESPACE}/pods")
        watch = e2e_throughput.BindWatch(api, listed["metadata"]["resourceVersion"])
        watch.start()
        slices = await dra_backlog.list_all(api, f"{RESOURCE}/resourceslices")
        await asyncio.to_thread(start)
        await asyncio.sleep(2.0)  # the scheduler's first listing
        began = time.monotonic()
        problems: set[str] = set()

        async def check() -> None:
            # Apart from the stream's loop, so a slow listing on a loaded machine does not hold arrivals back.
            while True:
                problems.update(await over_consumed(api, slices))
                await asyncio.sleep(1.0)

        checker = asyncio.create_task(check())
        #: Pod -> when the API server had it (seconds of the stream): its arrival as the scheduler sees it.
        created: dict[str, float] = {}

        async def arrive(arrival: Arrival) -> None:
            await api.post(path, mig_pod(arrival, scheduler_name=dra_backlog.SCHEDULER_NAME[case]))
            created[arrival.name] = time.monotonic() - began

        by_name = {a.name: a for a in arrivals}
        index = {a.name: i for i, a in enumerate(arrivals)}
        #: Pods deleted unbound at their deadline (the churn stream's withdrawal).
        withdrawn: set[str] = set()
        #: Pod -> when it is to be deleted (its bind plus its lifetime, seconds of the stream); deleted ones.
        due: dict[str, float] = {}
        deleted: set[str] = set()
        samples: list[tuple[float, int]] = []
        next_arrival = 0
        # The counted window: from the first counted arrival to ``grace`` after the last one, arrivals going on; the
        # run goes on until ``late`` after it.
        window = counted[0].at
        end = counted[-1].at + grace
        stop = counted[-1].at + max(grace, late)
        if deadline is not None:
            end = stop = counted[-1].at + deadline + 0.5
        while True:
            now = time.monotonic() - began
            coming = []
            while next_arrival < len(arrivals) and arrivals[next_arrival].at <= now:
                coming.append(arrive(arrivals[next_arrival]))
                next_arrival += 1
            for name, at in list(watch.bound_at.items()):
                if name in by_name and name not in due:
                    a = by_name[name]
                    due[name] = at - began + a.life if a.leave_after is None else math.inf
            leaving = [n for n, t in due.items() if t <= now and n not in deleted]
            for n in due:
                a = by_name[n]
                if a.leave_after is not None and n not in deleted and next_arrival > index[n] + a.leave_after:
                    leaving.append(n)
            if deadline is not None:
                for n, t in created.items():
                    if n not in watch.bound_at and n not in deleted and now - t >= deadline:
                        leaving.append(n)
                        withdrawn.add(n)
            deleted.update(leaving)
            await asyncio.gather(*coming, *(delete(api, f"{path}/{n}") for n in leaving))
            if window <= now <= end:
                samples.append((now, sum(compute_slices(by_name[n].profile) for n in due if n not in deleted)))
            if now >= stop:
                break
            await asyncio.sleep(0.1)
        watch.stop()
        checker.cancel()
        problems.update(await over_consumed(api, slices))
        result.driver_lag = max((created[a.name] - a.at for a in arrivals if a.name in created), default=math.nan)
        bound = {a.name: watch.bound_at[a.name] - began for a in counted if a.name in watch.bound_at}
        placed = [a.name for a in counted if bound.get(a.name, math.inf) <= end and a.name not in withdrawn]
        if samples:
            result.compute_at_end = samples[-1][1]
        result.placed = len(placed)
        result.placed_late = sum(1 for a in counted if bound.get(a.name, math.inf) <= counted[-1].at + late)
        result.claims = [
            (
                a.name,
                a.profile,
                round(a.at, 2),
                round(created[a.name], 2) if a.name in created else None,
                round(bound[a.name], 2) if a.name in bound else None,
            )
            for a in counted
        ]
        result.big_asked = sum(1 for a in counted if a.profile in BIG)
        result.big_placed = sum(1 for n in placed if by_name[n].profile in BIG)
        capacity = nodes * GPUS_PER_NODE * COMPUTE_PER_GPU
        result.offered = offered(arrivals, start=window, end=end, capacity=capacity)
        result.compute_in_use = sum(v for _t, v in samples) / len(samples) / capacity if samples else math.nan
        result.stream_s = end - window
        result.over_consumed = len(problems)
        for n in placed:
            a = by_name[n]
            result.waits.setdefault(a.profile, []).append(round(bound[n] - created.get(n, a.at), 2))
        result.missed = dict(Counter(a.profile for a in counted if a.name not in placed))
        result.problems = sorted(problems)[:5]
        return result
    finally:
        await api.close()


def run_case(case: str, args: argparse.Namespace, *, load: float, seed: int) -> Result | str:
    arrivals = arrivals_of(args, load=load, seed=seed)
    options: dict[str, Any] = {}
    if case == "gpusched":
        if (missing := harness.gpusched_missing()) is not None:
            return missing
    else:
        options = harness.kube_scheduler(1000, 2000)
    attempts: dict[str, int] = {}
    cpu_s = math.nan
    with LocalCluster(verbose=False, **options) as cluster:
        replica: kube.Gpusched | None = None
        start: Any = cluster.start_scheduler
        if case == "gpusched":
            k = harness.for_gpusched(cluster)
            replica = harness.gpusched(k)
            print(f"[gpusched] log: {replica.log_path}", file=sys.stderr, flush=True)
            # Ready (leading, caches listed) before the stream starts, as kube-scheduler is started and healthy.
            start = lambda: replica.start().wait_ready().wait_leader()  # noqa: E731
        try:
            result = asyncio.run(
                run_stream(
                    cluster,
                    case=case,
                    arrivals=arrivals,
                    nodes=args.nodes,
                    grace=args.grace,
                    late=args.late,
                    start=start,
                    deadline=args.deadline,
                )
            )
        finally:
            if replica is not None:
                attempts, cpu_s = _attempts(replica)
                replica.stop()
    result.load, result.seed, result.attempts, result.cpu_s = load, seed, attempts, cpu_s
    return result


def _attempts(replica: kube.Gpusched) -> tuple[dict[str, int], float]:
    """gpusched's scheduling attempts by result and its CPU seconds, from its /metrics (empty and NaN if it does not
    answer)."""
    try:
        text = replica.metrics()
    except OSError:
        return {}, math.nan
    found: dict[str, int] = {}
    cpu_s = math.nan
    for line in text.splitlines():
        if line.startswith('gpusched_schedule_attempts_total{result="'):
            labels, value = line.rsplit(" ", 1)
            found[labels.split('"')[1]] = int(float(value))
        elif line.startswith("process_cpu_seconds_total "):
            cpu_s = float(line.split()[1])
    return found, cpu_s


def table(results: list[Result]) -> str:
    head = ["load", "scheduler", "offered", "claims placed", "4g/7g placed", "compute in use", "pods/s"]
    head += ["over-consumed", "placed by the late end"]
    groups: dict[tuple[float, str], list[Result]] = {}
    for r in results:
        groups.setdefault((r.load, r.case), []).append(r)
    rows = []
    for (load, case), rs in sorted(groups.items()):
        n = len(rs)
        rows.append(
            [
                f"{load:.1f}",
                case,
                f"{100 * sum(r.offered for r in rs) / n:.1f}%",
                f"{sum(r.placed for r in rs) / n:.1f} of {rs[0].asked}",
                f"{sum(r.big_placed for r in rs) / n:.1f} of {sum(r.big_asked for r in rs) / n:.1f}",
                f"{100 * sum(r.compute_in_use for r in rs) / n:.1f}%",
                f"{sum(r.pods_per_s for r in rs) / n:.2f}",
                sum(r.over_consumed for r in rs),
                f"{sum(r.placed_late for r in rs) / n:.1f}",
            ]
        )
    return harness.markdown_table(head, rows, align="rl" + "r" * 7)


def _mean_waits(result: Result) -> dict[str, float]:
    """Profile -> mean seconds from arrival to bind of its placed claims."""
    return {p: round(sum(w) / len(w), 2) for p, w in sorted(result.waits.items()) if w}


def arrivals_of(args: argparse.Namespace, *, load: float, seed: int) -> list[Arrival]:
    if args.leave_after:
        low, high = (int(x) for x in args.leave_after.split(","))
        mix = {f"{p}": float(w) for p, w in (x.split(":") for x in args.mix.split(","))}
        return churn_stream(claims=args.claims, mix=mix, leave_after=(low, high), rate=args.rate, seed=seed)
    warmup = args.life * 1.5 if args.warmup is None else args.warmup
    return stream(
        claims=args.claims,
        load=load,
        life=args.life,
        nodes=args.nodes,
        seed=seed,
        warmup=warmup,
        cooldown=max(args.grace, args.late),
    )


def describe(args: argparse.Namespace) -> None:
    """Each stream's counted window and the load it offers there, without a cluster."""
    capacity = args.nodes * GPUS_PER_NODE * COMPUTE_PER_GPU
    for load in (float(x) for x in args.loads.split(",")):
        for seed in (int(x) for x in args.seeds.split(",")):
            arrivals = arrivals_of(args, load=load, seed=seed)
            counted = [a for a in arrivals if a.counted]
            start, end = counted[0].at, counted[-1].at + args.grace
            mix = Counter(a.profile for a in counted)
            print(
                f"load {load} seed {seed}: {len(arrivals)} arrivals over {arrivals[-1].at:.1f} s, counted "
                f"{len(counted)} from {start:.1f} to {end:.1f} s, offered there "
                f"{100 * offered(arrivals, start=start, end=end, capacity=capacity):.1f}% of {capacity} compute "
                f"slices, {mix['4g.40gb'] + mix['7g.80gb']} of them 4g/7g"
            )


def add_stream_options(parser: argparse.ArgumentParser, *, loads: str) -> None:
    """The options that define the streams (``arrivals_of`` reads them): here and in benchmarks/mig_packing.py."""
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--claims", type=int, default=120)
    parser.add_argument("--loads", default=loads)
    parser.add_argument("--seeds", default="42,43,44")
    parser.add_argument("--life", type=float, default=20.0, help="mean lifetime of a pod from its bind, seconds")
    parser.add_argument(
        "--grace",
        type=float,
        default=2.0,
        help="the stream ends this long after its last counted arrival: a counted claim bound by then is placed",
    )
    parser.add_argument(
        "--late",
        type=float,
        default=10.0,
        help="the run goes on this long after the last counted arrival, arrivals too; claims placed by then are "
        "reported too",
    )
    parser.add_argument(
        "--leave-after",
        default=None,
        help="LOW,HIGH: issue 46's churn stream: each pod leaves after this many later arrivals (seeded), all "
        "--claims counted, no warm-up; with --mix, --rate and --deadline",
    )
    parser.add_argument(
        "--mix",
        default="1g.10gb:40,2g.20gb:25,3g.40gb:15,4g.40gb:12,7g.80gb:8",
        help="the churn stream's profiles and their weights",
    )
    parser.add_argument("--rate", type=float, default=2.0, help="the churn stream's arrivals per second")
    parser.add_argument(
        "--deadline", type=float, default=None, help="a pod not bound this long after its creation is deleted"
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=None,
        help="seconds of arrivals before the counted ones (not counted); default 1.5 --life, the longest lifetime",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_stream_options(parser, loads="0.8,1.0,1.2")
    parser.add_argument("--describe", action="store_true", help="print each stream's offered load and mix, run nothing")
    parser.add_argument("--cases", default=",".join(CASES))
    harness.add_json(parser)
    parser.add_argument(
        "--combine",
        type=Path,
        nargs="+",
        help="print the table of earlier runs' --json files (say, one per scheduler run side by side), run nothing",
    )
    args = parser.parse_args(argv)
    cases = harness.chosen(parser, args.cases, CASES)
    if args.describe:
        describe(args)
        return 0
    if args.combine:
        combined = [Result(**r) for f in args.combine for r in json.loads(f.read_text())]
        print(table(combined))
        return 0 if all(r.over_consumed == 0 for r in combined) else 1
    results: list[Result] = []
    for load in (float(x) for x in args.loads.split(",")):
        for seed in (int(x) for x in args.seeds.split(",")):
            for case in cases:
                outcome = run_case(case, args, load=load, seed=seed)
                if isinstance(outcome, str):
                    print(f"[{case}] skipped: {outcome}", file=sys.stderr)
                    continue
                print(
                    f"[{case}] load {load} seed {seed}: offered {100 * outcome.offered:.1f}%, "
                    f"{outcome.placed}/{outcome.asked} placed ({outcome.placed_late} by the late end), "
                    f"{outcome.big_placed}/{outcome.big_asked} big, compute {100 * outcome.compute_in_use:.1f}% "
                    f"({outcome.compute_at_end} slices at the end), "
                    f"over-consumed {outcome.over_consumed} {outcome.problems}, not placed {outcome.missed}, "
                    f"driver lag {outcome.driver_lag:.2f} s, "
                    f"mean wait {_mean_waits(outcome)}"
                    + (f", attempts {outcome.attempts}, CPU {outcome.cpu_s:.1f} s" if outcome.attempts else ""),
                    file=sys.stderr,
                    flush=True,
                )
                results.append(outcome)
    print(f"{platform.node()}: {args.nodes} nodes of {GPUS_PER_NODE} H100, {args.claims} claims, life {args.life} s")
    print(table(results))
    harness.write_json(args.json, [asdict(r) for r in results])
    return 0 if all(r.over_consumed == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
