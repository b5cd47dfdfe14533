"""Invariants under faults: a seeded, randomised run of two ``gpusched run`` replicas against faults, then checks of
what the API server holds.

One run per seed (``-k seed1``, ``-m faults``). On 40 kwok nodes of 8 GPUs (five NVLink cliques, ten racks) the
test creates, over ``GPUSCHED_FAULTS_SECONDS`` (150 s by default), a few hundred single pods (whole GPUs and
shared GPUs), gangs (PodGroups with and without ``spec.topology.required``, some elastic: ``maxMember`` above
``minMember``, with more members than that) in seven queues with guarantees, limits and a parent, Deployments
whose pods consolidation may move (the profile runs ``consolidate`` before ``reclaim`` and ``preempt``), pods of a
high PriorityClass whose preemptions hold room for them (nominations), and deletes pods and gangs mid-flight.
At random moments of the same seeded timeline it SIGKILLs the leader (twice) and the standby (once) and starts them
again a few seconds later, SIGKILLs and restarts the API server, creates malformed pods, PodGroups and Queues, and
adds a malformed ``gpusched.io/`` annotation to pods that are already bound.

When the timeline ends, both replicas run and the bindings have settled, everything is listed from the API server
(the scheduler's own view is not trusted) and checked with invariants.py:

- no node holds more whole GPUs than its allocatable ``nvidia.com/gpu``;
- no GPU id given whole to two pods, no GPU above 1000 thousandths, GPU ids in range and as many as asked;
- no gang partly bound (bound members 0 or >= minMember);
- no queue (with its subtree) above its limit;
- every valid queue's ``status.allocated`` equal to what its bound pods add up to (polled while the status
  writer catches up);
- no pod bound in a queue the scheduler must refuse, no malformed pod bound;
- every pending pod has ``PodScheduled=False`` or a reason Event (on it or on its PodGroup);
- no pod ever bound to two nodes, nor its GPU ids changed (from a watch kept during the whole run);
- no traceback in the replicas' logs and no replica that exited by itself (a SIGKILL leaves no traceback).

Every violation is collected before the test fails, so one run reports all of them; the figures of the run are
printed (run with ``-s``) and written as JSON to ``GPUSCHED_FAULTS_REPORT`` when that is set.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import re
import shutil
import tempfile
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import invariants as inv
from tests.e2e import kube as kube_mod
from tests.e2e.kube import Gpusched, Scenario
from tests.e2e.localcluster import APIError

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

NODES = int(os.environ.get("GPUSCHED_FAULTS_NODES", "40"))
#: Seconds over which the workload and the faults are spread.
LOAD_SECONDS = float(os.environ.get("GPUSCHED_FAULTS_SECONDS", "150"))
SINGLE_PODS = int(os.environ.get("GPUSCHED_FAULTS_PODS", "240"))
GANGS = int(os.environ.get("GPUSCHED_FAULTS_GANGS", "24"))
MOVERS = int(os.environ.get("GPUSCHED_FAULTS_MOVERS", "12"))
URGENT = int(os.environ.get("GPUSCHED_FAULTS_URGENT", "10"))
#: Short leases so that a failover takes seconds; consolidation among the actions, so that plans (held targets,
#: evictions, replacements) are cut by the faults too.
CONFIG = {
    "leaderElection": {"leaseDurationSeconds": 4, "renewDeadlineSeconds": 3, "retryPeriodSeconds": 1},
    "profile": {"actions": ["allocate", "consolidate", "reclaim", "preempt"]},
}
PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
CLIQUES, RACKS = 5, 10


@dataclass
class Run:
    """What happened in one run: its timeline's outcome, the figures, and every violation found."""

    seed: int
    started: float = field(default_factory=time.monotonic)
    created: dict[str, int] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)
    violations: dict[str, list[str]] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)

    def at(self) -> str:
        return f"t={time.monotonic() - self.started:6.1f}s"

    def count(self, what: str, n: int = 1) -> None:
        self.created[what] = self.created.get(what, 0) + n

    def fault(self, text: str) -> None:
        line = f"{self.at()} {text}"
        self.faults.append(line)
        print(f"[faults seed{self.seed}] {line}", flush=True)

    def violate(self, invariant: str, found: list[str]) -> None:
        if found:
            self.violations.setdefault(invariant, []).extend(found)


def _retry(call: Callable[[], Any], *, what: str, timeout: float = 60.0) -> Any:
    """Call through an API server restart: retry on no answer or a 5xx/429, re-raise any other refusal."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except APIError as exc:
            if (exc.status < 500 and exc.status != 429) or time.monotonic() > deadline:
                raise
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            if time.monotonic() > deadline:
                raise
        time.sleep(0.5)


class Workload:
    """The seeded objects of one run and the calls that make, delete and corrupt them."""

    def __init__(self, sched: Scenario, run: Run, rng: random.Random) -> None:
        self.sched = sched
        self.run = run
        self.rng = rng
        p = f"f{run.seed}-"
        self.prod, self.research, self.lab = p + "prod", p + "research", p + "lab"
        self.lab_a, self.lab_b, self.capped = p + "lab-a", p + "lab-b", p + "capped"
        self.movers = p + "movers"  # its running pods may be moved (spec.consolidation.moves: Any)
        self.urgent_class = p + "urgent"  # a PriorityClass above every other pod's
        self.ghost = p + "ghost"  # never created: QueueNotFound
        self.refused = [p + "loop-a", p + "loop-b", p + "orphan"]  # a cycle and an unknown parent
        self.singles: list[str] = []
        self.gangs: dict[str, list[str]] = {}
        self.malformed_pods: list[str] = []
        self.deleted: set[str] = set()
        self.corrupted: list[str] = []

    # ---- queues ----

    def queues(self) -> None:
        k = kube_mod
        good = [
            k.queue(self.prod, guaranteed={inv.GPU: "96"}, limit={inv.GPU: "160"}, weight=2),
            k.queue(self.research, guaranteed={inv.GPU: "64"}, limit={inv.GPU: "120"}),
            k.queue(self.lab, limit={inv.GPU: "48"}),
            k.queue(self.lab_a, parent=self.lab, guaranteed={inv.GPU: "16"}),
            k.queue(self.lab_b, parent=self.lab, guaranteed={inv.GPU: "8"}, limit={inv.GPU: "24"}),
            k.queue(self.capped, limit={inv.GPU: "8"}),
            k.queue(self.movers, limit={inv.GPU: "48"}),
        ]
        malformed = [
            k.queue(self.refused[0], parent=self.refused[1]),
            k.queue(self.refused[1], parent=self.refused[0]),
            k.queue(self.refused[2], parent=self.ghost),
        ]
        good[-1]["spec"]["consolidation"] = {"moves": "Any"}
        for manifest in good + malformed:
            name = manifest["metadata"]["name"]
            with contextlib.suppress(APIError):  # a leftover of an interrupted earlier run
                self.sched.kube.request("DELETE", kube_mod.Kube.custom_path("queues", name=name))
        for manifest in good + malformed:
            kube_mod.wait_until(
                lambda m=manifest: self._create_queue(m), timeout=30, what=f"queue {manifest['metadata']['name']}"
            )
        with contextlib.suppress(APIError):
            self.sched.kube.request("DELETE", f"{PRIORITY_CLASSES}/{self.urgent_class}")
        self.sched.kube.request(
            "POST",
            PRIORITY_CLASSES,
            {"apiVersion": "scheduling.k8s.io/v1", "metadata": {"name": self.urgent_class}, "value": 100000},
        )
        self.run.count("queues", len(good))
        self.run.count("malformed queues (cycle, unknown parent)", len(malformed))
        # What the API server must refuse outright.
        for bad in (
            k.queue(f"f{self.run.seed}-below", guaranteed={inv.GPU: "8"}, limit={inv.GPU: "4"}),
            k.queue(f"f{self.run.seed}-neg", limit={inv.GPU: "-1"}),
        ):
            try:
                self.sched.create_queue(bad)
            except APIError as exc:
                assert exc.status == 422, exc
                self.run.count("queues refused by the API server")
            else:
                self.run.violate("api server refuses invalid Queues", [f"queue {bad['metadata']['name']} accepted"])

    def _create_queue(self, manifest: dict[str, Any]) -> bool:
        try:
            self.sched.create_queue(manifest)
        except APIError as exc:
            if exc.status == 409:  # still being deleted
                return False
            raise
        return True

    def queue_choice(self) -> str | None:
        r = self.rng.random()
        for share, name in (
            (0.25, self.prod),
            (0.50, self.research),
            (0.62, self.lab_a),
            (0.72, self.lab_b),
            (0.80, self.capped),
            (0.82, self.ghost),
            (0.85, self.rng.choice(self.refused)),
        ):
            if r < share:
                return name
        return None  # the implicit default queue

    # ---- pods and gangs ----

    def create(self, manifest: dict[str, Any]) -> None:
        try:
            _retry(lambda: self.sched.create_pod(manifest), what=f"pod {manifest['metadata']['name']}")
        except APIError as exc:
            if exc.status != 409:  # 409: an attempt cut off by the API server's restart had landed
                raise

    def single(self, index: int) -> None:
        name = f"p{index:03d}"
        queue = self.queue_choice()
        if self.rng.random() < 0.25:
            manifest = kube_mod.pod(name, gpu_milli=self.rng.choice([250, 300, 500, 700]), queue=queue, cpu="500m")
            self.run.count("single pods (shared GPU)")
        else:
            manifest = kube_mod.pod(name, gpus=self.rng.choices([1, 2, 4, 8], weights=[40, 25, 20, 8])[0], queue=queue)
            self.run.count("single pods (whole GPUs)")
        self.create(manifest)
        self.singles.append(name)

    def gang(self, index: int) -> None:
        group = f"g{index:02d}"
        min_member = self.rng.randint(2, 4)
        members = min_member + (1 if self.rng.random() < 0.3 else 0)
        max_member = None
        if self.rng.random() < 0.35:
            # Elastic: admitted at minMember, grown to maxMember, and one member more than that waits for a place.
            max_member = min_member + self.rng.randint(1, 2)
            members = max_member + (1 if self.rng.random() < 0.5 else 0)
        gpus = self.rng.choice([1, 2, 4, 8])
        required = self.rng.choice([None, None, "clique", "rack"])
        queue = self.queue_choice()
        manifest = kube_mod.podgroup(group, min_member=min_member, queue=queue, topology_required=required)
        if max_member is not None:
            manifest["spec"]["maxMember"] = max_member
            self.run.count("elastic gangs")
        _retry(lambda: self.sched.create_podgroup(manifest), what=f"podgroup {group}")
        names = [f"{group}-m{m}" for m in range(members)]
        for name in names:
            self.create(kube_mod.pod(name, gpus=gpus, group=group))
        self.gangs[group] = names
        self.run.count("gangs" + (f" (required {required})" if required else ""))
        self.run.count("gang members", members)

    def mover(self, index: int) -> None:
        """A Deployment of 1-GPU pods in the queue whose pods consolidation may move: a move evicts one, and the
        Deployment's replacement goes to the node held for it."""
        name = f"mv{index:02d}"
        template = kube_mod.pod(name, gpus=1, queue=self.movers, labels={"app": name})
        del template["metadata"]["name"]
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": self.rng.randint(1, 3),
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": template["metadata"], "spec": template["spec"]},
            },
        }
        path = f"/apis/apps/v1/namespaces/{self.sched.namespace}/deployments"
        try:
            _retry(lambda: self.sched.kube.request("POST", path, body), what=f"deployment {name}")
        except APIError as exc:
            if exc.status != 409:
                raise
        self.run.count("deployments whose pods may move")

    def urgent(self, index: int) -> None:
        """A pod of the highest priority in a queue with running work: preemption evicts lower pods of its queue
        and holds the room for it (its nominated node) until it binds."""
        name = f"u{index:02d}"
        queue = self.rng.choice([self.prod, self.research])
        gpus = self.rng.choice([2, 4, 8])
        self.create(kube_mod.pod(name, gpus=gpus, queue=queue, priority_class=self.urgent_class))
        self.singles.append(name)
        self.run.count("urgent pods (preemptors)")

    def delete_single(self) -> None:
        alive = [n for n in self.singles if n not in self.deleted]
        if alive:
            name = self.rng.choice(alive)
            _retry(lambda: self.sched.delete_pod(name), what=f"delete {name}")
            self.deleted.add(name)
            self.run.count("single pods deleted mid-flight")

    def delete_gang(self) -> None:
        alive = sorted(g for g in self.gangs if g not in self.deleted)
        if not alive:
            return
        group = self.rng.choice(alive)
        for name in self.gangs[group]:
            _retry(functools.partial(self.sched.delete_pod, name), what=f"delete {name}")
        with contextlib.suppress(APIError):
            _retry(
                lambda: self.sched.kube.request(
                    "DELETE", kube_mod.Kube.custom_path("podgroups", self.sched.namespace, group)
                ),
                what=f"delete podgroup {group}",
            )
        self.deleted.add(group)
        self.run.count("gangs deleted mid-flight")

    # ---- malformed objects ----

    def malformed_pod(self, index: int) -> None:
        name = f"bad{index:02d}"
        kind = index % 6
        if kind == 0:
            manifest = kube_mod.pod(name, gpus=0)
            manifest["metadata"]["annotations"][inv.ANNOTATION_GPU_MILLI] = "abc"
        elif kind == 1:
            manifest = kube_mod.pod(name, gpu_milli=1500)
        elif kind == 2:
            manifest = kube_mod.pod(name, gpu_milli=0)
        elif kind == 3:
            manifest = kube_mod.pod(name, gpus=2)
            manifest["metadata"]["annotations"][inv.ANNOTATION_GPU_MILLI] = "500"
        elif kind == 4:
            manifest = kube_mod.pod(name, gpus=1, gpu_memory="10Gi")  # gpu-memory without gpu-milli
        else:
            manifest = kube_mod.pod(name, gpus=1, gpu_model="|")
        self.create(manifest)
        self.malformed_pods.append(name)
        self.run.fault(f"malformed pod {name}: {manifest['metadata']['annotations']}")
        self.run.count("malformed pods")

    def corrupt_bound_pod(self) -> None:
        """Add a malformed gpusched.io annotation to a pod that is already bound (its room must stay counted)."""
        pods = _retry(self.sched.pods, what="list pods")
        bound = sorted(
            p["metadata"]["name"]
            for p in pods
            if inv.holds_room(p)
            and p["metadata"]["name"] not in self.corrupted
            and not p["metadata"].get("deletionTimestamp")
        )
        if not bound:
            return
        name = self.rng.choice(bound)
        pod = next(p for p in pods if p["metadata"]["name"] == name)
        if inv.shared_milli(pod):
            patch = {kube_mod.ANNOTATION_GPU_MEMORY: "lots"}
        else:
            patch = {inv.ANNOTATION_GPU_MILLI: "abc"}
        try:
            _retry(lambda: kube_mod.patch_annotations(self.sched.kube, self.sched.namespace, name, patch), what=name)
        except APIError as exc:
            if exc.status != 404:
                raise
            return
        self.corrupted.append(name)
        self.run.fault(f"malformed annotation {patch} added to bound pod {name} on {inv.node_of(pod)}")
        self.run.count("bound pods given a malformed annotation")

    def malformed_group(self, index: int) -> None:
        kind = index % 3
        group = f"badgroup{index}"
        if kind == 0:
            manifest = kube_mod.podgroup(group, min_member=2, topology_required="nosuchlevel")
            members = 2
        elif kind == 1:
            manifest = kube_mod.podgroup(group, min_member=2, queue=self.ghost)
            members = 2
        else:
            manifest = kube_mod.podgroup(group, min_member=4)  # fewer members than minMember: never binds
            members = 2
        _retry(lambda: self.sched.create_podgroup(manifest), what=group)
        for m in range(members):
            self.create(kube_mod.pod(f"{group}-m{m}", gpus=1, group=group))
        # Members of a PodGroup that does not exist.
        self.create(kube_mod.pod(f"nogroup{index}", gpus=1, group=f"missing{index}"))
        # And one the API server refuses.
        try:
            self.sched.create_podgroup(kube_mod.podgroup(f"zero{index}", min_member=0))
        except APIError as exc:
            assert exc.status == 422, exc
            self.run.count("podgroups refused by the API server")
        else:
            self.run.violate("api server refuses invalid PodGroups", [f"podgroup zero{index} accepted"])
        self.run.fault(f"malformed podgroup {group} ({manifest['spec']}), pod nogroup{index} of a missing group")
        self.run.count("malformed podgroups")


class Replicas:
    """The two replicas: which leads, kills and restarts, and replicas that died without being killed."""

    def __init__(self, sched: Scenario, run: Run) -> None:
        self.run = run
        self.all = [sched.gpusched(f"r{i}", config=CONFIG) for i in (0, 1)]
        self.killed: set[str] = set()
        self.crashes: list[str] = []

    def start(self) -> None:
        for r in self.all:
            r.start()
        for r in self.all:
            r.wait_ready(timeout=120)
        kube_mod.wait_until(lambda: self.leader() is not None, timeout=60, what="a replica leading")

    def leader(self) -> Gpusched | None:
        for r in self.all:
            with contextlib.suppress(Exception):
                if r.alive() and r.is_leader():
                    return r
        return None

    def kill(self, which: str) -> Gpusched | None:
        leader = self.leader()
        alive = [r for r in self.all if r.alive()]
        if which == "leader":
            target = leader
        else:
            target = next((r for r in alive if r is not leader), None)
        if target is None:
            self.run.fault(f"kill -9 {which}: no {which} alive right now, skipped")
            return None
        target.kill()
        self.killed.add(target.identity)
        self.run.fault(f"kill -9 {which} {target.identity}")
        return target

    def restart(self, replica: Gpusched) -> None:
        if not replica.alive():
            replica.start()
            self.killed.discard(replica.identity)
            self.run.fault(f"restart {replica.identity}")

    def watch(self) -> None:
        """A replica that exited although nobody killed it is a crash: record it, then start it again."""
        for r in self.all:
            if r.popen is not None and not r.alive() and r.identity not in self.killed:
                code = r.popen.returncode
                self.crashes.append(
                    f"{self.run.at()} {r.identity} exited by itself with status {code}:\n{r.log_tail(12)}"
                )
                self.run.fault(f"CRASH: {r.identity} exited by itself with status {code}; starting it again")
                r.start()


def _nodes(sched: Scenario) -> None:
    manifests = []
    for i in range(NODES):
        clique = i * CLIQUES // NODES
        rack = i * RACKS // NODES
        manifests.append(
            kube_mod.gpu_node(
                f"fault-{i:02d}", clique=f"fabric.{clique}", rack=f"r{rack}", block=f"b{rack * 2 // RACKS}"
            )
        )
    sched.add_nodes(manifests)


def _timeline(rng: random.Random) -> list[tuple[float, str, int]]:
    """(second, action, index) sorted by time: the seeded schedule of work, deletions and faults."""
    t = LOAD_SECONDS
    plan: list[tuple[float, str, int]] = []
    plan += [(rng.uniform(0, 0.8 * t), "single", i) for i in range(SINGLE_PODS)]
    plan += [(rng.uniform(0, 0.8 * t), "gang", i) for i in range(GANGS)]
    plan += [(rng.uniform(0, 0.6 * t), "mover", i) for i in range(MOVERS)]
    plan += [(rng.uniform(0.3 * t, 0.85 * t), "urgent", i) for i in range(URGENT)]
    plan += [(rng.uniform(0.1 * t, 0.9 * t), "delete-single", i) for i in range(SINGLE_PODS // 7)]
    plan += [(rng.uniform(0.2 * t, 0.9 * t), "delete-gang", i) for i in range(max(1, GANGS // 5))]
    plan += [(rng.uniform(0.05 * t, 0.9 * t), "malformed-pod", i) for i in range(6)]
    plan += [(rng.uniform(0.05 * t, 0.8 * t), "malformed-group", i) for i in range(3)]
    # Corrupt bound pods before the kills too, so that a restarted replica lists them.
    plan += [(rng.uniform(0.1 * t, 0.25 * t), "corrupt-bound", i) for i in range(3)]
    plan += [(rng.uniform(0.6 * t, 0.8 * t), "corrupt-bound", 3)]
    plan += [(rng.uniform(0.25 * t, 0.4 * t), "kill-leader", 0), (rng.uniform(0.65 * t, 0.8 * t), "kill-leader", 1)]
    plan += [(rng.uniform(0.45 * t, 0.6 * t), "kill-standby", 0)]
    plan += [(rng.uniform(0.4 * t, 0.9 * t), "restart-apiserver", 0)]
    return sorted(plan)


def _settle(sched: Scenario, run: Run, replicas: Replicas, *, quiet: float = 15.0, timeout: float = 150.0) -> None:
    """Wait until no pod is being deleted and the set of bindings has not changed for ``quiet`` seconds."""
    last: frozenset[tuple[str, str]] | None = None
    since = time.monotonic()
    deadline = since + timeout
    while time.monotonic() < deadline:
        replicas.watch()
        pods = _retry(sched.pods, what="list pods")
        state = frozenset((p["metadata"]["uid"], inv.node_of(p)) for p in pods if inv.node_of(p))
        terminating = [p for p in pods if p["metadata"].get("deletionTimestamp")]
        if state != last or terminating:
            last, since = state, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(1.0)
    run.fault(f"bindings still changing after {timeout:.0f}s of settling; checking anyway")


def _poll_check(check: Callable[[], list[str]], *, timeout: float) -> list[str]:
    """Run a check until it finds nothing or ``timeout`` passes; the last findings."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(2.0)


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed{s}") for s in (1, 2, 3)])
def test_invariants_hold_under_faults(sched: Scenario, seed: int) -> None:
    if sched.kube.local is None:
        pytest.skip("restarting the API server needs the suite's own control plane (not GPUSCHED_E2E_KUBECONFIG)")
    rng = random.Random(seed)
    run = Run(seed=seed)
    _nodes(sched)
    work = Workload(sched, run, rng)
    work.queues()
    replicas = Replicas(sched, run)
    replicas.start()
    run.figures["setup_s"] = round(time.monotonic() - run.started, 1)
    watcher = kube_mod.PodWatcher(sched.kube, sched.namespace).start()

    plan = _timeline(rng)
    restarts: list[tuple[float, Gpusched]] = []
    t0 = time.monotonic()
    try:
        for at, action, index in plan:
            while True:
                now = time.monotonic() - t0
                for due, replica in [r for r in restarts if r[0] <= now]:
                    restarts.remove((due, replica))
                    replicas.restart(replica)
                if now >= at:
                    break
                time.sleep(min(0.2, at - now))
            replicas.watch()
            if action == "single":
                work.single(index)
            elif action == "gang":
                work.gang(index)
            elif action == "mover":
                work.mover(index)
            elif action == "urgent":
                work.urgent(index)
            elif action == "delete-single":
                work.delete_single()
            elif action == "delete-gang":
                work.delete_gang()
            elif action == "malformed-pod":
                work.malformed_pod(index)
            elif action == "malformed-group":
                work.malformed_group(index)
            elif action == "corrupt-bound":
                work.corrupt_bound_pod()
            elif action in ("kill-leader", "kill-standby"):
                killed = replicas.kill(action.removeprefix("kill-"))
                if killed is not None:
                    restarts.append((time.monotonic() - t0 + rng.uniform(1.0, 6.0), killed))
            elif action == "restart-apiserver":
                downtime = rng.uniform(1.0, 4.0)
                run.fault(f"API server kill -9, down {downtime:.1f}s")
                assert sched.kube.local is not None
                took = sched.kube.local.restart_apiserver(kill=True, downtime=downtime)
                run.fault(f"API server back after {took:.1f}s")
        for _, replica in restarts:
            replicas.restart(replica)
        run.figures["load_s"] = round(time.monotonic() - t0, 1)

        # Both replicas up again and one leading, then let the bindings settle.
        for r in replicas.all:
            replicas.watch()
            with contextlib.suppress(Exception):
                r.wait_ready(timeout=90)
        leader = kube_mod.wait_until(replicas.leader, timeout=60, what="a leader after the faults")
        run.figures["final_leader"] = leader.identity
        settle_started = time.monotonic()
        _settle(sched, run, replicas)
        run.figures["settle_s"] = round(time.monotonic() - settle_started, 1)
    finally:
        watcher.stop()
        with contextlib.suppress(Exception):
            sched.kube.request("DELETE", f"{PRIORITY_CLASSES}/{work.urgent_class}")

    _check(sched, run, work, replicas, watcher)
    run.figures["total_s"] = round(time.monotonic() - run.started, 1)
    _report(run)
    assert not run.violations, _describe(run)


def _check(sched: Scenario, run: Run, work: Workload, replicas: Replicas, watcher: kube_mod.PodWatcher) -> None:
    kube = sched.kube

    def listing() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
        pods = sched.pods()
        nodes = sched.my_nodes()
        groups = kube_mod.list_custom(kube, "podgroups", sched.namespace)
        mine = set(sched.queues)
        queues = [q for q in kube_mod.list_custom(kube, "queues") if q["metadata"]["name"] in mine]
        return pods, nodes, groups, queues

    pods, nodes, groups, queues = listing()
    bound = [p for p in pods if inv.holds_room(p)]
    run.figures.update(
        pods_at_end=len(pods),
        bound_at_end=len(bound),
        gpus_bound_at_end=sum(inv.whole_gpus(p) for p in bound),
        pods_ever_bound=sum(1 for h in watcher.snapshot().values() if h["nodes"]),
        watch_events=watcher.events_seen,
        watch_reconnects=watcher.reconnects,
    )
    held = inv.subtree_usage(inv.leaf_usage(pods, groups), queues)
    run.figures["queue_gpus_at_end"] = {
        q["metadata"]["name"]: f"{held.get(q['metadata']['name'], {}).get(inv.GPU, 0.0):g}"
        + (f" (limit {q['spec']['limit'][inv.GPU]})" if inv.GPU in (q["spec"].get("limit") or {}) else "")
        for q in queues
    }
    run.figures["pending_at_end"] = sum(1 for p in pods if not inv.node_of(p))
    run.violate("no node over-committed", inv.node_overcommit(pods, nodes))
    run.violate("GPU ids and per-GPU milli", inv.gpu_sharing(pods, nodes))
    run.violate("no gang partly bound", inv.partial_gangs(pods, groups))
    run.violate("no queue above its limit", inv.queues_over_limit(pods, groups, queues))
    run.violate("no pod bound in a refused queue", inv.pods_of_refused_queues_bound(pods, groups, work.refused))
    malformed = set(work.malformed_pods)
    run.violate(
        "no malformed pod bound",
        [f"pod {p['metadata']['name']} bound to {inv.node_of(p)}" for p in bound if p["metadata"]["name"] in malformed],
    )
    run.violate("no pod ever bound to two nodes", inv.bound_twice(watcher.snapshot()))

    def status_check() -> list[str]:
        pods, _, groups, queues = listing()
        return inv.queue_status_diff(pods, groups, queues, skip=work.refused)

    run.violate("queue status.allocated equals its bound pods", _poll_check(status_check, timeout=40))

    def reasons_check() -> list[str]:
        groups = kube_mod.list_custom(kube, "podgroups", sched.namespace)
        return inv.pending_without_reason(sched.pods(), kube.events(sched.namespace), groups)

    run.violate("every pending pod has a reason", _poll_check(reasons_check, timeout=30))

    logs: dict[str, list[str]] = {}
    for r in replicas.all:
        try:
            lines = r.log_path.read_text(errors="replace").splitlines()
        except OSError as exc:
            lines = [f"<no log: {exc}>"]
        logs[r.identity] = lines
        run.figures.setdefault("log_lines", {})[r.identity] = len(lines)
        run.violate("no traceback in the replicas' logs", [f"{r.identity} {t}" for t in inv.tracebacks(lines)])
    run.violate("no replica exits by itself", replicas.crashes)
    if run.violations:
        _keep_logs(run, replicas, logs)


#: How a violation names a pod: ``pod <namespace>/<name>`` (invariants.py).
_POD_NAMED = re.compile(r"\bpod ([a-z0-9.-]+/[a-z0-9.-]+)")


def _keep_logs(run: Run, replicas: Replicas, logs: dict[str, list[str]]) -> None:
    """What the replicas logged (``logs``, by identity, as _check read them) about each pod a violation names,
    into the report (CI keeps only the test's output), and a copy of the whole logs in a folder the test does
    not delete afterwards."""
    named = sorted({m for found in run.violations.values() for v in found for m in _POD_NAMED.findall(v)})[:10]
    keep = Path(tempfile.mkdtemp(prefix=f"gpusched-faults-seed{run.seed}-"))
    excerpts: dict[str, list[str]] = {}
    for r in replicas.all:
        with contextlib.suppress(OSError):
            shutil.copy(r.log_path, keep / r.log_path.name)
        lines = logs.get(r.identity, [])
        for pod in named:
            hits = [line for line in lines if f'"{pod}"' in line or f"{pod}:" in line or f"{pod} " in line]
            if hits:
                excerpts.setdefault(pod, []).extend(f"{r.identity}: {line[:400]}" for line in hits[-15:])
    run.figures["logs_kept_in"] = str(keep)
    run.figures["log_lines_about_violating_pods"] = excerpts or "no log line names them"


def _report(run: Run) -> None:
    report = {
        "seed": run.seed,
        "created": run.created,
        "faults": run.faults,
        "figures": run.figures,
        "violations": run.violations,
    }
    print(f"\n[faults seed{run.seed}] " + json.dumps(report, indent=1, default=str), flush=True)
    path = os.environ.get("GPUSCHED_FAULTS_REPORT")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(report, default=str) + "\n")


def _describe(run: Run) -> str:
    lines = [
        f"seed {run.seed}: {sum(map(len, run.violations.values()))} violations of {len(run.violations)} invariants"
    ]
    for invariant, found in run.violations.items():
        lines.append(f"== {invariant} ({len(found)})")
        lines += [f"   {v}" for v in found[:25]]
        if len(found) > 25:
            lines.append(f"   ... and {len(found) - 25} more")
    return "\n".join(lines)
