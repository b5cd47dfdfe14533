"""``gpusched snapshot``: what the export keeps of the API server's objects, and names hashed on request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scheduler.k8s import snapshot as k8s_snapshot
from scheduler.sim import snapshot as sim_snapshot

NODE: dict[str, Any] = {
    "metadata": {
        "name": "gpu-node-7",
        "labels": {"kubernetes.io/hostname": "gpu-node-7", "zone": "a"},
        "managedFields": [{"manager": "kubelet"}],
    },
    "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]},
    "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"}, "conditions": [{"type": "Ready"}]},
}


def _pod(name: str, *, node: str = "", phase: str = "Running") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "gpusched",
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": "secret-project",
            "uid": "u-" + name,
            "labels": {"gpusched.io/pod-group": "trainer", "gpusched.io/queue": "research"},
            "ownerReferences": [{"name": "trainer-job"}],
        },
        "spec": spec,
        "status": {"phase": phase, "containerStatuses": [{"name": "c"}]},
    }


PODS = [_pod("trainer-0", node="gpu-node-7"), _pod("trainer-1", phase="Pending"), _pod("done", phase="Succeeded")]


def test_the_export_keeps_what_scheduling_reads_and_drops_finished_pods() -> None:
    doc = k8s_snapshot.document(nodes=[NODE], pods=PODS, names=k8s_snapshot.Names(hashed=False), taken="now")
    assert doc["format"] == sim_snapshot.FORMAT
    assert [p["metadata"]["name"] for p in doc["pods"]] == ["trainer-0", "trainer-1"]
    node = doc["nodes"][0]
    assert "managedFields" not in node["metadata"] and "conditions" not in node["status"]
    assert node["spec"]["taints"] == NODE["spec"]["taints"]
    assert "ownerReferences" not in doc["pods"][0]["metadata"]
    assert doc["pods"][0]["status"] == {"phase": "Running"}


def test_hashed_names_are_hashed_everywhere_they_are_named(tmp_path: Path) -> None:
    doc = k8s_snapshot.document(nodes=[NODE], pods=PODS, names=k8s_snapshot.Names(hashed=True), taken="now")
    text = json.dumps(doc)
    for secret in ("gpu-node-7", "secret-project", "trainer"):
        assert secret not in text
    node_name = doc["nodes"][0]["metadata"]["name"]
    assert node_name.startswith("node-")
    assert doc["nodes"][0]["metadata"]["labels"] == {"kubernetes.io/hostname": node_name, "zone": "a"}
    assert doc["pods"][0]["spec"]["nodeName"] == node_name
    groups = {p["metadata"]["labels"]["gpusched.io/pod-group"] for p in doc["pods"]}
    assert len(groups) == 1 and groups.pop().startswith("group-")
    # The queue is a setting being compared, kept as it is; the simulator reads the hashed snapshot.
    assert doc["pods"][1]["metadata"]["labels"]["gpusched.io/queue"] == "research"
    (tmp_path / sim_snapshot.FILE_NAME).write_text(text)
    taken = sim_snapshot.load(tmp_path)
    assert [n.name for n in taken.nodes] == [node_name]
    assert taken.bound[0].node_name == node_name and len(taken.pending) == 1


def test_two_exports_do_not_share_hashes() -> None:
    first, second = k8s_snapshot.Names(hashed=True), k8s_snapshot.Names(hashed=True)
    assert first("node", "a") == first("node", "a") != second("node", "a")


def test_a_pods_references_to_nodes_and_namespaces_are_hashed_as_the_names_are() -> None:
    pending = _pod("trainer-1", phase="Pending")
    pending["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "gpu-node-7", "zone": "a"}
    term = {"labelSelector": {"matchLabels": {"app": "x"}}, "namespaces": ["secret-project"], "topologyKey": "zone"}
    node_term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-node-7"]}]}
    pending["spec"]["affinity"] = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": term}]
        },
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [node_term]}},
    }
    doc = k8s_snapshot.document(nodes=[NODE], pods=[pending], names=k8s_snapshot.Names(hashed=True), taken="now")
    node_name, spec = doc["nodes"][0]["metadata"]["name"], doc["pods"][0]["spec"]
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": node_name, "zone": "a"}
    affinity = spec["affinity"]
    required = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [node_name]
    anti = affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert anti["namespaces"] == [doc["pods"][0]["metadata"]["namespace"]]
    assert "secret-project" not in json.dumps(doc) and "gpu-node-7" not in json.dumps(doc)


def test_a_selection_keeps_what_runs_on_its_nodes_and_what_waits_in_its_namespaces() -> None:
    """--node-selector and --namespace: a pod on a node left out is dropped; one of another namespace on a kept node
    stays (it holds the node's room); pending pods of other namespaces are dropped, with their PodGroups."""
    other = {**NODE, "metadata": {"name": "cpu-node-1", "labels": {"zone": "b"}}}
    elsewhere = _pod("on-a-node-left-out", node="cpu-node-1")
    neighbour = _pod("neighbour", node="gpu-node-7")
    neighbour["metadata"]["namespace"] = "another-team"
    waiting = _pod("waiting-elsewhere", phase="Pending")
    waiting["metadata"]["namespace"] = "another-team"
    groups = [
        {"metadata": {"name": "trainer", "namespace": "secret-project"}, "spec": {"minMember": 2}},
        {"metadata": {"name": "trainer", "namespace": "third-team"}, "spec": {"minMember": 2}},
    ]
    pods = [*PODS, elsewhere, neighbour, waiting]
    doc = k8s_snapshot.document(
        nodes=[NODE],  # the API server answered the selector zone=a with this node alone (not cpu-node-1)
        pods=pods,
        podgroups=groups,
        names=k8s_snapshot.Names(hashed=False),
        taken="now",
        node_selector="zone=a",
        namespaces={"secret-project"},
    )
    assert [p["metadata"]["name"] for p in doc["pods"]] == ["trainer-0", "trainer-1", "neighbour"]
    assert [g["metadata"]["namespace"] for g in doc["podGroups"]] == ["secret-project"]
    assert doc["selection"] == {"nodeSelector": "zone=a", "namespaces": ["secret-project"]}
    whole = k8s_snapshot.document(nodes=[NODE, other], pods=pods, names=k8s_snapshot.Names(hashed=False), taken="now")
    assert len(whole["pods"]) == 5 and whole["selection"] == {"nodeSelector": None, "namespaces": []}


def test_a_selection_names_no_namespace_or_selector_when_names_are_hashed() -> None:
    doc = k8s_snapshot.document(
        nodes=[NODE],
        pods=PODS,
        names=k8s_snapshot.Names(hashed=True),
        taken="now",
        node_selector="kubernetes.io/hostname=gpu-node-7",
        namespaces={"secret-project"},
    )
    assert "secret-project" not in json.dumps(doc) and "gpu-node-7" not in json.dumps(doc)
    assert doc["selection"]["namespaces"] == [doc["pods"][0]["metadata"]["namespace"]]
