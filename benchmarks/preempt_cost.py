"""What a preemption search costs next to a scheduling cycle, when it finds victims and when it cannot.

A pod that does not fit runs the session's disruptive actions (``reclaim``, then ``preempt``: kube-scheduler's
PostFilter) after its failed cycle. This script builds ``--nodes`` nodes of 8 GPUs, each holding 7 one-GPU pods
(3 of priority 10, 4 of priority 100; one GPU free), feeds them to a scheduling loop with the default profile, and
times, best of ``--rounds`` rounds of ``--cycles`` runs, in microseconds per run:

- ``cycle fits``: one scheduling cycle (``Scheduler.place``) of a one-GPU pod, which fits on every node;
- ``cycle fails``: the cycle of a two-GPU pod, which fits nowhere (what precedes every search below);
- the preemption search (the ``reclaim`` and ``preempt`` actions after that failed cycle) of:
  - ``finds victims``: a pod of priority 1000 asking for 2 GPUs (a victim of priority 10 on every node); what it
    decided is undone after each run, so every run searches the same cluster;
  - ``all above it``: a pod of priority 5 asking for 2 GPUs: every running pod has a higher priority;
  - ``not enough``: a pod of priority 50 asking for 5 GPUs: the free GPU and the 3 of priority 10 make 4;
  - ``node rules``: a pod of priority 1000 asking for 2 GPUs with a node selector no node matches: victims
    everywhere, but removing them cannot help (kube-scheduler's UnschedulableAndUnresolvable);
  - ``gang rules``: a gang of 2 pods of 8 GPUs, priority 1000, with that node selector.

Times are this process's CPU time (``time.process_time``): on a shared machine a run of a second is preempted by
other work many times and its wall-clock time says more of the load than of the code; ``--wall`` times the wall
clock instead.

Each failed search is timed twice: ``search`` forgets what earlier searches found before each run (the first
search of a job of that shape on this cluster), ``remembered`` does not (a later cycle of the job, or of another
pending pod of the same shape, while the cluster is unchanged).

``--basic N`` runs, after those, kube-scheduler's scheduler_perf PreemptionBasic in this process instead of on an
API server: N nodes of 4 CPUs and 32 GiB, 4 pods of 900m each (priority 0) on each, then N pods of 3 CPUs
(priority 10), 30 at a time as the suite creates them: each batch is put through the loop until every pod waits
(its failed cycle and its preemption), then the victims are deleted one preemptor's at a time, the last
preemptor's first, the loop run after each deletion (it wakes every preemptor still waiting, as the API server's
would). It prints the CPU milliseconds per preemptor, the evictions (one preemptor needs 3: the minimum is 3N) and
how many preemptors were bound on a node nominated for another.

Run: ``.venv/bin/python -m benchmarks.preempt_cost [--nodes 1000] [--cycles 10] [--rounds 3] [--wall]
[--basic 1000]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable

from benchmarks import harness
from scheduler.api.basics.resources import CPU, MEMORY, PODS, GpuRequest
from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.objects.node import NodeInfo
from scheduler.api.objects.pod import PodRequest
from scheduler.core import cycle, root
from scheduler.core.actions import Verdict
from scheduler.core.holds import Kind
from scheduler.core.jobs import Attempt
from scheduler.core.loop import SchedulingLoop
from scheduler.core.preemption.preemptor import Preemptor
from scheduler.framework import profile

ALLOCATABLE = {CPU: 96_000, MEMORY: 768 * 2**30, PODS: 110}
#: Priorities of the 7 pods on every node.
RUNNING = (10, 10, 10, 100, 100, 100, 100)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Quiet:
    """Events and evictions go nowhere: only the decisions are timed."""

    def __init__(self) -> None:
        self.evicted = 0

    def emit(self, *, obj: str, kind: str, reason: str, message: str) -> None:
        return None

    def evict(self, pods: list[PodRequest], reason: str) -> None:
        self.evicted += len(pods)

    def nominate(self, pod: PodRequest, node: str) -> None:
        return None


def build(nodes: int) -> tuple[SchedulingLoop, Clock, Quiet]:
    infos = [
        NodeInfo(name=f"node-{i:05d}", allocatable=ALLOCATABLE, gpus=8, labels={"pool": "a"}) for i in range(nodes)
    ]
    clock = Clock()
    quiet = Quiet()
    core = root.build(profile.load(), binder=cycle.NoBinding(), clock=clock, events=quiet, evictor=quiet, nodes=infos)
    cache, loop = core.cache, core.loop
    for i in range(nodes):
        for j, priority in enumerate(RUNNING):
            clock.now += 0.001
            pod = PodRequest(
                namespace="bench",
                name=f"run-{i}-{j}",
                uid=f"uid-{i}-{j}",
                resources={CPU: 1000},
                gpu=GpuRequest(count=1, milli=1000),
                priority=priority,
                node_name=f"node-{i:05d}",
                phase="Running",
                gpu_ids=(j,),
            )
            cache.upsert_pod(pod)
            loop.pod_placed(pod)
    return loop, clock, quiet


def pending(
    name: str, gpus: int, priority: int, *, selector: dict[str, str] | None = None, group: str = ""
) -> PodRequest:
    labels = {"scheduling.x-k8s.io/pod-group": group} if group else {}
    return PodRequest(
        namespace="bench",
        name=name,
        uid=f"uid-{name}",
        resources={CPU: 1000},
        gpu=GpuRequest(count=gpus, milli=1000),
        priority=priority,
        node_selector=selector or {},
        labels=labels,
    )


def attempt_of(loop: SchedulingLoop, pods: list[PodRequest], group: PodGroup | None = None) -> Attempt:
    """Queue ``pods`` (a gang's, with ``group``), take the job from the queue, and run its failed allocate."""
    if group is not None:
        loop.group_upsert(group)
    for pod in pods:
        loop.pod_pending(pod)
    loop.sort_pending()
    item = loop.queue.pop()
    assert item is not None
    queued = loop.jobs.queued(item.key)
    assert queued is not None
    attempt = Attempt(queued[0], item, queued[1])
    assert loop.session._choose(attempt)
    outcome = loop.session.act(loop.actions[0], attempt)
    assert outcome.verdict is Verdict.NOTHING, outcome
    return attempt


def search(loop: SchedulingLoop, attempt: Attempt) -> Verdict:
    """The session's disruptive actions for a fresh attempt of the same job (the session's loop over them)."""
    fresh = dataclasses.replace(attempt)
    for action in loop.actions[1:]:
        verdict = loop.session.act(action, fresh).verdict
        if verdict is Verdict.WAITS:
            return verdict
    return Verdict.NOTHING


def undo(loop: SchedulingLoop, attempt: Attempt) -> None:
    """Forget what a successful search decided (its nomination, its victims leaving)."""
    p = loop.action_state(Preemptor)
    assert p is not None
    loop.holds.release(attempt.key)
    p.terminating.clear()
    p.evicted_for.clear()
    for nominated in loop.holds.of_kind(Kind.NOMINATION):
        loop.holds.unnominate(nominated.job)
    p.preemptions.clear()
    p.policies_changed()


#: The preemptors created at a time (scheduler_perf creates pods 30 at a time).
BATCH = 30


class Recorded(Quiet):
    """Evictions and nominations kept, for the PreemptionBasic stream."""

    def __init__(self) -> None:
        super().__init__()
        self.pods: list[PodRequest] = []
        self.nominated: dict[str, str] = {}

    def evict(self, pods: list[PodRequest], reason: str) -> None:
        super().evict(pods, reason)
        self.pods.extend(pods)

    def nominate(self, pod: PodRequest, node: str) -> None:
        self.nominated[pod.key] = node


def basic(nodes: int, clock: Callable[[], float]) -> None:
    """scheduler_perf's PreemptionBasic, in this process (see the module notes)."""
    allocatable = {CPU: 4000, MEMORY: 32 * 2**30, PODS: 110}
    infos = [NodeInfo(name=f"node-{i:05d}", allocatable=allocatable, gpus=0) for i in range(nodes)]
    now = Clock()
    recorded = Recorded()
    core = root.build(
        profile.load(), binder=cycle.NoBinding(), clock=now, events=recorded, evictor=recorded, nodes=infos
    )
    cache, loop = core.cache, core.loop
    where: dict[str, str] = {}
    for i in range(nodes):
        for j in range(4):
            now.now += 0.001
            pod = PodRequest(
                namespace="bench",
                name=f"low-{i}-{j}",
                uid=f"uid-low-{i}-{j}",
                resources={CPU: 900, MEMORY: 500 * 2**20},
                priority=0,
                node_name=f"node-{i:05d}",
                phase="Running",
            )
            cache.upsert_pod(pod)
            loop.pod_placed(pod)
            where[pod.key] = pod.node_name
    preemptors = [
        PodRequest(
            namespace="bench",
            name=f"high-{i}",
            uid=f"uid-high-{i}",
            resources={CPU: 3000, MEMORY: 500 * 2**20},
            priority=10,
        )
        for i in range(nodes)
    ]
    deleted = 0
    started = clock()
    for first in range(0, nodes, BATCH):
        for pod in preemptors[first : first + BATCH]:
            now.now += 0.001
            loop.pod_pending(pod)
        loop.run_until_idle()
        while deleted < len(recorded.pods):  # a preemptor that lost its room evicts again
            # The victims node by node, the last preemptor's first: those tried first wait for later nodes.
            evicted = recorded.pods[deleted:]
            deleted = len(recorded.pods)
            by_node: dict[str, list[PodRequest]] = {}
            for victim in evicted:
                by_node.setdefault(where[victim.key], []).append(victim)
            for victims in reversed(list(by_node.values())):
                for victim in victims:
                    cache.remove_pod(victim.key)
                    loop.pod_gone(victim.key)
                now.now += 1.0  # past the backoff of the preemptors that wait
                loop.cluster_event("pod deleted")
                loop.run_until_idle()
    now.now += 600.0  # past every backoff: the preemptors still waiting are tried once more
    loop.cluster_event("pod deleted")
    loop.run_until_idle()
    spent = clock() - started
    bound = {key: entry.placement.slot for key, entry in ((p.key, cache.pod(p.key)) for p in preemptors) if entry}
    names = cache.names
    elsewhere = sum(1 for key, slot in bound.items() if recorded.nominated.get(key) not in (None, names[slot]))
    print(
        f"PreemptionBasic in-process ({nodes} nodes, {4 * nodes} + {nodes} pods): {spent / nodes * 1e3:.2f} ms of"
        f" {'wall clock' if clock is time.perf_counter else 'CPU'} per preemptor; {len(bound)} bound,"
        f" {len(recorded.pods)} evictions (minimum {3 * nodes}), {elsewhere} bound on a node nominated for another"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wall", action="store_true", help="time the wall clock, not this process's CPU time")
    parser.add_argument("--basic", type=int, default=0, help="then PreemptionBasic in-process with this many nodes")
    args = parser.parse_args()
    clock = time.perf_counter if args.wall else time.process_time
    started = time.perf_counter()
    loop, _, quiet = build(args.nodes)
    print(
        f"{args.nodes} nodes of 8 GPUs, 7 one-GPU pods on each (priorities {', '.join(map(str, RUNNING))}); best of"
        f" {args.rounds} rounds of {args.cycles} runs, {'wall-clock' if args.wall else 'CPU'} microseconds per run"
        f" (built in"
        f" {time.perf_counter() - started:.1f} s)"
    )
    scheduler = loop.scheduler
    snapshot = scheduler.cache.snapshot()
    fits, unfit = pending("fits", 1, 0), pending("unfit", 2, 0)
    assert scheduler.place(fits, snapshot).decision is not None
    assert scheduler.place(unfit, snapshot).decision is None
    fit = harness.best_us(lambda: scheduler.place(fits, snapshot), args.cycles, args.rounds, clock)
    print(f"{'cycle fits':>14} {fit:10.0f}")
    fails = harness.best_us(lambda: scheduler.place(unfit, snapshot), args.cycles, args.rounds, clock)
    print(f"{'cycle fails':>14} {fails:10.0f}")

    finds = attempt_of(loop, [pending("finds", 2, 1000)])

    def found() -> None:
        before = quiet.evicted
        assert search(loop, finds) is Verdict.WAITS
        assert quiet.evicted > before
        undo(loop, finds)

    print(f"{'finds victims':>14} {harness.best_us(found, args.cycles, args.rounds, clock):10.0f}")
    loop.queue.done(finds.key)

    preemptor = loop.action_state(Preemptor)
    assert preemptor is not None
    nowhere = {"pool": "b"}
    group = PodGroup(namespace="bench", name="gang", min_member=2, priority=1000)
    failing: dict[str, Callable[[], Attempt]] = {
        "all above it": lambda: attempt_of(loop, [pending("above", 2, 5)]),
        "not enough": lambda: attempt_of(loop, [pending("short", 5, 50)]),
        "node rules": lambda: attempt_of(loop, [pending("rules", 2, 1000, selector=nowhere)]),
        "gang rules": lambda: attempt_of(
            loop, [pending(f"gang-{i}", 8, 1000, selector=nowhere, group="gang") for i in range(2)], group
        ),
    }
    print(f"{'':>14} {'search':>10} {'remembered':>11}")
    for name, make in failing.items():
        attempt = make()

        def fresh(attempt: Attempt = attempt) -> None:
            preemptor.policies_changed()
            assert search(loop, attempt) is Verdict.NOTHING

        def again(attempt: Attempt = attempt) -> None:
            assert search(loop, attempt) is Verdict.NOTHING

        cycles = args.cycles if name != "gang rules" else max(1, args.cycles // 10)
        first = harness.best_us(fresh, cycles, args.rounds, clock)
        search(loop, attempt)
        print(f"{name:>14} {first:10.0f} {harness.best_us(again, args.cycles, args.rounds, clock):11.0f}")
        loop.queue.done(attempt.key)
    assert quiet.evicted > 0
    if args.basic:
        basic(args.basic, clock)


if __name__ == "__main__":
    main()
