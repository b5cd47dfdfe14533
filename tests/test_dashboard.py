"""manifests/grafana-dashboard.json: every query names only metrics gpusched exports (a renamed metric would leave
an empty panel that nobody notices)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from scheduler.k8s.serve.metrics import Metrics

DASHBOARD = Path(__file__).resolve().parents[1] / "manifests" / "grafana-dashboard.json"
#: Metric names in PromQL: ours, and the process and Python collectors'.
NAME = re.compile(r"\b((?:gpusched|process|python)_[a-zA-Z0-9_]+)\b")
SUFFIXES = ("", "_total", "_bucket", "_sum", "_count", "_created")


def exported() -> set[str]:
    names: set[str] = set()
    for family in Metrics().registry.collect():
        names.update(family.name + suffix for suffix in SUFFIXES)
        names.update(sample.name for sample in family.samples)
    return names


def queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    found = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    found += [v["query"] for v in dashboard["templating"]["list"] if v.get("type") == "query"]
    return found


def test_every_query_names_an_exported_metric() -> None:
    names = exported()
    used = {name for expr in queries() for name in NAME.findall(expr)}
    assert used, "no metric found in the dashboard's queries"
    assert sorted(used - names) == []


def test_the_dashboard_shows_allocation_fragmentation_shares_and_latency() -> None:
    text = " ".join(queries())
    for metric in (
        "gpusched_cluster_gpus",
        "gpusched_cluster_nodes",
        "gpusched_largest_free_gpu_block",
        "gpusched_queue_dominant_share",
        "gpusched_queue_fair_share",
        "gpusched_scheduling_cycle_duration_seconds_bucket",
        "gpusched_e2e_scheduling_duration_seconds_bucket",
    ):
        assert metric in text


#: An instant aggregation of one gauge: ``sum by (queue) (NAME{label="value",...})``.
AGGREGATION = re.compile(r"^(sum|max)(?: by \(([a-z_, ]+)\))? ?\((gpusched_[a-z_]+)\{([^}]*)\}\)$")


def replica_samples(*, leading: bool) -> list[tuple[str, dict[str, str], float]]:
    """The state gauges of one replica of a 12-GPU cluster with one queue, as its scrape carries them."""
    metrics = Metrics(leading=lambda: leading)
    for state, value in (("total", 12), ("allocated", 2), ("partial", 0), ("free", 10)):
        metrics.cluster_gpus.labels(state).set(value)
    for state, value in (("total", 2), ("idle", 1), ("stranded", 0)):
        metrics.cluster_nodes.labels(state).set(value)
    metrics.largest_free_block.set(8)
    metrics.queue_allocated.labels("team-a", "nvidia.com/gpu").set(2)
    metrics.queue_guaranteed.labels("team-a", "nvidia.com/gpu").set(4)
    metrics.pending_pods.labels("team-a").set(3)
    metrics.pending_jobs.labels("active").set(1)
    return [
        (sample.name, {**sample.labels, "job": "gpusched"}, sample.value)
        for family in metrics.registry.collect()
        for sample in family.samples
    ]


def evaluate(expr: str, samples: list[tuple[str, dict[str, str], float]]) -> dict[tuple[str, ...], float]:
    """``expr`` (an :data:`AGGREGATION`) over ``samples``: the value per group."""
    found = AGGREGATION.match(expr)
    assert found, expr
    how, by, name, selector = found.groups()
    wanted = dict(re.findall(r'([a-z_]+)="([^"]*)"', selector))
    keys = [k.strip() for k in by.split(",")] if by else []
    groups: dict[tuple[str, ...], list[float]] = {}
    for sample_name, labels, value in samples:
        if sample_name == name and all(labels.get(k) == v for k, v in wanted.items()):
            groups.setdefault(tuple(labels.get(k, "") for k in keys), []).append(value)
    return {group: (sum(values) if how == "sum" else max(values)) for group, values in groups.items()}


def test_two_replicas_show_the_cluster_once() -> None:
    """Every panel of a state gauge shows with a leader and a standby what the leader alone says (the standby
    exports none of them): "GPUs total" is 12 on a 12-GPU cluster, not 24."""
    leader = replica_samples(leading=True)
    both = leader + replica_samples(leading=False)
    state = ("gpusched_cluster", "gpusched_queue", "gpusched_pending", "gpusched_largest", "gpusched_node")
    checked = 0
    for query in queries():
        for part in query.replace('job=~"$job"', 'job="gpusched"').split(" / "):
            if not part.split("(")[-1].startswith(state):
                continue
            assert evaluate(part, both) == evaluate(part, leader), query
            checked += 1
    assert checked >= 15
    total = 'sum(gpusched_cluster_gpus{job=~"$job",state="total"})'  # the "GPUs total" panel
    assert total in queries()
    assert evaluate(total.replace('job=~"$job"', 'job="gpusched"'), both) == {(): 12.0}
