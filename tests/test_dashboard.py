"""manifests/grafana-dashboard.json: every query names only metrics gpusched exports (a renamed metric would leave
an empty panel that nobody notices)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from scheduler.k8s.metrics import Metrics

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
