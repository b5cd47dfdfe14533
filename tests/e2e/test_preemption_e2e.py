"""A single pod preempting as kube-scheduler's DefaultPreemption does, on a real API server (issue 14): a
PodDisruptionBudget that allows no disruption protects its pod when another node's victim can make room; the
victim gets the DisruptionTarget condition before it goes; the preemptor's nominatedNodeName names the node it
waits for. A victim whose deletion an admission policy refuses frees its preemptor, which says why; two preemptors
of equal priority each get the node their own victim frees. See docs/pods.md.
"""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e.kube import APIError, Scenario, condition, node_of

pytestmark = pytest.mark.e2e

FINALIZER = "gpusched.io/e2e-hold"
PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


def _held(manifest: dict[str, Any], node: str) -> dict[str, Any]:
    """Pinned to ``node``, and kept while terminating (a finalizer) so that its conditions can be read."""
    manifest["metadata"]["finalizers"] = [FINALIZER]
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return manifest


def _unix(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _release(sched: Scenario, name: str) -> None:
    with contextlib.suppress(APIError):
        sched.kube.request(
            "PATCH",
            kube_mod.Kube.pods_path(sched.namespace, name),
            {"metadata": {"finalizers": None}},
            content_type="application/merge-patch+json",
        )


@contextlib.contextmanager
def _priority_classes(sched: Scenario) -> Iterator[tuple[str, str]]:
    """A low (10) and a high (1000) PriorityClass of the scenario, deleted when the block ends."""
    low, high = f"{sched.name}-low", f"{sched.name}-high"
    for name, value in ((low, 10), (high, 1000)):
        sched.kube.request(
            "POST", PRIORITY_CLASSES, {"apiVersion": "scheduling.k8s.io/v1", "metadata": {"name": name}, "value": value}
        )
    try:
        yield low, high
    finally:
        for name in (low, high):
            with contextlib.suppress(APIError):
                sched.kube.request("DELETE", f"{PRIORITY_CLASSES}/{name}")


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


VAP = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
VAP_BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
PROTECTED = "e2e.gpusched.io/protected"


@contextlib.contextmanager
def _denied_deletes(sched: Scenario, name: str) -> Iterator[None]:
    """A ValidatingAdmissionPolicy that refuses the DELETE of the scenario's pods labelled ``PROTECTED``: a victim
    whose deletion the API server refuses, as a policy engine (Kyverno, Gatekeeper) or a webhook may refuse it.
    Deleted when the block ends."""
    sched.kube.request(
        "POST",
        VAP,
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["pods"]}
                    ]
                },
                "validations": [
                    {
                        "expression": (
                            f"!has(oldObject.metadata.labels) || !('{PROTECTED}' in oldObject.metadata.labels)"
                        ),
                        "message": "this pod is protected from deletion",
                    }
                ],
            },
        },
    )
    sched.kube.request(
        "POST",
        VAP_BINDINGS,
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": sched.namespace}}
                },
            },
        },
    )
    try:
        yield
    finally:
        for path in (f"{VAP_BINDINGS}/{name}", f"{VAP}/{name}"):
            with contextlib.suppress(APIError):
                sched.kube.request("DELETE", path)


def test_a_victim_whose_deletion_is_refused_frees_its_preemptor_and_says_why(sched: Scenario) -> None:
    policy = f"{sched.name}-deny"
    with _priority_classes(sched) as (low, high), _denied_deletes(sched, policy):
        sched.add_nodes([kube_mod.gpu_node("vap-0", gpus=0, cpu="2")])
        sched.start_gpusched()
        sched.create_pod(kube_mod.pod("victim", cpu="2", labels={PROTECTED: "yes"}, priority_class=low))
        sched.wait_bound(["victim"])
        # The policy is enforced once the API server has loaded it: a DELETE of a protected pod is refused.
        probe = kube_mod.pod("probe", cpu="0", labels={PROTECTED: "yes"})
        probe["spec"]["nodeName"] = "vap-0"
        sched.create_pod(probe)

        def refused() -> bool:
            try:
                sched.kube.request("DELETE", kube_mod.Kube.pods_path(sched.namespace, probe["metadata"]["name"]))
            except APIError as exc:
                return exc.status in (403, 422)
            # Deleted: the API server had not loaded the policy yet. Its grace period keeps the name: a new probe.
            probe["metadata"]["name"] = f"probe-{time.monotonic_ns()}"
            sched.create_pod(probe)
            return False

        kube_mod.wait_until(refused, timeout=30, what="the admission policy enforced")

        sched.create_pod(kube_mod.pod("urgent", cpu="2", priority_class=high))
        failed = sched.wait_event("urgent", "PreemptionFailed", timeout=60)
        assert f"the deletion of victim pod {sched.namespace}/victim failed" in failed["message"], failed["message"]
        assert "protected from deletion" in failed["message"], failed["message"]
        assert not sched.pod("victim")["metadata"].get("deletionTimestamp")
        assert not node_of(sched.pod("urgent"))
        # Freed: room elsewhere is taken at once, not held back for a victim that is never going away.
        sched.add_nodes([kube_mod.gpu_node("vap-1", gpus=0, cpu="2")])
        (urgent,) = sched.wait_bound(["urgent"], timeout=60)
        assert node_of(urgent) == "vap-1"
        assert node_of(sched.pod("victim")) == "vap-0"


def test_two_preemptors_of_equal_priority_on_two_full_nodes_each_get_their_own_node(sched: Scenario) -> None:
    # Each preemptor's victims free one node; neither may take the room freed for the other (a nominated pod counts
    # against pods of its priority), so exactly two pods are preempted and each preemptor binds where its victim was.
    with _priority_classes(sched) as (low, high):
        sched.add_nodes([kube_mod.gpu_node(f"eq-{i}", gpus=8) for i in range(2)])
        sched.start_gpusched()
        for i in range(2):
            sched.create_pod(kube_mod.pod(f"low-{i}", gpus=8, priority_class=low))
        lows = sched.wait_bound(["low-0", "low-1"])
        where = {p["metadata"]["name"]: node_of(p) for p in lows}
        assert sorted(where.values()) == ["eq-0", "eq-1"]
        for i in range(2):
            sched.create_pod(kube_mod.pod(f"high-{i}", gpus=8, priority_class=high))
        highs = sched.wait_bound(["high-0", "high-1"], timeout=90)
        assert sorted(node_of(p) for p in highs) == ["eq-0", "eq-1"]
        preempted = [e for e in sched.kube.events(sched.namespace) if e.get("reason") == "Preempted"]
        assert sorted(e["involvedObject"]["name"] for e in preempted) == ["low-0", "low-1"], preempted


def test_a_victim_younger_than_its_queues_minimum_run_time_is_spared_until_it_has_run_it(sched: Scenario) -> None:
    # The queue's spec.preemption.withinQueueMinRuntimeSeconds (docs/queues.md, "Minimum run time"): the urgent pod
    # of the same queue waits, saying why, and preempts the low one only once the low one has run that long (its
    # status.startTime, as the API server shows it).
    minimum = 20
    queue = f"{sched.name}-q"
    manifest = kube_mod.queue(queue)
    manifest["spec"]["preemption"] = {"withinQueueMinRuntimeSeconds": minimum}
    sched.create_queue(manifest)
    with _priority_classes(sched) as (low, high):
        sched.add_nodes([kube_mod.gpu_node("minrt-0", gpus=0, cpu="2")])
        sched.start_gpusched()
        sched.create_pod(_held(kube_mod.pod("young", cpu="2", queue=queue, priority_class=low), "minrt-0"))
        sched.wait_bound(["young"])
        sched.create_pod(kube_mod.pod("urgent", cpu="2", queue=queue, priority_class=high))
        try:

            def spared() -> str | None:
                said = condition(sched.pod("urgent"), "PodScheduled") or {}
                message = str(said.get("message") or "")
                return message if "past their queue's minimum run time" in message else None

            message = kube_mod.wait_until(spared, timeout=30, what="urgent says why", describe=sched.describe)
            assert "1 No preemption victims past their queue's minimum run time" in message, message
            assert not sched.pod("young")["metadata"].get("deletionTimestamp"), "preempted before its minimum"

            def terminating() -> dict[str, Any] | None:
                pod = sched.pod("young")
                return pod if pod["metadata"].get("deletionTimestamp") else None

            # Tried again when its queue retries waiting work: within the unschedulable pool's minute after that.
            young = kube_mod.wait_until(terminating, timeout=120, what="young preempted", describe=sched.describe)
            # Preempted once it had run its minimum (the times have whole seconds).
            (preempted,) = [
                e
                for e in sched.kube.events(sched.namespace)
                if e.get("reason") == "Preempted" and e["involvedObject"]["name"] == "young"
            ]
            ran = _unix(preempted["firstTimestamp"]) - _unix(young["status"]["startTime"])
            assert ran >= minimum - 1, (ran, preempted, young["status"])
        finally:
            _release(sched, "young")
