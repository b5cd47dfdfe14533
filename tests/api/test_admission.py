"""What gpusched says of a pod held by scheduling gates, on pods shaped as Kueue v0.19 makes them."""

from __future__ import annotations

from typing import Any

from scheduler.api.objects import admission


def gated_pod(gates: list[str], labels: dict[str, str] | None = None, **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "team-a", "labels": labels or {}, "annotations": annotations},
        "spec": {"schedulerName": "gpusched", "schedulingGates": [{"name": g} for g in gates]},
    }


def test_a_pod_of_kueues_pod_integration_waits_for_admission_in_its_local_queue() -> None:
    held = admission.gated(gated_pod(["kueue.x-k8s.io/admission"], {"kueue.x-k8s.io/queue-name": "user-queue"}))
    assert held is not None and held.by_kueue and held.key == "team-a/p"
    assert held.text() == (
        "waits for admission: Kueue holds it (LocalQueue team-a/user-queue) until its Workload is admitted;"
        " scheduling gates: kueue.x-k8s.io/admission. gpusched does not try it until they are gone."
    )


def test_a_pod_admitted_with_topology_waits_for_its_domain_and_names_the_cluster_queue() -> None:
    labels = {"kueue.x-k8s.io/cluster-queue-name": "gpus", "kueue.x-k8s.io/local-queue-name": "user-queue"}
    held = admission.gated(gated_pod(["kueue.x-k8s.io/topology"], labels, **{"kueue.x-k8s.io/workload": "job-a-1"}))
    assert held is not None
    text = held.text()
    assert text.startswith("admitted by Kueue (ClusterQueue gpus, LocalQueue team-a/user-queue), Workload")
    assert "team-a/job-a-1" in text and "assign its topology domain" in text


def test_another_controllers_gate_is_waiting_for_admission_too() -> None:
    held = admission.gated(gated_pod(["example.com/quota"]))
    assert held is not None and not held.by_kueue
    assert held.text().startswith("waits for admission: held by its scheduling gates")
    assert "example.com/quota" in held.text()


def test_a_pod_without_gates_or_on_a_node_is_not_gated() -> None:
    assert admission.gated(gated_pod([])) is None
    bound = gated_pod(["example.com/quota"])
    bound["spec"]["nodeName"] = "n1"
    assert admission.gated(bound) is None


def test_kueue_admitted_pods_carry_their_podset() -> None:
    assert admission.kueue_admitted({"kueue.x-k8s.io/podset": "main"})
    assert not admission.kueue_admitted({"kueue.x-k8s.io/queue-name": "q"})
