"""The shipped Grafana dashboard and alert rules against a real Prometheus (Debian's, fetched by
tests/e2e/build-prometheus.sh) scraping two replicas of ``gpusched run`` while pods, a gang and a preemption go
through.

Every query of manifests/grafana-dashboard.json is evaluated through Prometheus' HTTP API, as Grafana would with
``$job`` set, and must return the series and values this scenario makes: 16 GPUs all allocated, queue A holding
its guarantee of 8 (a gang of 2 and two pods that took their GPUs back from queue B), queue B holding 8 of which 4
borrowed after losing 4 pods to reclaim, one pod of A waiting, the latencies of the bindings. A panel whose query
returns nothing here would be empty for a user too: the test names each query that returned something else. The
rules of manifests/prometheus-rules.yaml are loaded too: each evaluates without error and none fires.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e import kube as kube_mod
from tests.e2e import skips
from tests.e2e.kube import Gpusched, Scenario
from tests.e2e.localcluster import free_port

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "manifests" / "grafana-dashboard.json"
RULES = REPO / "manifests" / "prometheus-rules.yaml"
#: The scrape job, as Grafana's ``$job`` variable selects it.
JOB = "gpusched"
#: Short leases so that one replica leads within seconds.
FAST_LEASE = {"leaderElection": {"leaseDurationSeconds": 4, "renewDeadlineSeconds": 3, "retryPeriodSeconds": 1}}
#: CPU-only pods created in batches until the leader has timed a plugin call (it times one cycle in ten, drawn at
#: random), so that the plugin-latency panel has something to show; the most batches before the test gives up.
BATCH, BATCHES = 10, 20

#: A query's answer: each series' labels (``name=value`` joined by commas, "" for none) -> its value.
Values = dict[str, float]


def dashboard_queries() -> list[tuple[str, str, str]]:
    """(panel title, legend, PromQL with ``$job`` set) of every panel target of the dashboard."""
    board = json.loads(DASHBOARD.read_text())
    found = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            found.append((panel["title"], target.get("legendFormat", ""), target["expr"].replace("$job", JOB)))
    return found


class Prometheus:
    """A Prometheus server on 127.0.0.1 scraping ``targets`` every second, with the shipped rules loaded."""

    def __init__(self, binary: Path, workdir: Path, targets: list[str]) -> None:
        self.port = free_port()
        self.workdir = workdir
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": targets}]}],
        }
        self.config = workdir / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(config))
        self.log_path = workdir / "prometheus.log"
        self.argv = [
            str(binary),
            f"--config.file={self.config}",
            f"--storage.tsdb.path={workdir / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Prometheus:
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        kube_mod.wait_until(self.ready, timeout=60, what="Prometheus /-/ready", describe=self.log_tail)
        return self

    def ready(self) -> bool:
        if self.popen is not None and self.popen.poll() is not None:
            raise RuntimeError(f"prometheus exited with code {self.popen.returncode}:\n{self.log_tail()}")
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as resp:
            return bool(resp.status == 200)

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)

    def log_tail(self) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-20:])

    def api(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as resp:
            answer = json.loads(resp.read())
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, expr: str) -> Values:
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", (expr, data)
        return {
            ",".join(f"{k}={v}" for k, v in sorted(s["metric"].items()) if k != "__name__"): float(s["value"][1])
            for s in data["result"]
        }


@pytest.fixture
def prometheus_binary() -> Path:
    return skips.prometheus() / "prometheus"


def _replicas(sched: Scenario) -> Iterator[Gpusched]:
    for identity in ("replica-a", "replica-b"):
        yield sched.gpusched(identity, config=FAST_LEASE).start()


def _positive(v: Values) -> bool:
    return bool(v) and all(x > 0 and math.isfinite(x) for x in v.values())


def _by(label: str, v: Values) -> dict[str, float]:
    """``{"state=free": 3}`` as ``{"free": 3}``: the values of a query aggregated by one label."""
    return {key.removeprefix(f"{label}="): x for key, x in v.items()}


def _only(v: Values, key: str) -> bool:
    """``key``'s value is above 0 and every other series' is 0."""
    return v.get(key, 0) > 0 and len(v) > 1 and not any(x for k, x in v.items() if k != key)


def expectations(a: str, b: str, gpus: int) -> dict[tuple[str, str], tuple[str, Callable[[Values], bool]]]:
    """What each dashboard query (panel title, legend) returns at the end of the scenario: what a user should read
    there, and the check. Queue ``a`` holds its guarantee (8 GPUs) and has one pod waiting; queue ``b`` holds 8,
    4 above its guarantee, after losing 4 pods to reclaim; ``gpus`` is the cluster's, all allocated."""
    job_states = {"active", "backoff", "unschedulable", "in-flight"}
    return {
        ("GPUs allocated", ""): ("1: every GPU allocated", lambda v: v == {"": 1.0}),
        ("GPUs total", ""): (f"{gpus}", lambda v: v == {"": float(gpus)}),
        ("Pending pods", ""): ("1: queue A's pod too big for any node", lambda v: v == {"": 1.0}),
        ("Pending gangs", ""): ("0: the gang is placed", lambda v: v == {"": 0.0}),
        ("Leader", ""): ("1", lambda v: v == {"": 1.0}),
        ("Ready replicas", ""): ("2", lambda v: v == {"": 2.0}),
        ("GPUs by state", "{{state}}"): (
            f"total and allocated {gpus}, partial and free 0",
            lambda v: _by("state", v) == {"total": gpus, "allocated": gpus, "partial": 0, "free": 0},
        ),
        ("Pending jobs by state (active, backoff, unschedulable)", "{{state}}"): (
            "the four states, one job among them",
            lambda v: set(_by("state", v)) == job_states and sum(v.values()) == 1,
        ),
        ("Free whole GPUs and the largest free block", "free whole GPUs"): ("0", lambda v: v == {"": 0.0}),
        ("Free whole GPUs and the largest free block", "partly used GPUs"): ("0", lambda v: v == {"": 0.0}),
        ("Free whole GPUs and the largest free block", "largest free block on one node"): (
            "0",
            lambda v: v == {"": 0.0},
        ),
        ("GPU nodes: idle and stranded", "idle (every GPU free)"): ("0", lambda v: v == {"": 0.0}),
        ("GPU nodes: idle and stranded", "stranded (free GPUs, no CPU or memory)"): ("0", lambda v: v == {"": 0.0}),
        ("GPU nodes: idle and stranded", "GPU nodes"): (f"{gpus // 8}", lambda v: v == {"": float(gpus // 8)}),
        ("GPU nodes: idle and stranded", "nodes with a refused gpu-topology"): ("0", lambda v: v == {"": 0.0}),
        ("GPUs allocated per queue", "{{queue}}"): ("A 8, B 8", lambda v: _by("queue", v) == {a: 8, b: 8}),
        ("GPU guarantee and limit per queue", "{{queue}} guarantee"): (
            "A 8, B 4",
            lambda v: _by("queue", v) == {a: 8, b: 4},
        ),
        ("GPU guarantee and limit per queue", "{{queue}} limit"): ("A 12", lambda v: _by("queue", v) == {a: 12}),
        ("GPU guarantee and limit per queue", "{{queue}} borrowed"): ("B 4", lambda v: _by("queue", v) == {b: 4}),
        ("Dominant share and fair share per queue", "{{queue}} share"): (
            "A and B above 0",
            lambda v: all(_by("queue", v).get(q, 0) > 0 for q in (a, b)),
        ),
        ("Dominant share and fair share per queue", "{{queue}} fair share"): (
            "A and B above 0",
            lambda v: all(_by("queue", v).get(q, 0) > 0 for q in (a, b)),
        ),
        ("Pending pods per queue and preemptions", "{{queue}} pending"): (
            "A 1, B 0, default 0",
            lambda v: _by("queue", v) == {a: 1, b: 0, "default": 0},
        ),
        ("Pending pods per queue and preemptions", "{{queue}} preempted/min ({{reason}})"): (
            "B's pods by reclaim above 0, every other queue and reason 0",
            lambda v: _only(v, f"queue={b},reason=reclaim"),
        ),
        ("Longest wait of a pending pod per queue", "{{queue}}"): (
            "A's waiting pod's seconds, and no other queue",
            lambda v: list(_by("queue", v)) == [a] and _positive(v),
        ),
        ("Pod end-to-end and bind latency (p50, p99)", "e2e p50"): ("seconds", _positive),
        ("Pod end-to-end and bind latency (p50, p99)", "e2e p99"): ("seconds", _positive),
        ("Pod end-to-end and bind latency (p50, p99)", "bind p99"): ("seconds", _positive),
        ("Pod end-to-end and bind latency (p50, p99)", "gang wait p90"): ("seconds", _positive),
        ("Scheduling cycle and plugin latency (p99)", "cycle p99"): ("seconds", _positive),
        ("Scheduling cycle and plugin latency (p99)", "{{plugin}} {{extension_point}} p99"): (
            "a filter's and a score's seconds",
            lambda v: (
                any("extension_point=filter" in k and x > 0 for k, x in v.items())
                and any("extension_point=score" in k and x > 0 for k, x in v.items())
            ),
        ),
        ("Attempts and bindings per second", "attempts {{result}}"): (
            "scheduled and unschedulable above 0",
            lambda v: set(_by("result", v)) == {"scheduled", "unschedulable"} and _positive(v),
        ),
        ("Attempts and bindings per second", "binds {{result}}"): (
            "bound above 0, no binding refused, failed or uncertain",
            lambda v: (
                _by("result", v).get("bound", 0) > 0
                and {k: x for k, x in _by("result", v).items() if k != "bound"}
                == {"refused": 0, "failed": 0, "uncertain": 0}
            ),
        ),
        ("Attempts and bindings per second", "invalid {{kind}}"): (
            "0 for each kind",
            lambda v: len(v) >= 6 and not any(v.values()),
        ),
        ("Process", "{{instance}} CPU cores"): ("one series per replica", lambda v: len(v) == 2),
        ("Process", "{{instance}} resident GiB"): ("one per replica, above 0", lambda v: len(v) == 2 and _positive(v)),
    }


def test_every_dashboard_query_shows_the_scenario_and_no_alert_fires(
    sched: Scenario, prometheus_binary: Path, tmp_path: Path
) -> None:
    queue_a, queue_b = f"{sched.name}-a", f"{sched.name}-b"
    sched.add_nodes([kube_mod.gpu_node("prom-0"), kube_mod.gpu_node("prom-1")])
    gpus = sum(int(n["status"].get("allocatable", {}).get(kube_mod.GPU_RESOURCE, 0)) for n in sched.kube.nodes())
    assert gpus == 16, f"this scenario needs the cluster's GPUs to be its own two nodes': {gpus} GPUs"
    sched.create_queue(kube_mod.queue(queue_a, guaranteed={"nvidia.com/gpu": "8"}, limit={"nvidia.com/gpu": "12"}))
    sched.create_queue(kube_mod.queue(queue_b, guaranteed={"nvidia.com/gpu": "4"}))
    replicas = list(_replicas(sched))
    for replica in replicas:
        replica.wait_ready()
    leader = kube_mod.wait_until(
        lambda: next((r for r in replicas if r.is_leader()), None), timeout=60, what="one replica leading"
    )
    targets = [f"127.0.0.1:{r.metrics_port}" for r in replicas]
    prometheus = Prometheus(prometheus_binary, tmp_path, targets)
    prometheus.start()
    local = sched.kube.local
    if local is not None and prometheus.popen is not None:
        local.track_process(prometheus.popen.pid)  # killed with the cluster if this process dies first
    try:
        # Its first scrape comes seconds after it is ready: counters it first sees after the pods went through
        # would show no increase.
        kube_mod.wait_until(
            lambda: prometheus.query(f'up{{job="{JOB}"}}') == {f"instance={t},job={JOB}": 1.0 for t in targets},
            timeout=60,
            what="Prometheus scraping both replicas",
        )
        _run_the_scenario(sched, leader, queue_a, queue_b)
        expected = expectations(queue_a, queue_b, gpus)
        queries = dashboard_queries()
        assert sorted(expected) == sorted((title, legend) for title, legend, _ in queries), (
            "a dashboard query without an expectation here (or one gone from the dashboard)"
        )

        def wrong() -> list[str]:
            lines = []
            for title, legend, expr in queries:
                what, check = expected[(title, legend)]
                got = prometheus.query(expr)
                if not check(got):
                    lines.append(f"{title} / {legend or '-'}: {expr}\n    expected {what}, got {got}")
            return lines

        last: list[list[str]] = [[]]

        def settled() -> bool:
            last[0] = wrong()
            return not last[0]

        # Prometheus scrapes every second: the last state shows within a few scrapes.
        kube_mod.wait_until(
            settled, timeout=60, what="every dashboard query to show the scenario", describe=lambda: "\n".join(last[0])
        )
        jobs = prometheus.api("label/job/values", **{"match[]": "gpusched_is_leader"})
        assert jobs == [JOB], "the dashboard's $job variable (label_values(gpusched_is_leader, job))"

        groups = prometheus.api("rules")["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        assert len(rules) == sum(len(g["rules"]) for g in yaml.safe_load(RULES.read_text())["groups"])
        assert [(r["name"], r.get("lastError")) for r in rules if r["health"] == "err"] == []
        # The rules run on their own clock (every second here, later under load): their next evaluation after the
        # scrapes above records the end state, each rule evaluated without error.
        kube_mod.wait_until(
            lambda: (
                prometheus.query("gpusched:gpus_allocated:ratio") == {f"job={JOB}": 1.0}
                and all(r["health"] == "ok" for g in prometheus.api("rules")["groups"] for r in g["rules"])
            ),
            timeout=30,
            what="the recording rule gpusched:gpus_allocated:ratio at 1 and every rule evaluated without error",
            describe=lambda: str(prometheus.query("gpusched:gpus_allocated:ratio")),
        )
        firing = [a["labels"] for a in prometheus.api("alerts")["alerts"] if a["state"] == "firing"]
        assert firing == []
    finally:
        prometheus.stop()
        if local is not None and prometheus.popen is not None:
            local.untrack_process(prometheus.popen.pid)


def _timed_points(metrics: str) -> set[str]:
    """The extension points of which the exposition counts at least one timed call. The series exist from the
    start, at 0 (each plugin's are made when it is wrapped), so their presence says nothing: one cycle in ten is
    timed, and a CI run's scenario had its filters timed and none of its scores (the dashboard's p99 query then
    found no rate for any score)."""
    points = set()
    for line in metrics.splitlines():
        if line.startswith("gpusched_plugin_duration_seconds_count{"):
            labels, _, value = line.rpartition(" ")
            found = re.search(r'extension_point="([a-z_]+)"', labels)
            if found and float(value) > 0:
                points.add(found[1])
    return points


def _run_the_scenario(sched: Scenario, leader: Gpusched, queue_a: str, queue_b: str) -> None:
    """CPU-only pods until the leader has timed a plugin call; queue B fills 12 GPUs (8 above its guarantee of 4); a
    gang of A takes the other 4; two more pods of A take 4 back from B by reclaim; one pod of A too big for any
    node waits."""
    for batch in range(BATCHES):
        names = [f"cpu-{batch}-{i}" for i in range(BATCH)]
        for name in names:
            sched.create_pod(kube_mod.pod(name, cpu="100m", memory="64Mi"))
        sched.wait_bound(names, timeout=90)
        if {"filter", "score"} <= _timed_points(leader.metrics()):
            break
    else:
        pytest.fail(f"the leader timed no filter and score call in {BATCH * BATCHES} pods")

    borrowers = [f"b-{i:02d}" for i in range(12)]
    for name in borrowers:
        sched.create_pod(kube_mod.pod(name, gpus=1, queue=queue_b))
    sched.wait_bound(borrowers, timeout=90)

    sched.create_podgroup(kube_mod.podgroup("train", min_member=2, queue=queue_a))
    gang = [f"train-{i}" for i in range(2)]
    for name in gang:
        sched.create_pod(kube_mod.pod(name, gpus=2, group="train", queue=queue_a))
    sched.wait_bound(gang, timeout=90)

    reclaimers = [f"a-{i}" for i in range(2)]
    for name in reclaimers:
        sched.create_pod(kube_mod.pod(name, gpus=2, queue=queue_a))
    sched.wait_bound(reclaimers, timeout=120)
    kube_mod.wait_until(
        lambda: sum(1 for p in sched.pods(f"{kube_mod.LABEL_QUEUE}={queue_b}")) == 8,
        timeout=60,
        what="queue B down to 8 pods after reclaim",
    )

    sched.create_pod(kube_mod.pod("a-huge", gpus=9, queue=queue_a))
    sched.wait_event("a-huge", "FailedScheduling")
    kube_mod.check_no_overcommit(sched.pods(), sched.my_nodes())
