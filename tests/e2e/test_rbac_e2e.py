"""gpusched as shipped: ``gpusched run`` with the token of the ServiceAccount manifests/ creates, and only the rights
manifests/rbac.yaml gives it (issue 40).

The rest of the suite runs the scheduler with the suite's admin kubeconfig, so a right missing from the manifests
showed nowhere but in a real cluster (every Topology status write was refused there). Here the manifests' namespace,
ServiceAccount, roles and bindings are applied as kustomize renders them, the ServiceAccount gets a token from the
TokenRequest API, and the scheduler runs with a kubeconfig holding that token alone. It binds a pod, a gang with its
PodGroup and an indexed Job's gang (whose PodGroup it creates), says why a pod cannot fit, preempts, and writes the
status of the PodGroups, a Queue and the Topology; a request refused for want of a right fails the test, whether the
scheduler's log says so or the API server's count of refused requests does.

The first test asks the API server itself (SubjectAccessReview) whether the ServiceAccount may make each call of the
table the unit test checks manifests/rbac.yaml against (``tests/k8s/api_calls.py``), and may not make a few it must
not.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e.kube import APIError, Kube, Scenario, condition
from tests.k8s import api_calls

pytestmark = pytest.mark.e2e

USER = f"system:serviceaccount:{kube_mod.SYSTEM_NAMESPACE}:{kube_mod.SERVICE_ACCOUNT}"
PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
TOPOLOGY_PATH = Kube.custom_path("topologies", name="default")
PREEMPT_LABEL = "e2e.gpusched.io/preemption"


def _may(kube: Kube, attributes: dict[str, str]) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": USER, "groups": ["system:serviceaccounts", "system:authenticated"], **attributes},
    }
    answer = kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool((answer.get("status") or {}).get("allowed"))


def _attributes(call: api_calls.Call, verb: str) -> dict[str, Any]:
    resource, _, subresource = call.resource.partition("/")
    out = {"group": call.group, "resource": resource, "subresource": subresource, "verb": verb}
    if call.rights == api_calls.LEASE:
        out["namespace"] = kube_mod.SYSTEM_NAMESPACE
        if call.named:
            out["name"] = kube_mod.SHIPPED_LEASE
    return {"resourceAttributes": out}


def test_the_shipped_service_account_may_make_each_call_of_the_table_and_no_other(kube: Kube) -> None:
    kube.apply_shipped_rbac()
    shipped = [c for c in api_calls.CALLS if c.rights in (api_calls.CLUSTER, api_calls.LEASE, api_calls.AUTH_DELEGATOR)]
    refused = [
        f"{c.verbs} {c.resource}.{c.group or 'core'} ({c.module}.{c.method})"
        for c in shipped
        for verb in c.verbs
        if not _may(kube, _attributes(c, verb))
    ]
    assert refused == [], f"the shipped RBAC does not let gpusched make these calls: {refused}"
    # Rights it has no call for: secrets, writing nodes or pods' specs, another Lease. (TokenReviews and
    # SubjectAccessReviews it has: /explain asks them of every caller, through system:auth-delegator.)
    must_not = [
        {"resource": "secrets", "verb": "get", "namespace": "default"},
        {"resource": "nodes", "verb": "patch"},
        {"resource": "pods", "verb": "update", "namespace": "default"},
        {"resource": "pods", "verb": "create", "namespace": "default"},
        {"group": "coordination.k8s.io", "resource": "leases", "verb": "update", "namespace": "kube-system"},
        {
            "group": "coordination.k8s.io",
            "resource": "leases",
            "verb": "update",
            "namespace": kube_mod.SYSTEM_NAMESPACE,
            "name": "someone-else",
        },
        {"group": "scheduling.gpusched.io", "resource": "queues", "verb": "update"},
    ]
    allowed = [attributes for attributes in must_not if _may(kube, {"resourceAttributes": attributes})]
    assert allowed == [], f"the shipped RBAC allows what no call of gpusched needs: {allowed}"


def _refused(kube: Kube) -> int:
    """How many requests the API server's authorizers have not allowed so far (``authorization_attempts_total`` with
    a result other than ``allowed``): the suite's own clients are cluster admins, so in a scenario every refusal is
    the scheduler's. (``apiserver_request_total`` does not count requests refused before they reach a handler.)"""
    total = 0
    for line in str(kube.request("GET", "/metrics")).splitlines():
        if line.startswith("authorization_attempts_total{") and 'result="allowed"' not in line:
            total += int(float(line.rpartition(" ")[2]))
    return total


def _gpus_allocated(kube: Kube, queue: str) -> dict[str, Any] | None:
    status = kube.request("GET", Kube.custom_path("queues", name=queue)).get("status") or {}
    allocated = status.get("allocated") or {}
    return status if float(allocated.get(kube_mod.GPU_RESOURCE, "0")) > 0 else None


def _topology_accepted(kube: Kube) -> dict[str, Any] | None:
    status = kube.request("GET", TOPOLOGY_PATH).get("status") or {}
    accepted = {c.get("type"): c for c in status.get("conditions") or []}.get("Accepted") or {}
    return status if accepted.get("status") == "True" else None


def _group_status(s: Scenario, name: str) -> dict[str, Any] | None:
    status = s.kube.request("GET", Kube.custom_path("podgroups", s.namespace, name)).get("status") or {}
    return status if status.get("phase") in ("Scheduled", "Running") else None


def test_gpusched_run_as_the_shipped_service_account_is_refused_nothing(sched: Scenario) -> None:
    kube = sched.kube
    prefix = sched.name[:40].rstrip("-")
    low, high, queue = f"{prefix}-low", f"{prefix}-high", f"{prefix}-q"
    for name, value in ((low, 10), (high, 1000)):
        kube.request(
            "POST", PRIORITY_CLASSES, {"apiVersion": "scheduling.k8s.io/v1", "metadata": {"name": name}, "value": value}
        )
    with contextlib.suppress(APIError):
        kube.request("DELETE", TOPOLOGY_PATH)
    try:
        kube.request(
            "POST",
            Kube.custom_path("topologies"),
            {
                "apiVersion": f"{kube_mod.GROUP}/{kube_mod.VERSION}",
                "kind": "Topology",
                "metadata": {"name": "default"},
                "spec": {"levels": [{"name": "rack", "nodeLabel": kube_mod.LABEL_RACK}]},
            },
        )
        sched.add_nodes(
            [kube_mod.gpu_node(f"{prefix}-{i}", rack=f"r{i % 2}") for i in range(3)]
            + [kube_mod.gpu_node(f"{prefix}-p", rack="r9", labels={PREEMPT_LABEL: prefix})]
        )
        sched.create_queue(kube_mod.queue(queue, guaranteed={kube_mod.GPU_RESOURCE: "16"}))
        replica = sched.gpusched(as_service_account=True)
        assert replica.as_service_account
        before = _refused(kube)
        replica.start().wait_ready().wait_leader()

        def describe() -> str:
            refusals = replica.refusals()
            return "refused:\n" + "\n".join(refusals) if refusals else sched.describe()

        # A pod, a gang with its PodGroup, an indexed Job (its PodGroup made by the scheduler), all in the queue.
        sched.create_pod(kube_mod.pod("solo", gpus=1, queue=queue))
        sched.create_podgroup(kube_mod.podgroup("gang", min_member=2, queue=queue))
        for m in range(2):
            sched.create_pod(kube_mod.pod(f"gang-{m}", gpus=8, group="gang"))
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "indexed", "labels": {kube_mod.LABEL_QUEUE: queue}},
            "spec": {
                "completions": 2,
                "parallelism": 2,
                "completionMode": "Indexed",
                "template": {
                    "metadata": {"labels": {kube_mod.LABEL_QUEUE: queue}},
                    "spec": {
                        "schedulerName": kube_mod.SCHEDULER_NAME,
                        "restartPolicy": "Never",
                        "containers": [{"name": "worker", "image": "registry.invalid/worker:latest"}],
                    },
                },
            },
        }
        kube.request("POST", f"/apis/batch/v1/namespaces/{sched.namespace}/jobs", job)
        # One that cannot fit anywhere: told why (its status and an Event).
        sched.create_pod(kube_mod.pod("huge", gpus=16))
        sched.wait_bound(["solo", "gang-0", "gang-1"])
        sched.wait_event("solo", "Scheduled")

        job_group = kube_mod.wait_until(
            lambda: next((g for g in kube_mod.podgroups(sched) if g["metadata"]["name"] == "job-indexed"), None),
            timeout=60,
            what="the PodGroup of the indexed Job",
            describe=describe,
        )
        assert [o["kind"] for o in job_group["metadata"].get("ownerReferences") or []] == ["Job"]
        kube_mod.wait_until(
            lambda: len([p for p in sched.pods("batch.kubernetes.io/job-name=indexed") if kube_mod.node_of(p)]) >= 2,
            timeout=60,
            what="the indexed Job's two pods bound",
            describe=sched.describe,
        )

        unschedulable = kube_mod.wait_until(
            lambda: condition(sched.pod("huge"), "PodScheduled"),
            timeout=30,
            what="huge's PodScheduled condition",
            describe=sched.describe,
        )
        assert unschedulable["status"] == "False", unschedulable
        sched.wait_event("huge", "FailedScheduling")

        # Preemption on a node of its own: the victim marked and deleted, the preemptor nominated, then bound.
        pinned = {PREEMPT_LABEL: prefix}
        sched.create_pod(kube_mod.pod("victim", gpus=8, priority_class=low, node_selector=pinned))
        sched.wait_bound(["victim"])
        sched.create_pod(kube_mod.pod("urgent", gpus=8, priority_class=high, node_selector=pinned))
        sched.wait_bound(["urgent"], timeout=60)  # the node's 8 GPUs: only once the victim has gone
        kube_mod.check_no_overcommit(sched.pods(), sched.my_nodes())

        # The status writes: the PodGroup, the Queue, the Topology.
        kube_mod.wait_until(
            lambda: _group_status(sched, "gang"), timeout=30, what="PodGroup gang's status phase", describe=describe
        )
        kube_mod.wait_until(
            lambda: _gpus_allocated(kube, queue), timeout=30, what=f"Queue {queue}'s status", describe=describe
        )
        topology = kube_mod.wait_until(
            lambda: _topology_accepted(kube), timeout=30, what="Topology Accepted=True", describe=describe
        )
        assert [level["nodeLabel"] for level in topology["levels"]] == [kube_mod.LABEL_RACK]

        # A stop by SIGTERM releases the Lease (an update) and exits 0.
        replica.stop()
        assert replica.popen is not None and replica.popen.returncode == 0, replica.log_tail()
        assert replica.refusals() == [], "\n".join(replica.refusals())
        refused = _refused(kube) - before
        assert refused == 0, f"the API server refused {refused} requests of gpusched (its log: {replica.log_path})"
    finally:
        with contextlib.suppress(APIError):
            kube.request("DELETE", TOPOLOGY_PATH)
        for name in (low, high):
            with contextlib.suppress(APIError):
                kube.request("DELETE", f"{PRIORITY_CLASSES}/{name}")
