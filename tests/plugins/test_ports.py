"""Host ports (NodePorts) and the pod-dependent node rules (NodeUnschedulable, readiness taints, the NodeAffinity
and TaintToleration scores), as kube-scheduler applies them, with its messages."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.crds import podgroup as api_podgroup
from scheduler.api.objects import pod as api_pod
from scheduler.core import gang
from scheduler.framework.interface import ClusterEvent, Code
from scheduler.kernels import layout
from scheduler.plugins import host_ports
from scheduler.plugins.host_ports import NodePorts
from tests.api import objects
from tests.core.harness import Cluster

PLUGINS = ("node_rules", "fit", "ports", "gpu")
PORTS_MESSAGE = "node(s) didn't have free ports for the requested pod ports"


def _with_ports(raw: dict[str, Any], *ports: dict[str, Any], sidecar: bool = False) -> dict[str, Any]:
    if sidecar:
        raw["spec"]["initContainers"] = [{"name": "side", "restartPolicy": "Always", "ports": list(ports)}]
    else:
        raw["spec"]["containers"][0]["ports"] = list(ports)
    return raw


def _web(name: str, port: int = 8080, *, node: str = "", ip: str = "", protocol: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"containerPort": 80, "hostPort": port}
    if ip:
        spec["hostIP"] = ip
    if protocol:
        spec["protocol"] = protocol
    return _with_ports(objects.pod(name, node_name=node, phase="Running" if node else ""), spec)


def _failure(cluster: Cluster, raw: dict[str, Any]) -> str:
    result = cluster.schedule(raw)
    assert result.decision is None, result.decision
    assert result.status.code == Code.UNSCHEDULABLE
    return result.status.message


def test_a_host_port_goes_only_where_it_is_free_and_the_message_is_kube_schedulers() -> None:
    cluster = Cluster([objects.node("a"), objects.node("b"), objects.node("c")], PLUGINS)
    placed = [cluster.place(_web(f"web-{i}"))[0] for i in range(3)]
    assert sorted(placed) == ["a", "b", "c"]  # one per node: each took the port on its node
    assert _failure(cluster, _web("web-3")) == f"0/3 nodes are available: 3 {PORTS_MESSAGE}."
    # Another port, or the same port over UDP, still fits anywhere.
    assert cluster.place(_web("other", 9090))[0] == "a"
    assert cluster.place(_web("udp", 8080, protocol="UDP"))[0] == "a"


def test_bound_pods_of_any_scheduler_hold_their_ports_and_release_them_when_gone() -> None:
    bound = [
        _web("old", node="a"),
        _with_ports(
            objects.pod("dns", node_name="b", scheduler_name="default-scheduler"),
            {"containerPort": 53, "hostPort": 8080},
        ),
    ]
    cluster = Cluster([objects.node("a"), objects.node("b")], PLUGINS, bound=bound)
    assert _failure(cluster, _web("new")) == f"0/2 nodes are available: 2 {PORTS_MESSAGE}."
    cluster.cache.remove_pod("default/old")
    assert cluster.place(_web("new"))[0] == "a"


def test_host_ips_conflict_only_when_equal_or_one_is_every_address() -> None:
    bound = [_web("on-ip", node="a", ip="10.0.0.1")]
    cluster = Cluster([objects.node("a")], PLUGINS, bound=bound)
    assert cluster.place(_web("other-ip", ip="10.0.0.2"))[0] == "a"
    assert _failure(cluster, _web("same-ip", ip="10.0.0.1")) == f"0/1 nodes are available: 1 {PORTS_MESSAGE}."
    assert _failure(cluster, _web("every-address")) == f"0/1 nodes are available: 1 {PORTS_MESSAGE}."


def test_sidecar_ports_count_and_plain_init_container_ports_do_not() -> None:
    cluster = Cluster([objects.node("a")], PLUGINS)
    cluster.place(_with_ports(objects.pod("side"), {"containerPort": 80, "hostPort": 7000}, sidecar=True))
    assert _failure(cluster, _web("clash", 7000)) == f"0/1 nodes are available: 1 {PORTS_MESSAGE}."
    init = objects.pod("init")
    init["spec"]["initContainers"] = [{"name": "setup", "ports": [{"containerPort": 80, "hostPort": 7001}]}]
    assert api_pod.parse_pod(init).host_ports == ()


def test_an_assumed_pod_holds_its_port_until_forgotten() -> None:
    cluster = Cluster([objects.node("a")], PLUGINS)
    cluster.place(_web("first"))
    assert cluster.cache.is_assumed("default/first")
    assert cluster.schedule(_web("second")).decision is None
    cluster.scheduler.bind_failed("default/first")
    assert cluster.place(_web("second"))[0] == "a"


def test_a_removed_node_takes_its_pods_ports_with_it() -> None:
    cluster = Cluster([objects.node("a"), objects.node("b")], PLUGINS, bound=[_web("old", node="a")])
    cluster.cache.remove_node("a")
    assert len(cluster.cache.ports) == 0
    assert cluster.place(_web("new"))[0] == "b"


def test_gang_members_placed_earlier_in_the_same_what_if_hold_their_ports() -> None:
    cluster = Cluster([objects.node("a", gpus=8), objects.node("b", gpus=8)], (*PLUGINS, "gang"))
    group = api_podgroup.parse_podgroup({"metadata": {"name": "g", "namespace": "default"}, "spec": {"minMember": 2}})
    members = [
        api_pod.parse_pod(_with_ports(objects.pod(f"w-{i}", gpus=1), {"containerPort": 80, "hostPort": 29500}))
        for i in range(3)
    ]
    # Two members fit (one per node) although the gang score pulls them together; a third fits nowhere.
    result = gang.place_gang(cluster.scheduler, group, members[:2])
    assert result.status.ok, result.status.message
    assert sorted(d.node for d in result.decisions) == ["a", "b"]
    cluster.cache.remove_pod("default/w-0")
    cluster.cache.remove_pod("default/w-1")
    result = gang.place_gang(cluster.scheduler, group, members)
    assert not result.status.ok and PORTS_MESSAGE in result.status.message
    assert not cluster.cache.snapshot().what_if_pods  # nothing left over from the what-if


def test_the_port_reason_wakes_on_pod_deletion_and_new_nodes_only() -> None:
    plugin = NodePorts({})
    assert plugin.wakes(host_ports.PORTS.code) == frozenset({ClusterEvent.POD_DELETED, ClusterEvent.NODE_ADDED})
    assert plugin.wakes(layout.GPU_COUNT) is None


# --- node rules ---------------------------------------------------------------------------------------------------

UNSCHEDULABLE_TOLERATION = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}


def test_a_cordoned_node_takes_only_pods_tolerating_the_unschedulable_taint() -> None:
    cluster = Cluster([objects.node("cordoned", unschedulable=True)], PLUGINS)
    assert _failure(cluster, objects.pod("p")) == "0/1 nodes are available: 1 node(s) were unschedulable."
    assert cluster.place(objects.pod("ds", tolerations=[UNSCHEDULABLE_TOLERATION]))[0] == "cordoned"
    # The toleration gives the node back, not its room: resources are still checked.
    assert _failure(cluster, objects.pod("big", cpu="64", tolerations=[UNSCHEDULABLE_TOLERATION])) == (
        "0/1 nodes are available: 1 Insufficient cpu. Never fits as the cluster is: it asks cpu 64 and nodes have at"
        " most 32; it fits once a node large enough joins, or it asks for less."
    )


def test_not_ready_and_unreachable_nodes_are_out_through_their_taints_unless_tolerated() -> None:
    nodes = [
        objects.node("not-ready", taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]),
        objects.node("unreachable", taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}]),
        # The NoExecute taints alone: pods get tolerations for them by default (DefaultTolerationSeconds), and
        # those tolerate NoExecute only, so the node's NoSchedule taint above is what keeps pods away.
        objects.node("ready"),
    ]
    cluster = Cluster(nodes, PLUGINS)
    assert cluster.place(objects.pod("p"))[0] == "ready"
    cluster.cache.remove_node("ready")
    # kube-scheduler names each node's taint; a not-ready or unreachable node comes back by itself, so the pod waits.
    assert _failure(cluster, objects.pod("q")) == (
        "0/2 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, 1 node(s) had"
        " untolerated taint {node.kubernetes.io/unreachable: }."
    )
    tolerant = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]
    assert cluster.place(objects.pod("r", tolerations=tolerant))[0] == "not-ready"


def _prefer(raw: dict[str, Any], *prefs: tuple[int, str, str]) -> dict[str, Any]:
    raw["spec"]["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": w, "preference": {"matchExpressions": [{"key": k, "operator": "In", "values": [v]}]}}
                for w, k, v in prefs
            ]
        }
    }
    return raw


SCORING = ("fit", {"name": "node_rules", "weight": 1}, "gpu")


def test_preferred_node_affinity_picks_the_node_with_the_heaviest_matching_terms() -> None:
    nodes = [
        objects.node("a-plain"),
        objects.node("ssd", labels={"disk": "ssd"}),
        objects.node("ssd-fast", labels={"disk": "ssd", "net": "fast"}),
        objects.node("fast", labels={"net": "fast"}),
    ]
    cluster = Cluster(nodes, SCORING)
    assert cluster.place(_prefer(objects.pod("p"), (10, "disk", "ssd"), (50, "net", "fast")))[0] == "ssd-fast"
    assert cluster.place(_prefer(objects.pod("q"), (80, "disk", "ssd"), (50, "net", "fast"), (1, "net", "x")))[0] == (
        "ssd-fast"
    )
    assert cluster.place(_prefer(objects.pod("r"), (80, "disk", "ssd")))[0] == "ssd"  # first of the equal best
    assert cluster.place(objects.pod("s"))[0] == "a-plain"  # no preference: the first node by name


def test_prefer_no_schedule_taints_are_avoided_unless_tolerated() -> None:
    soft = [{"key": "spot", "value": "yes", "effect": "PreferNoSchedule"}]
    cluster = Cluster([objects.node("spot", taints=soft), objects.node("steady")], SCORING)
    assert cluster.place(objects.pod("p"))[0] == "steady"
    tolerant = [{"key": "spot", "operator": "Exists", "effect": "PreferNoSchedule"}]
    assert cluster.place(objects.pod("q", tolerations=tolerant))[0] == "spot"  # both equal: the first node


def test_bad_preferred_node_affinity_is_refused_naming_the_field() -> None:
    raw = _prefer(objects.pod("p"), (10, "disk", "ssd"))
    raw["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"][
        "matchExpressions"
    ][0]["operator"] = "Near"
    with pytest.raises(InvalidObject) as err:
        api_pod.parse_pod(raw)
    assert err.value.field == (
        "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference"
        ".matchExpressions[0].operator"
    )
