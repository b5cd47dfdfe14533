"""A single pod preempting as kube-scheduler's DefaultPreemption does, on a real API server (issue 14): a
PodDisruptionBudget that allows no disruption protects its pod when another node's victim can make room; the
victim gets the DisruptionTarget condition before it goes; the preemptor's nominatedNodeName names the node it
waits for. See docs/pods.md.
"""

from __future__ import annotations

import contextlib
from typing import Any

import kube as kube_mod
import pytest
from kube import APIError, Scenario, condition, node_of

pytestmark = pytest.mark.e2e

FINALIZER = "gpusched.io/e2e-hold"
PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


def _held(manifest: dict[str, Any], node: str) -> dict[str, Any]:
    """Pinned to ``node``, and kept while terminating (a finalizer) so that its conditions can be read."""
    manifest["metadata"]["finalizers"] = [FINALIZER]
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return manifest


def _release(sched: Scenario, name: str) -> None:
    with contextlib.suppress(APIError):
        sched.kube.request(
            "PATCH",
            kube_mod.Kube.pods_path(sched.namespace, name),
            {"metadata": {"finalizers": None}},
            content_type="application/merge-patch+json",
        )


def test_a_budget_protects_its_pod_when_another_nodes_victim_makes_room(sched: Scenario) -> None:
    low, high = f"{sched.name}-low", f"{sched.name}-high"
    for name, value in ((low, 10), (high, 1000)):
        sched.kube.request(
            "POST", PRIORITY_CLASSES, {"apiVersion": "scheduling.k8s.io/v1", "metadata": {"name": name}, "value": value}
        )
    try:
        sched.add_nodes([kube_mod.gpu_node(f"pdb-{i}", gpus=0, cpu="2") for i in range(2)])
        sched.kube.request(
            "POST",
            f"/apis/policy/v1/namespaces/{sched.namespace}/poddisruptionbudgets",
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "db"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
            },
        )
        sched.start_gpusched()
        # web starts first, on pdb-1; db last, on pdb-0 (first by name): without the budget, db would be the victim.
        sched.create_pod(_held(kube_mod.pod("web", cpu="2", labels={"app": "web"}, priority_class=low), "pdb-1"))
        sched.wait_bound(["web"])
        sched.create_pod(_held(kube_mod.pod("db", cpu="2", labels={"app": "db"}, priority_class=low), "pdb-0"))
        sched.wait_bound(["db"])

        sched.create_pod(kube_mod.pod("urgent", cpu="2", priority_class=high))

        def web_terminating() -> dict[str, Any] | None:
            pod = sched.pod("web")
            return pod if pod["metadata"].get("deletionTimestamp") else None

        web = kube_mod.wait_until(web_terminating, timeout=60, what="web preempted", describe=sched.describe)
        disruption = condition(web, "DisruptionTarget")
        assert disruption is not None, web["status"]
        assert disruption["status"] == "True" and disruption["reason"] == "PreemptionByScheduler", disruption
        assert disruption["message"] == "gpusched: preempting to accommodate a higher priority pod", disruption
        assert not sched.pod("db")["metadata"].get("deletionTimestamp"), "the budget's pod was preempted"

        # While web terminates, the preemptor waits for its node, and says which.
        nominated = kube_mod.wait_until(
            lambda: sched.pod("urgent").get("status", {}).get("nominatedNodeName"),
            timeout=30,
            what="urgent's nominatedNodeName",
            describe=sched.describe,
        )
        assert nominated == "pdb-1"
        assert not node_of(sched.pod("urgent"))
        event = sched.wait_event("urgent", "Preempting")
        assert "on node pdb-1" in event["message"], event["message"]
        preempted = sched.wait_event("web", "Preempted")["message"]
        assert "on node pdb-1" in preempted, preempted

        _release(sched, "web")
        (urgent,) = sched.wait_bound(["urgent"], timeout=60)
        assert node_of(urgent) == "pdb-1"
        # Bound: the nomination no longer applies, and the API server clears it with the binding.
        kube_mod.wait_until(
            lambda: not sched.pod("urgent").get("status", {}).get("nominatedNodeName"),
            timeout=30,
            what="urgent's nominatedNodeName cleared",
            describe=sched.describe,
        )
        assert not sched.pod("db")["metadata"].get("deletionTimestamp")
    finally:
        for name in ("web", "db"):
            _release(sched, name)
        for name in (low, high):
            with contextlib.suppress(APIError):
                sched.kube.request("DELETE", f"{PRIORITY_CLASSES}/{name}")
