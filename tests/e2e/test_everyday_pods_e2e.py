"""Everyday pods through ``gpusched run`` on a real API server (issue 14): host ports as kube-scheduler's
NodePorts, cordoned nodes and the pods that tolerate them, inter-pod affinity and anti-affinity (the pod's own
and existing pods'), topology spread constraints, and pods asking for what gpusched does not honour yet
(namespace selectors by label, in-tree cloud disks), which wait with an Event and a condition naming the field
instead of being placed as if they had not asked. See docs/pods.md.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e.kube import Scenario, condition, node_of

pytestmark = pytest.mark.e2e

PORTS_MESSAGE = "node(s) didn't have free ports for the requested pod ports"


def _with_host_port(manifest: dict[str, Any], port: int) -> dict[str, Any]:
    manifest["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": port}]
    return manifest


def test_host_ports_keep_pods_apart_and_the_one_left_over_says_why(sched: Scenario) -> None:
    sched.add_nodes([kube_mod.gpu_node("ports-0", gpus=0), kube_mod.gpu_node("ports-1", gpus=0)])
    sched.start_gpusched()
    for i in range(3):
        sched.create_pod(_with_host_port(kube_mod.pod(f"web-{i}"), 8080))
    sched.create_pod(_with_host_port(kube_mod.pod("other-port"), 9090))

    def two_bound_one_waiting() -> list[dict[str, Any]] | None:
        pods = [sched.pod(f"web-{i}") for i in range(3)]
        bound = [p for p in pods if node_of(p)]
        return pods if len(bound) == 2 else None

    pods = kube_mod.wait_until(two_bound_one_waiting, timeout=60, what="two web pods bound", describe=sched.describe)
    bound = [p for p in pods if node_of(p)]
    assert {node_of(p) for p in bound} == {"ports-0", "ports-1"}, kube_mod.summary(bound)
    waiting = next(p for p in pods if not node_of(p))["metadata"]["name"]
    event = sched.wait_event(waiting, "FailedScheduling")
    assert event["message"].startswith(f"0/2 nodes are available: 2 {PORTS_MESSAGE}."), event["message"]
    sched.wait_bound(["other-port"])  # another port is free on both nodes

    # The port frees when its pod goes: the waiting pod binds where it was.
    freed = bound[0]
    sched.delete_pod(freed["metadata"]["name"])
    sched.wait_bound([waiting], timeout=60)
    assert node_of(sched.pod(waiting)) == node_of(freed)


def test_a_cordoned_node_takes_only_pods_that_tolerate_it(sched: Scenario) -> None:
    sched.add_nodes([kube_mod.gpu_node("cordon-0")])
    sched.kube.request(
        "PATCH",
        "/api/v1/nodes/cordon-0",
        {"spec": {"unschedulable": True}},
        content_type="application/merge-patch+json",
    )
    sched.start_gpusched()
    sched.create_pod(kube_mod.pod("plain", gpus=1))
    tolerant = kube_mod.pod("tolerant", gpus=1)
    tolerant["spec"]["tolerations"] = [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
    ]
    sched.create_pod(tolerant)
    sched.wait_bound(["tolerant"])
    event = sched.wait_event("plain", "FailedScheduling")
    assert "node(s) were unschedulable" in event["message"], event["message"]
    assert not node_of(sched.pod("plain"))


ANTI_MESSAGE = "node(s) didn't match pod anti-affinity rules"
HOST = "kubernetes.io/hostname"


def _affinity(manifest: dict[str, Any], kind: str, selector: dict[str, str], key: str = HOST) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": selector}, "topologyKey": key}
    manifest["spec"]["affinity"] = {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return manifest


def test_anti_affinity_spreads_replicas_and_affinity_follows_them(sched: Scenario) -> None:
    sched.add_nodes([kube_mod.gpu_node(f"aff-{i}", gpus=2) for i in range(3)])
    sched.start_gpusched()
    web = {"app": "web"}
    for i in range(4):
        sched.create_pod(_affinity(kube_mod.pod(f"web-{i}", gpus=1, labels=web), "podAntiAffinity", web))

    def three_bound() -> list[dict[str, Any]] | None:
        pods = [sched.pod(f"web-{i}") for i in range(4)]
        return pods if sum(1 for p in pods if node_of(p)) == 3 else None

    pods = kube_mod.wait_until(three_bound, timeout=60, what="three web replicas bound", describe=sched.describe)
    assert sorted(node_of(p) for p in pods if node_of(p)) == ["aff-0", "aff-1", "aff-2"], kube_mod.summary(pods)
    waiting = next(p for p in pods if not node_of(p))["metadata"]["name"]
    event = sched.wait_event(waiting, "FailedScheduling")
    assert event["message"].startswith(f"0/3 nodes are available: 3 {ANTI_MESSAGE}."), event["message"]

    # A cache pod with affinity to one web replica goes to its node; a pod that web replicas' anti-affinity
    # selects (an app=web pod without rules of its own) fits nowhere, and says so.
    target = next(p for p in pods if node_of(p))
    cache = _affinity(kube_mod.pod("cache", labels={"app": "cache"}), "podAffinity", {"app": "web", "replica": "x"})
    sched.kube.request(
        "PATCH",
        kube_mod.Kube.pods_path(sched.namespace, target["metadata"]["name"]),
        {"metadata": {"labels": {"replica": "x"}}},
        content_type="application/merge-patch+json",
    )
    sched.create_pod(cache)
    sched.wait_bound(["cache"])
    assert node_of(sched.pod("cache")) == node_of(target)
    sched.create_pod(kube_mod.pod("web-plain", labels=web))
    event = sched.wait_event("web-plain", "FailedScheduling")
    assert "node(s) didn't satisfy existing pods anti-affinity rules" in event["message"], event["message"]


def test_topology_spread_keeps_zones_within_max_skew(sched: Scenario) -> None:
    zone = "topology.kubernetes.io/zone"
    sched.add_nodes(
        [
            kube_mod.gpu_node("zone-a-0", gpus=0, labels={zone: "a"}),
            kube_mod.gpu_node("zone-a-1", gpus=0, labels={zone: "a"}),
            kube_mod.gpu_node("zone-b-0", gpus=0, labels={zone: "b"}),
        ]
    )
    sched.start_gpusched()
    web = {"app": "spread"}
    constraint = {
        "maxSkew": 1,
        "topologyKey": zone,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": web},
        "minDomains": 3,
    }
    for i in range(4):
        manifest = kube_mod.pod(f"s-{i}", labels=web)
        manifest["spec"]["topologySpreadConstraints"] = [constraint]
        sched.create_pod(manifest)
        if i < 2:
            # One at a time, so that which replicas are left over is known: with minDomains 3 and two zones the
            # missing zone counts as empty, so each zone takes one and no more.
            sched.wait_bound([f"s-{i}"])
    event = sched.wait_event("s-2", "FailedScheduling")
    assert "node(s) didn't match pod topology spread constraints" in event["message"], event["message"]
    zones = {node_of(sched.pod(f"s-{i}"))[: len("zone-a")] for i in range(2)}
    assert zones == {"zone-a", "zone-b"}
    sched.stays_unbound(["s-2", "s-3"], seconds=2)


UNSUPPORTED = {
    "ns-labels": (
        {
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"app": "web"}},
                            "namespaceSelector": {"matchLabels": {"team": "a"}},
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                }
            }
        },
        "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaceSelector",
    ),
    "volume": (
        {"volumes": [{"name": "data", "gcePersistentDisk": {"pdName": "data"}}]},
        "spec.volumes[0].gcePersistentDisk",
    ),
}


def test_pods_asking_for_what_gpusched_does_not_honour_wait_with_an_event_and_a_condition(sched: Scenario) -> None:
    sched.add_nodes([kube_mod.gpu_node("refuse-0")])
    sched.start_gpusched()
    for name, (extra, _) in UNSUPPORTED.items():
        manifest = kube_mod.pod(name, labels={"app": "web"})
        manifest["spec"].update(extra)
        sched.create_pod(manifest)
    sched.create_pod(kube_mod.pod("plain", labels={"app": "web"}))

    sched.wait_bound(["plain"])  # nothing else stops working
    for name, (_, field) in UNSUPPORTED.items():
        event = sched.wait_event(name, "InvalidObject")
        assert event["type"] == "Warning"
        assert field in event["message"] and "does not support" in event["message"], event["message"]

        def refused(pod_name: str = name) -> dict[str, Any] | None:
            cond = condition(sched.pod(pod_name), "PodScheduled")
            return cond if cond and cond["status"] == "False" else None

        cond = kube_mod.wait_until(refused, timeout=30, what=f"PodScheduled=False on {name}", describe=sched.describe)
        assert "does not support" in str(cond["message"]), cond
    sched.stays_unbound(UNSUPPORTED, seconds=3)


def test_a_gated_pod_waits_until_its_gates_are_removed_then_binds(sched: Scenario) -> None:
    sched.add_nodes([kube_mod.gpu_node("gated-0")])
    sched.start_gpusched()
    manifest = kube_mod.pod("gated", gpus=1)
    manifest["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    sched.create_pod(manifest)
    sched.stays_unbound(["gated"], seconds=3)
    # As kube-scheduler: no Event, and the API server's PodScheduled=False/SchedulingGated left as it is.
    assert [e["reason"] for e in sched.kube.events(sched.namespace, name="gated")] == []
    conditions = sched.kube.pod(sched.namespace, "gated")["status"].get("conditions") or []
    assert [(c["type"], c["reason"]) for c in conditions] == [("PodScheduled", "SchedulingGated")], conditions
    sched.kube.request(
        "PATCH",
        kube_mod.Kube.pods_path(sched.namespace, "gated"),
        {"spec": {"schedulingGates": None}},
        content_type="application/merge-patch+json",
    )
    sched.wait_bound(["gated"])


def test_a_gangs_members_anti_affinity_holds_inside_the_gang(sched: Scenario) -> None:
    # Without the rule the gang score would pack all three 2-GPU members on one 8-GPU node.
    sched.add_nodes([kube_mod.gpu_node(f"gang-aff-{i}") for i in range(3)])
    sched.start_gpusched()
    sched.create_podgroup(kube_mod.podgroup("spread-job", min_member=3))
    job = {"job": "spread-job"}
    names = [f"worker-{i}" for i in range(3)]
    for name in names:
        sched.create_pod(_affinity(kube_mod.pod(name, gpus=2, group="spread-job", labels=job), "podAntiAffinity", job))
    pods = sched.wait_bound(names, timeout=90)
    assert sorted(node_of(p) for p in pods) == ["gang-aff-0", "gang-aff-1", "gang-aff-2"], kube_mod.summary(pods)
    # A fourth member has no node left without a peer: it waits, with the anti-affinity message.
    sched.create_pod(
        _affinity(kube_mod.pod("worker-3", gpus=2, group="spread-job", labels=job), "podAntiAffinity", job)
    )
    event = sched.wait_event("worker-3", "FailedScheduling")
    assert "anti-affinity" in event["message"], event["message"]
    sched.stays_unbound(["worker-3"], seconds=2)


def test_preferred_node_affinity_and_prefer_no_schedule_taints_steer_placement(sched: Scenario) -> None:
    soft = [{"key": "spot", "value": "yes", "effect": "PreferNoSchedule"}]
    sched.add_nodes(
        [
            kube_mod.gpu_node("prefer-0", gpus=0, taints=soft),
            kube_mod.gpu_node("prefer-1", gpus=0),
            kube_mod.gpu_node("prefer-2", gpus=0, labels={"disk": "ssd"}),
        ]
    )
    sched.start_gpusched()
    ssd = kube_mod.pod("wants-ssd")
    ssd["spec"]["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
                }
            ]
        }
    }
    sched.create_pod(ssd)
    sched.wait_bound(["wants-ssd"])
    assert node_of(sched.pod("wants-ssd")) == "prefer-2"
    sched.create_pod(kube_mod.pod("avoids-spot"))
    sched.wait_bound(["avoids-spot"])
    assert node_of(sched.pod("avoids-spot")) != "prefer-0"
