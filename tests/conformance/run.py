"""Kubernetes' own scheduling e2e tests, run side by side against kube-scheduler and gpusched.

Two identical local clusters (tests/e2e/localcluster.py: etcd, kube-apiserver, kube-controller-manager, kwok
nodes), one scheduled by kube-scheduler, the other by ``gpusched run --scheduler-name default-scheduler`` as its
only scheduler, each given the ``[sig-scheduling]`` specs of the e2e.test binary that build-e2e.sh builds from
the pinned k8s.io/kubernetes module. The JUnit reports of both runs make one table: a test, what kube-scheduler
got, what gpusched got. gpusched's bar is to pass every test kube-scheduler passes on the same cluster.

    .venv/bin/python -m tests.conformance.run                 # the full comparison, writes docs/conformance.md
    .venv/bin/python -m tests.conformance.run --subset fast   # the handful make test runs

Every run keeps its logs (the e2e.test output, the JUnit XML, the control plane's and gpusched's logs, and
per failed test the gpusched log lines that name the test's namespace) under the directory printed first.
Exit status: 0 when gpusched passes all kube-scheduler passes, 1 when it does not, 2 when the harness failed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from tests.e2e import kube as kube_mod
from tests.e2e.localcluster import ClusterError, LocalCluster, cached_binaries, ensure_binaries, wait_for

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

BUILD_SCRIPT = HERE / "build-e2e.sh"
DOC = REPO / "docs" / "conformance.md"

KUBE_SCHEDULER = "kube-scheduler"
GPUSCHED = "gpusched"
SCHEDULERS = (KUBE_SCHEDULER, GPUSCHED)
#: The replica's name in its Lease; its log is <run directory>/<identity>.log.
GPUSCHED_IDENTITY = "gpusched"

#: The order Ginkgo runs the specs in (the framework shuffles them): one seed, so both runs see the same order.
GINKGO_SEED = 1

# --------------------------------------------------------------------------------------------------------------
# the cluster both schedulers get

#: Four kwok nodes in two zones. The scheduling specs want at least two Ready, untainted nodes with cpu, memory,
#: pods and ephemeral-storage capacity and a kubernetes.io/hostname label (SchedulerPriorities and the
#: PodTopologySpread specs skip below two, the Multi-AZ specs below two zones); two nodes per zone let the
#: zone-spreading specs tell a spread from a pile-up within a zone, and four nodes keep the specs that fill every
#: node (resource limits, preemption) short. No GPUs: no scheduling spec asks for one, and the preemption specs
#: add their own extended resource to the nodes.
NODE_COUNT = 4
ZONES = ("zone-a", "zone-b")
NODE_CPU = "8"
NODE_MEMORY = "32Gi"
NODE_PODS = "110"
NODE_EPHEMERAL_STORAGE = "100Gi"
REGION = "region-1"
#: The nodes' InternalIP (the kwok pods' hostIP), not loopback: the host-port specs put one pod on 127.0.0.1 and
#: another on the node's address and expect no conflict, which holds only when the two differ (LocalCluster's
#: default, --node-ip=127.0.0.1, makes them the same). Nothing connects to it: kwok serves on 127.0.0.1.
NODE_IP = "10.89.0.1"


def node_name(index: int) -> str:
    return f"kwok-node-{index}"


def create_nodes(cluster: LocalCluster) -> list[str]:
    names = []
    for i in range(NODE_COUNT):
        name = node_name(i)
        cluster.create_fake_node(
            name,
            gpus=0,
            cpu=NODE_CPU,
            memory=NODE_MEMORY,
            pods=NODE_PODS,
            labels={"topology.kubernetes.io/zone": ZONES[i % len(ZONES)], "topology.kubernetes.io/region": REGION},
            extra_resources={"ephemeral-storage": NODE_EPHEMERAL_STORAGE},
            wait_ready=False,
        )
        names.append(name)
    for name in names:
        cluster.wait_node_ready(name)

    # A node goes Ready before the node lifecycle controller takes its node.kubernetes.io/not-ready taint off; the
    # suite's first wait for schedulable nodes polls every 30 s, so waiting here, closely, starts it sooner.
    def untainted() -> bool:
        return all(not cluster.request("GET", f"/api/v1/nodes/{n}").get("spec", {}).get("taints") for n in names)

    wait_for(untainted, 60, "the new nodes' not-ready taints to go")
    return names


class AllocatableMirror:
    """The kubelet's part in a node's extended resources, which kwok does not play.

    A kubelet reports every resource of its node's capacity in allocatable too (less what it reserves, which is
    nothing for an extended resource). Some specs add a fake extended resource to a node's status capacity alone
    and count on that (SchedulerPredicates' pod overhead spec); kwok keeps allocatable as it was created. This
    thread does what the kubelet would: a resource in capacity and not in allocatable is added to allocatable,
    an extended resource gone from capacity goes from allocatable.
    """

    def __init__(self, cluster: LocalCluster, nodes: Sequence[str], interval: float = 0.2) -> None:
        self.cluster = cluster
        self.nodes = list(nodes)
        self.interval = interval
        self.patches = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="allocatable-mirror", daemon=True)

    def __enter__(self) -> AllocatableMirror:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for name in self.nodes:
                # The API server is busy or going away: the next round tries again.
                with contextlib.suppress(ClusterError, OSError):
                    self._mirror(name)

    def _mirror(self, name: str) -> None:
        status = self.cluster.request("GET", f"/api/v1/nodes/{name}").get("status", {})
        capacity, allocatable = status.get("capacity", {}), status.get("allocatable", {})
        change: dict[str, str | None] = {r: q for r, q in capacity.items() if r not in allocatable}
        change.update({r: None for r in allocatable if r not in capacity and "/" in r})
        if change:
            self.cluster.request(
                "PATCH",
                f"/api/v1/nodes/{name}/status",
                {"status": {"allocatable": change}},
                content_type="application/merge-patch+json",
            )
            self.patches += 1


def cluster_shape() -> str:
    zones = ", ".join(f"{z}: {sum(1 for i in range(NODE_COUNT) if ZONES[i % len(ZONES)] == z)}" for z in ZONES)
    return (
        f"{NODE_COUNT} kwok nodes ({zones}; region {REGION}), each cpu {NODE_CPU}, memory {NODE_MEMORY}, "
        f"pods {NODE_PODS}, ephemeral-storage {NODE_EPHEMERAL_STORAGE}, no GPUs, no taints"
    )


# --------------------------------------------------------------------------------------------------------------
# what runs and what cannot


@dataclasses.dataclass(frozen=True)
class Skip:
    """Specs that cannot say anything about a scheduler on this cluster, and why."""

    pattern: str  # a Go regular expression on the spec's full text (also valid as a Python one)
    reason: str


SKIPS: tuple[Skip, ...] = (
    Skip(
        r"Workload API availability|PodGroup API availability",
        "tests the scheduling.k8s.io/v1alpha2 Workload and PodGroup APIs of kube-apiserver (alpha, feature gate "
        "GenericWorkload, not served by the local control plane); no scheduler takes part",
    ),
    Skip(
        r"validates various priority Pods preempt expectedly with the async preemption",
        "needs a kubelet: the victims carry a preStop hook (sleep 79 s, grace period 80 s) so that they stay "
        "terminating while the spec checks them and creates the high-priority pods; kwok runs no hooks and its "
        "pod-delete stage deletes a pod as soon as it is marked for deletion, so the spec finds the victims gone "
        '(`pods "pod0-0-sched-preemption-low-priority" not found`, under kube-scheduler too)',
    ),
)


@dataclasses.dataclass(frozen=True)
class HarnessRace:
    """A failure that comes from the local cluster, not from the scheduler under test, known by its output."""

    name: str
    pattern: str  # a regular expression on the failure message and the spec's output
    explanation: str


HARNESS_RACES: tuple[HarnessRace, ...] = (
    HarnessRace(
        "kwok deleted the re-created pod",
        r'pods "without-label" not found',
        "Get2NodesThatCanRunPod runs a pod named `without-label`, deletes it with grace period 0 and at once creates "
        "another pod of the same name. kwok (v0.8.0) still plays its pod-delete stage for the first pod after that "
        "and deletes by name, so it deletes the second pod (kwok.log: `Delete pod` naming the first pod's node; the "
        "scheduler's bind then fails with `pod without-label is being deleted`), and the spec waits two minutes for a "
        "pod that is gone. Which run it hits is a matter of timing; it says nothing about the scheduler.",
    ),
)

#: What was found behind a gpusched failure the logs alone do not make plain, shown under the failure while the spec
#: still fails (the spec's name, a regular expression -> what to look at).
DIAGNOSES: tuple[tuple[str, str], ...] = (
    (
        r"taints-tolerations is respected if not matching",
        "gpusched binds `still-no-tolerations` once the taint is removed, but the spec waits for a `Scheduled` Event "
        "whose message contains kube-scheduler's `Successfully assigned <namespace>/<pod> to <node>`; gpusched's "
        "says `assigned to <node>` (scheduler/core/loop.py `_scheduled`), so the spec never sees it.",
    ),
    (
        r"schedulingGates are blocked on scheduling",
        "gpusched refuses a pod with `spec.schedulingGates` (PodScheduled=False, reason Unschedulable, `gpusched does "
        "not support scheduling gates`). kube-scheduler leaves a gated pod out of its queue with PodScheduled=False, "
        "reason `SchedulingGated`, which the spec waits for, and schedules it once the gates are removed.",
    ),
    (
        r"spread the pods of a service across zones",
        "gpusched bound all ten `test-service-N` pods (bare pods selected by a Service) to kwok-node-0. kube-scheduler "
        "applies its cluster-default spread constraints (kubernetes.io/hostname maxSkew 3 and "
        "topology.kubernetes.io/zone maxSkew 5, ScheduleAnyway) to pods selected by a Service, ReplicationController, "
        "ReplicaSet or StatefulSet; gpusched passes the ReplicationController spec, so the likely gap is the Service "
        "as a source of the default constraints' selector (not checked in gpusched's code).",
    ),
)

FOCUS = r"\[sig-scheduling\]"

#: Measured on the project's 2-core machine (Go 1.26.8, modules already downloaded), see build-e2e.sh.
E2E_BUILD_TIMES = (
    "5.3 min from an empty Go build cache (`GOCACHE` empty, modules downloaded, nice 19, beside a running test), "
    "2.5 min with the Go build cache the control plane's build uses (measured while that build was running); "
    "66 MB in `~/.cache/gpusched/e2e-*`"
)

#: What make test runs: quick predicate specs (a pod or two each, no filling of nodes, seconds each) that cover node
#: selectors, required node affinity (matching, and the FailedScheduling Event when nothing matches) and taints.
FAST_FOCUS = (
    r"\[sig-scheduling\] SchedulerPredicates .*("
    r"validates that NodeSelector is respected if matching"
    r"|validates that required NodeAffinity setting is respected if matching"
    r"|validates that taints-tolerations is respected if matching"
    r"|validates that NodeAffinity is respected if not matching"
    r")"
)

SUBSETS = {"full": FOCUS, "fast": FAST_FOCUS}


def skip_regex() -> str:
    return "|".join(f"(?:{s.pattern})" for s in SKIPS)


def skip_reason(name: str) -> str | None:
    for s in SKIPS:
        if re.search(s.pattern, name):
            return s.reason
    return None


# --------------------------------------------------------------------------------------------------------------
# results


@dataclasses.dataclass
class Result:
    name: str
    status: str  # passed | failed | skipped
    seconds: float
    message: str = ""  # the failure or skip message
    output: str = ""  # the spec's log (system-err), for failures
    retried_after: str = ""  # the harness race its first run met, when it was run a second time

    def namespaces(self) -> list[str]:
        """The test namespaces the spec created (the framework names them <basename>-<number>)."""
        found = re.findall(r'Destroying namespace "([a-z0-9-]+)"', self.output)
        found += re.findall(r'"?namespace"?[:=] ?"?([a-z][a-z0-9-]*-\d+)\b', self.output)
        return sorted(set(found))


def parse_junit(path: Path) -> dict[str, Result]:
    """The specs of one JUnit report by name (the spec's full text without Ginkgo's [It] prefix)."""
    results: dict[str, Result] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = re.sub(
            r"^\[(?:It|BeforeSuite|AfterSuite|SynchronizedBeforeSuite|ReportAfterSuite)\]\s*", "", case.get("name", "")
        )
        # Ginkgo appends the spec's labels, which repeat the [tags] already in its text.
        name = re.sub(r"\s*\[sig-[^\]]*\]$", "", name)
        seconds = float(case.get("time") or 0)
        err = case.findtext("system-err") or ""
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            message = failure.get("message") or (failure.text or "").strip()
            results[name] = Result(name, "failed", seconds, message.strip(), err + "\n" + (failure.text or ""))
        elif skipped is not None:
            results[name] = Result(name, "skipped", seconds, (skipped.get("message") or "").strip())
        else:
            results[name] = Result(name, "passed", seconds)
    return results


def is_spec(name: str) -> bool:
    return "[sig-scheduling]" in name


# --------------------------------------------------------------------------------------------------------------
# one run


@dataclasses.dataclass
class Run:
    scheduler: str
    directory: Path
    seconds: float = 0.0
    e2e_seconds: float = 0.0
    exit_code: int | None = None
    results: dict[str, Result] = dataclasses.field(default_factory=dict)

    @property
    def junit(self) -> Path:
        return self.directory / "report" / "junit.xml"

    @property
    def gpusched_log(self) -> Path:
        return self.directory / f"{GPUSCHED_IDENTITY}.log"


def e2e_argv(e2e_test: Path, kubeconfig: Path, report_dir: Path, focus: str) -> list[str]:
    return [
        str(e2e_test),
        f"--kubeconfig={kubeconfig}",
        "--provider=local",
        f"--ginkgo.focus={focus}",
        f"--ginkgo.skip={skip_regex()}",
        f"--ginkgo.seed={GINKGO_SEED}",
        "--ginkgo.v",
        "--ginkgo.no-color",
        "--ginkgo.timeout=2h",
        f"--report-dir={report_dir}",
        f"--ginkgo.junit-report={report_dir / 'junit.xml'}",
        # No system pods here, and every node is a kwok node that is Ready from its start.
        "--minStartupPods=0",
        "--allowed-not-ready-nodes=0",
        # There is nothing to collect logs from over ssh; the runner keeps the control plane's logs itself.
        "--dump-logs-on-failure=false",
    ]


def read_results(junit: Path) -> dict[str, Result]:
    """The specs of a run's report, and any other failure (a suite-level one fails the run)."""
    return {n: r for n, r in parse_junit(junit).items() if is_spec(n) or r.status == "failed"}


def load_run(scheduler: str, out: Path) -> Run:
    """A finished run from its directory (``--render``)."""
    run = Run(scheduler, out / scheduler)
    meta = json.loads((run.directory / "run.json").read_text())
    run.seconds, run.e2e_seconds, run.exit_code = meta["seconds"], meta["e2e_seconds"], meta["exit_code"]
    run.results = run_results(run.directory)
    return run


def run_e2e(argv: list[str], output: Path, cluster: LocalCluster, nodes: Sequence[str]) -> int:
    """Run e2e.test to its end (the kubelet's part kwok lacks played meanwhile); its exit code."""
    with open(output, "wb") as f, AllocatableMirror(cluster, nodes):
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        RUNNING.add(proc)
        try:
            return proc.wait()
        finally:
            RUNNING.discard(proc)


def races_met(junit: Path) -> list[str]:
    """The specs of a report that failed on a known race of the local cluster."""
    if not junit.exists():
        return []
    return sorted(n for n, r in read_results(junit).items() if is_spec(n) and r.status == "failed" and harness_race(r))


def exact_focus(names: Sequence[str]) -> str:
    """A Ginkgo focus (Go RE2) that selects exactly these specs: their full text, at the end of what Ginkgo matches."""
    return "(?:" + "|".join(re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", n) for n in names) + ")$"


def run_results(directory: Path) -> dict[str, Result]:
    """A run's results: its report, with the specs run a second time (report-again) as they came out then."""
    results = read_results(directory / "report" / "junit.xml")
    again = directory / "report-again" / "junit.xml"
    if again.exists():
        for n, r in read_results(again).items():
            first = results.get(n)
            if is_spec(n) and r.status != "skipped" and first is not None and first.status == "failed":
                race = harness_race(first)
                r.retried_after = race.name if race is not None else "a failure"
                results[n] = r
    return results


#: The e2e.test processes running now: an interrupt stops them, and their threads then take the clusters down.
RUNNING: set[subprocess.Popen[bytes]] = set()


def run_one(scheduler: str, *, e2e_test: Path, bin_dir: Path | None, out: Path, focus: str, log: Log) -> Run:
    run = Run(scheduler, out / scheduler)
    run.directory.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with LocalCluster(
        bin_dir=bin_dir,
        workdir=run.directory / "cluster",
        with_scheduler=scheduler == KUBE_SCHEDULER,
        extra_kwok_args=[f"--node-ip={NODE_IP}"],
    ) as c:
        k = kube_mod.Kube.of_local(c)
        k.apply_crds()
        k.ensure_namespace(kube_mod.SYSTEM_NAMESPACE)
        nodes = create_nodes(c)
        log(f"{scheduler}: cluster up at {c.server}, nodes {', '.join(nodes)}")
        replica = None
        if scheduler == GPUSCHED:
            replica = kube_mod.Gpusched(
                k,
                identity=GPUSCHED_IDENTITY,
                workdir=run.directory,
                extra_args=["--scheduler-name=default-scheduler"],
            )
            replica.start().wait_ready().wait_leader()
            log(f"{scheduler}: gpusched run leads, log {replica.log_path}")
        try:
            argv = e2e_argv(e2e_test, c.kubeconfig, run.directory / "report", focus)
            (run.directory / "command").write_text(" ".join(_quote(a) for a in argv) + "\n")
            log(f"{scheduler}: running e2e.test, output in {run.directory / 'e2e.log'}")
            e2e_started = time.monotonic()
            run.exit_code = run_e2e(argv, run.directory / "e2e.log", c, nodes)
            raced = races_met(run.junit)
            if raced:
                # Once more, alone, on the same cluster: a spec whose first run met a known race of the local
                # cluster (HARNESS_RACES) says nothing about the scheduler until it has run without it.
                log(f"{scheduler}: running again what met a harness race: {', '.join(map(short_name, raced))}")
                again = e2e_argv(e2e_test, c.kubeconfig, run.directory / "report-again", exact_focus(raced))
                run_e2e(again, run.directory / "e2e-again.log", c, nodes)
            run.e2e_seconds = time.monotonic() - e2e_started
            if replica is not None and not replica.alive():
                code = replica.popen.returncode if replica.popen else None
                log(f"{scheduler}: gpusched run exited during the tests (code {code}); see {replica.log_path}")
        finally:
            if replica is not None:
                replica.stop()
    run.seconds = time.monotonic() - started
    if not run.junit.exists():
        raise HarnessError(
            f"{scheduler}: e2e.test wrote no {run.junit} (exit {run.exit_code}); see {run.directory / 'e2e.log'}"
        )
    (run.directory / "run.json").write_text(
        json.dumps({"seconds": run.seconds, "e2e_seconds": run.e2e_seconds, "exit_code": run.exit_code})
    )
    run.results = run_results(run.directory)
    log(
        f"{scheduler}: {sum(r.status == 'passed' for r in run.results.values())} passed, "
        f"{sum(r.status == 'failed' for r in run.results.values())} failed, "
        f"{sum(r.status == 'skipped' for r in run.results.values())} skipped in {run.e2e_seconds:.0f} s"
    )
    return run


def _quote(arg: str) -> str:
    return arg if re.fullmatch(r"[\w./=:,+-]+", arg) else "'" + arg.replace("'", "'\\''") + "'"


class HarnessError(RuntimeError):
    """The comparison could not be made (no binary, no report): says nothing about either scheduler."""


# --------------------------------------------------------------------------------------------------------------
# the comparison


def harness_race(result: Result) -> HarnessRace | None:
    for race in HARNESS_RACES:
        if re.search(race.pattern, result.message + "\n" + result.output):
            return race
    return None


def cell(result: Result | None, name: str) -> str:
    if result is None:
        return "not run"
    if result.status == "skipped":
        if skip_reason(name):
            return "skipped (listed above)"
        if result.message in ("", "skipped"):
            return "not selected (outside the focus)"
        return f"skipped: {first_line(result.message, 120)}"
    if result.status == "failed":
        race = harness_race(result)
        if race is not None:
            return f"failed: {race.name} (see the notes)"
        again = " (its second run)" if result.retried_after else ""
        return f"**failed**{again}: {first_line(result.message, 120)}".replace("|", "/")
    if result.retried_after:
        return f"passed on a second run (the first: {result.retried_after}, see the notes)"
    return "passed"


def regressions(runs: dict[str, Run]) -> list[str]:
    """The tests gpusched fails (or does not run) that kube-scheduler passes."""
    ks, gs = runs[KUBE_SCHEDULER].results, runs[GPUSCHED].results
    return sorted(n for n, r in ks.items() if r.status == "passed" and (gs.get(n) is None or gs[n].status != "passed"))


def short_name(name: str) -> str:
    return name.replace("[sig-scheduling] ", "", 1)


def first_line(text: str, limit: int = 300) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def table(runs: dict[str, Run]) -> str:
    names = sorted({n for r in runs.values() for n in r.results if is_spec(n)})
    rows = ["| test | kube-scheduler | gpusched |", "|---|---|---|"]
    for n in names:
        cells = [cell(runs[s].results.get(n), n) for s in SCHEDULERS]
        rows.append(f"| {short_name(n).replace('|', '/')} | {cells[0]} | {cells[1]} |")
    return "\n".join(rows)


def summary(runs: dict[str, Run]) -> str:
    ks_passed = [n for n, r in runs[KUBE_SCHEDULER].results.items() if r.status == "passed" and is_spec(n)]
    both = [n for n in ks_passed if (g := runs[GPUSCHED].results.get(n)) is not None and g.status == "passed"]
    return f"gpusched passes {len(both)} of the {len(ks_passed)} tests kube-scheduler passes."


def failure_details(runs: dict[str, Run], out: Path) -> str:
    """Per test gpusched fails that kube-scheduler passes: the failure message and gpusched's log lines about it."""
    parts = []
    gs = runs[GPUSCHED]
    log_lines = gs.gpusched_log.read_text(errors="replace").splitlines() if gs.gpusched_log.exists() else []
    detail_dir = out / "gpusched-failures"
    for i, n in enumerate(regressions(runs), 1):
        r = gs.results.get(n)
        if r is None:
            parts.append(f"### {short_name(n)}\n\nnot run under gpusched (see {gs.directory / 'e2e.log'})\n")
            continue
        namespaces = r.namespaces()
        related = [ln for ln in log_lines if any(ns in ln for ns in namespaces)]
        detail_dir.mkdir(exist_ok=True)
        detail = detail_dir / f"{i:02d}.log"
        detail.write_text(
            f"test: {n}\nnamespaces: {', '.join(namespaces) or '?'}\n\n== failure ==\n{r.message}\n\n"
            f"== gpusched log lines naming the namespaces ({len(related)}) ==\n" + "\n".join(related) + "\n"
            f"\n== the spec's output ==\n{r.output}\n"
        )
        # The lines that say something went wrong first, then the rest in order; a few, shortened.
        telling = [ln for ln in related if '"level": "info"' not in ln] + [
            ln for ln in related if '"level": "info"' in ln
        ]
        excerpt = "\n".join(ln if len(ln) <= 400 else ln[:397] + "..." for ln in telling[:6])
        message = r.message.strip()
        diagnosis = next((text for pattern, text in DIAGNOSES if re.search(pattern, n)), "")
        parts.append(
            f"### {short_name(n)}\n\n```\n{message[:1200]}{' ...' if len(message) > 1200 else ''}\n```\n\n"
            f"namespaces {', '.join(namespaces) or '?'}; {len(related)} gpusched log lines name them "
            f"(all in the run directory's {detail.relative_to(out)}), the first of them:\n\n"
            f"```\n{excerpt or '(none)'}\n```\n" + (f"\nWhat the logs show: {diagnosis}\n" if diagnosis else "")
        )
    return "\n".join(parts)


def notes(runs: dict[str, Run]) -> str:
    """The harness races this run met, with where."""
    met: dict[str, list[str]] = {}
    for s in SCHEDULERS:
        for n, r in runs[s].results.items():
            race = harness_race(r) if r.status == "failed" else None
            name = race.name if race is not None else r.retried_after
            if name:
                met.setdefault(name, []).append(f"{s}: {short_name(n)}")
    if not met:
        return ""
    lines = ["", "Notes (a spec that fails on one of these is run once more, alone, on the same cluster):", ""]
    for race in HARNESS_RACES:
        if race.name in met:
            lines.append(f"- {race.name} ({'; '.join(met[race.name])}): {race.explanation}")
    return "\n".join(lines) + "\n"


def skips_section() -> str:
    return "\n".join(f"- `{s.pattern}`: {s.reason}" for s in SKIPS)


def render_doc(runs: dict[str, Run], *, command: str, build_info: str, source: str) -> str:
    durations = "\n".join(
        f"- {s}: {runs[s].e2e_seconds / 60:.1f} min of e2e.test ({runs[s].seconds / 60:.1f} min with the cluster's "
        f"start and stop), exit code {runs[s].exit_code}"
        for s in SCHEDULERS
    )
    return f"""# Kubernetes' scheduling e2e tests: kube-scheduler and gpusched side by side

This page is written by `tests/conformance/run.py` (`make conformance`); do not edit it by hand, run it again.

{summary(runs)}

## How it was run

```
{command}
```

The e2e.test binary is Kubernetes' own end-to-end suite cut down to `test/e2e/scheduling`
(tests/conformance/e2e, built by tests/conformance/build-e2e.sh from k8s.io/kubernetes at the control plane's
version: {build_info}). The runner starts two identical local clusters (tests/e2e/localcluster.py: etcd,
kube-apiserver, kube-controller-manager, kwok) and runs

```
{" ".join(_quote(a) for a in e2e_argv(Path("e2e.test"), Path("KUBECONFIG"), Path("REPORT_DIR"), FOCUS))}
```

against each: once with kube-scheduler, once with `gpusched run --scheduler-name default-scheduler` as the
cluster's only scheduler (its default profile, no config). The Ginkgo seed is fixed, so both runs take the specs in
the same order; the two runs go side by side (`--sequential`: one after the other).

The gpusched compared: {source}.

Building e2e.test: {E2E_BUILD_TIMES}. `make test` runs four quick SchedulerPredicates specs the same way
(tests/e2e/test_conformance_e2e.py, `run.py --subset fast`); `.ci/run` builds e2e.test after the control plane, and
the test builds it with the same script when it is not in the cache, so a fresh clone's `make test` runs it too.

To look into a failure: the runner prints its log directory first. In it, per scheduler, `e2e.log` (the specs'
output, with the namespace's events and pods dumped on failure), `report/junit.xml`, `cluster/logs/` (etcd,
kube-apiserver, kube-controller-manager, kwok, kube-scheduler) and `gpusched.log`; `gpusched-failures/NN.log`
holds, per test gpusched fails that kube-scheduler passes, the failure, the gpusched log lines that name the test's
namespace, and the spec's output. `run.py --render DIR --doc` compares a finished run again.

The cluster: {cluster_shape()}. Why this shape: the scheduling specs want at least two Ready, untainted nodes
with cpu, memory, pods and ephemeral-storage capacity and hostname labels; the SchedulerPriorities and
PodTopologySpread specs skip themselves below two nodes and the Multi-AZ specs below two zones. Two nodes per zone
let the zone-spreading specs tell a spread from a pile-up, and four nodes keep the specs that fill every node short.
While e2e.test runs, the runner plays one part of the kubelet that kwok does not: a resource a spec adds to a
node's status capacity alone (the pod overhead spec's fake `example.com/beardsecond`) is copied to allocatable, as
a kubelet reports it, and taken out again when it leaves capacity.

Durations:

{durations}

## Tests that cannot run here

{skips_section()}

## Results

{table(runs)}
{notes(runs)}
## Tests gpusched fails that kube-scheduler passes

{failure_details(runs, runs[GPUSCHED].directory.parent) or "None."}
"""


# --------------------------------------------------------------------------------------------------------------
# entry point


class Log:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, msg: str) -> None:
        line = f"[conformance {time.strftime('%H:%M:%S')}] {msg}"
        print(line, file=sys.stderr, flush=True)
        with open(self.path, "a") as f:
            f.write(line + "\n")


def cached_e2e_test() -> Path | None:
    """A built e2e.test for the pinned Kubernetes version, found without Go and without building.

    ``$GPUSCHED_E2E_TEST`` if set; else the newest ``e2e-k8s-<version>-*/e2e.test`` under the cache root (the hash
    part of the tag is not recomputed here, which needs the build script).
    """
    if os.environ.get("GPUSCHED_E2E_TEST"):
        return Path(os.environ["GPUSCHED_E2E_TEST"])
    version = next(
        (
            parts[1]
            for parts in map(str.split, (HERE / "e2e" / "go.mod").read_text().splitlines())
            if len(parts) >= 2 and parts[0] == "k8s.io/kubernetes" and parts[1].startswith("v")
        ),
        None,
    )
    root = Path(os.environ.get("GPUSCHED_E2E_CACHE") or Path.home() / ".cache" / "gpusched")
    built = [b for b in root.glob(f"e2e-k8s-{version}-*/e2e.test") if (b.parent / "BUILD_INFO").is_file()]
    return max(built, key=lambda b: b.stat().st_mtime) if built else None


def source_state() -> str:
    """Which gpusched was compared: the commit, and the files of scheduler/ that differ from it."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "log", "-1", "--format=%h %cI"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "scheduler"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"
    changed = sorted(line[3:] for line in dirty if line.strip())
    return f"commit {head}" + (f", with uncommitted changes to {', '.join(changed)}" if changed else "")


def find_e2e_test(arg: str | None) -> Path:
    chosen = arg or os.environ.get("GPUSCHED_E2E_TEST")
    if chosen:
        path = Path(chosen)
    else:
        proc = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            raise HarnessError(f"{BUILD_SCRIPT} failed (exit {proc.returncode}); see its messages above")
        path = Path(lines[-1])
    if not os.access(path, os.X_OK):
        raise HarnessError(f"{path} is not an executable e2e.test")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--subset", choices=sorted(SUBSETS), default="full", help="which specs (default: full)")
    p.add_argument("--focus", help="a Ginkgo focus regex instead of the subset's")
    p.add_argument("--e2e-test", help="the e2e.test binary (default: $GPUSCHED_E2E_TEST, else build-e2e.sh)")
    p.add_argument("--out", help="where the logs and reports go (default: a new directory under $TMPDIR)")
    p.add_argument(
        "--doc",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"write {DOC.relative_to(REPO)} (default: with --subset full)",
    )
    p.add_argument("--json", help="also write the results as JSON to this file")
    p.add_argument(
        "--sequential", action="store_true", help="one cluster at a time (default: both side by side, at once)"
    )
    p.add_argument("--render", metavar="DIR", help="run nothing: compare the runs of an earlier --out DIR again")
    args = p.parse_args(argv)

    if args.render:
        out = Path(args.render)
        runs = {s: load_run(s, out) for s in SCHEDULERS}
        return report(runs, out, args=args, write_doc=bool(args.doc), log=Log(out / "run.log"))
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="gpusched-conformance-"))
    out.mkdir(parents=True, exist_ok=True)
    print(out, flush=True)
    log = Log(out / "run.log")
    log(f"logs and reports in {out}")
    focus = args.focus or SUBSETS[args.subset]
    write_doc = args.doc if args.doc is not None else (args.subset == "full" and not args.focus)
    try:
        e2e_test = find_e2e_test(args.e2e_test)
        info = e2e_test.parent / "BUILD_INFO"
        build_info = (
            ", ".join(ln for ln in info.read_text().splitlines() if ln.split("=")[0] in ("kubernetes", "go"))
            if info.exists()
            else str(e2e_test)
        )
        (out / "e2e-build").write_text(build_info + "\n")
        (out / "gpusched-source").write_text(source_state() + "\n")
        bin_dir = cached_binaries() or ensure_binaries()
        if args.sequential:
            runs = {
                s: run_one(s, e2e_test=e2e_test, bin_dir=bin_dir, out=out, focus=focus, log=log) for s in SCHEDULERS
            }
        else:
            # The two clusters share nothing; most of a spec's time is waiting (for a namespace to go, a pod to stay
            # pending), so side by side they take about the time of one.
            with concurrent.futures.ThreadPoolExecutor(len(SCHEDULERS)) as pool:
                futures = {
                    s: pool.submit(run_one, s, e2e_test=e2e_test, bin_dir=bin_dir, out=out, focus=focus, log=log)
                    for s in SCHEDULERS
                }
                try:
                    runs = {s: f.result() for s, f in futures.items()}
                except KeyboardInterrupt:
                    log("interrupted: stopping e2e.test, then the clusters")
                    for proc in list(RUNNING):
                        proc.terminate()
                    raise
    except (HarnessError, ClusterError, kube_mod.WaitTimeout) as exc:
        log(f"harness error: {exc}")
        return 2
    return report(runs, out, args=args, write_doc=write_doc, log=log)


def report(runs: dict[str, Run], out: Path, *, args: argparse.Namespace, write_doc: bool, log: Log) -> int:
    """Write the table, the failure details, the JSON and the doc; 1 if gpusched fails what kube-scheduler passes."""
    (out / "table.md").write_text(table(runs) + "\n\n" + summary(runs) + "\n")
    details = failure_details(runs, out)
    (out / "gpusched-failures.md").write_text(details or "None.\n")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {s: {n: dataclasses.asdict(r) | {"output": ""} for n, r in runs[s].results.items()} for s in SCHEDULERS}
                | {"regressions": regressions(runs)},
                indent=1,
            )
        )
    if write_doc:
        command = "make conformance  # .venv/bin/python -m tests.conformance.run"
        build_info = (out / "e2e-build").read_text().strip() if (out / "e2e-build").exists() else "?"
        source = (out / "gpusched-source").read_text().strip() if (out / "gpusched-source").exists() else "?"
        DOC.write_text(render_doc(runs, command=command, build_info=build_info, source=source))
        log(f"wrote {DOC}")
    log(summary(runs))
    for n in regressions(runs):
        r = runs[GPUSCHED].results.get(n)
        log(f"gpusched fails, kube-scheduler passes: {short_name(n)}: {first_line(r.message) if r else 'not run'}")
    log(f"table: {out / 'table.md'}; failures: {out / 'gpusched-failures.md'}")
    return 1 if regressions(runs) else 0


if __name__ == "__main__":
    sys.exit(main())
