"""Pod topology spread (PodTopologySpread) as kube-scheduler applies it, with its messages: maxSkew, minDomains,
the node inclusion policies, matchLabelKeys, ScheduleAnyway as a score, the cluster defaults, gangs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from scheduler.api.crds import podgroup as api_podgroup
from scheduler.api.objects import pod as api_pod
from scheduler.api.objects import selectors
from scheduler.core import gang
from scheduler.framework.interface import Code
from tests.api import objects
from tests.cache import node_selection
from tests.core.harness import Cluster

PLUGINS: tuple[Any, ...] = ("fit", "topology_spread", "gpu")
SKEW = "node(s) didn't match pod topology spread constraints"
MISSING = "node(s) didn't match pod topology spread constraints (missing required label)"
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
WEB = {"app": "web"}


def _constraint(key: str = ZONE, skew: int = 1, *, hard: bool = True, **extra: Any) -> dict[str, Any]:
    return {
        "maxSkew": skew,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
        "labelSelector": {"matchLabels": WEB},
        **extra,
    }


def _pod(
    name: str, *constraints: dict[str, Any], node: str = "", labels: dict[str, str] | None = None, **kw: Any
) -> dict[str, Any]:
    raw = objects.pod(
        name, labels=WEB if labels is None else labels, node_name=node, phase="Running" if node else "", **kw
    )
    if constraints:
        raw["spec"]["topologySpreadConstraints"] = list(constraints)
    return raw


def _node(name: str, zone: str | None, **kw: Any) -> dict[str, Any]:
    return objects.node(name, labels={ZONE: zone} if zone else {}, **kw)


def _failure(cluster: Cluster, raw: dict[str, Any]) -> str:
    result = cluster.schedule(raw)
    assert result.decision is None, result.decision
    assert result.status.code == Code.UNSCHEDULABLE
    return result.status.message


def test_max_skew_per_zone() -> None:
    cluster = Cluster([_node("a1", "a"), _node("a2", "a"), _node("b1", "b")], PLUGINS)
    placed = [cluster.place(_pod(f"w{i}", _constraint()))[0] for i in range(4)]
    assert placed == ["a1", "b1", "a1", "b1"]
    # Pods the selector does not name do not count.
    cluster.place(_pod("db", labels={"app": "db"}))
    assert cluster.place(_pod("w4", _constraint()))[0] == "a1"


def test_every_reason_has_kube_schedulers_message() -> None:
    taint = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
    cluster = Cluster(
        [_node("a1", "a"), _node("b1", "b", taints=taint), _node("bare", None)],
        PLUGINS,
        bound=[_pod("old", node="a1")],
    )
    # b counts as a domain with no pod (nodeTaintsPolicy Ignore by default): a would be 2 against 0.
    assert _failure(cluster, _pod("w", _constraint())) == (
        f"0/3 nodes are available: 1 {SKEW}, 1 {MISSING}, 1 node(s) had untolerated taint {{dedicated: x}}."
    )


def test_node_taints_policy_honor_leaves_tainted_domains_out() -> None:
    taint = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
    cluster = Cluster([_node("a1", "a"), _node("b1", "b", taints=taint)], PLUGINS, bound=[_pod("old", node="a1")])
    assert cluster.place(_pod("w", _constraint(nodeTaintsPolicy="Honor")))[0] == "a1"


def test_node_affinity_policy_ignore_counts_domains_the_pod_cannot_use() -> None:
    cluster = Cluster([_node("a1", "a"), _node("b1", "b")], PLUGINS, bound=[_pod("old", node="a1")])
    to_a = {ZONE: "a"}
    assert cluster.place(_pod("honor", _constraint(), node_selector=to_a))[0] == "a1"
    cluster.cache.remove_pod("default/honor")
    assert _failure(cluster, _pod("ignore", _constraint(nodeAffinityPolicy="Ignore"), node_selector=to_a)) == (
        f"0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 {SKEW}."
    )


def test_min_domains_counts_missing_domains_as_empty() -> None:
    cluster = Cluster([_node("a1", "a"), _node("a2", "a")], PLUGINS)
    assert cluster.place(_pod("w0", _constraint(minDomains=2)))[0] == "a1"
    assert _failure(cluster, _pod("w1", _constraint(minDomains=2))) == f"0/2 nodes are available: 2 {SKEW}."
    assert cluster.place(_pod("w2", _constraint()))[0] == "a1"  # without minDomains one zone is all there is


def test_match_label_keys_count_only_the_same_revision() -> None:
    cluster = Cluster([_node("a1", "a"), _node("b1", "b")], PLUGINS)
    old = {"app": "web", "pod-template-hash": "v1"}
    cluster.cache.upsert_pod(api_pod.parse_pod(_pod("old", node="a1", labels=old)))
    new = {"app": "web", "pod-template-hash": "v2"}
    c = _constraint(matchLabelKeys=["pod-template-hash"])
    assert cluster.place(_pod("n0", c, labels=new))[0] == "a1"  # the v1 pod does not count
    assert cluster.place(_pod("n1", c, labels=new))[0] == "b1"


def test_gang_members_spread_inside_the_what_if() -> None:
    cluster = Cluster([objects.node(n, gpus=8) for n in ("a", "b")], (*PLUGINS, "gang"))
    group = api_podgroup.parse_podgroup({"metadata": {"name": "g", "namespace": "default"}, "spec": {"minMember": 4}})
    members = [api_pod.parse_pod(_pod(f"m{i}", _constraint(HOST), gpus=1)) for i in range(4)]
    result = gang.place_gang(cluster.scheduler, group, members)
    assert result.status.ok, result.status.message
    assert sorted(d.node for d in result.decisions) == ["a", "a", "b", "b"]  # the gang score alone packs them


def test_schedule_anyway_prefers_the_emptier_domain() -> None:
    cluster = Cluster([_node("a1", "a"), _node("b1", "b")], PLUGINS, bound=[_pod("old", node="a1")])
    assert cluster.place(_pod("w", _constraint(hard=False)))[0] == "b1"
    assert cluster.place(_pod("plain", labels={}))[0] == "a1"  # no constraint, no controller: no preference


def test_cluster_defaults_spread_a_controllers_pods_over_hosts() -> None:
    def replica(name: str, node: str = "") -> dict[str, Any]:
        raw = _pod(name, node=node, labels={})
        raw["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs", "uid": "rs-1", "controller": True}]
        return raw

    cluster = Cluster([objects.node("a"), objects.node("b")], PLUGINS, bound=[replica("r0", node="a")])
    assert cluster.place(replica("r1"))[0] == "b"
    assert api_pod.parse_pod(replica("r2")).owner == "rs-1"


def test_cluster_defaults_spread_the_pods_of_a_service_over_zones() -> None:
    # Pods with no controller that a Service selects (Kubernetes' e2e "Multi-AZ Clusters should spread the pods
    # of a service across zones"): the operator gives each the Service's selector.
    zone = "topology.kubernetes.io/zone"
    nodes = [objects.node(f"{z}{i}", labels={zone: z}) for z in ("a", "b") for i in range(2)]
    service = (("svc", "web"),)
    cluster = Cluster(nodes, PLUGINS)
    placed = []
    for i in range(6):
        pod = replace(api_pod.parse_pod(_pod(f"w{i}", labels={"svc": "web"})), service_labels=service)
        result = cluster.scheduler.schedule(pod)
        assert result.decision is not None
        placed.append(result.decision.node[0])
    assert sorted(placed) == ["a", "a", "a", "b", "b", "b"], placed
    # Without the Service the same pods pile up on the first node by name.
    plain = Cluster(nodes, PLUGINS)
    assert {plain.place(_pod(f"p{i}", labels={"svc": "web"}))[0] for i in range(3)} == {"a0"}


# --- the vectorised filter against a plain per-node reading of kube-scheduler's rules ---------------------------

_TAINT = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]


def _brute(
    nodes: dict[str, dict[str, Any]], held: list[tuple[dict[str, Any], str]], incoming: dict[str, Any]
) -> set[str]:
    """The nodes PodTopologySpread's filter lets ``incoming`` onto, read node by node."""
    pod = api_pod.parse_pod(incoming)
    hard = [c for c in pod.spread if c.hard]
    pods = [(api_pod.parse_pod(raw), node) for raw, node in held]
    info = {
        name: (raw["metadata"]["labels"], selectors.parse_taints(raw["spec"]["taints"], obj=name))
        for name, raw in nodes.items()
    }
    ok = set()
    for name, (labels, _) in info.items():
        fits = True
        for c in hard:
            counts: dict[str, int] = {}
            for other, (other_labels, taints) in info.items():
                if not all(k.topology_key in other_labels for k in hard):
                    continue
                if c.honor_affinity and not node_selection.node_matches(
                    other, other_labels, pod.node_selector, pod.affinity
                ):
                    continue
                if c.honor_taints and not selectors.tolerated(taints, pod.tolerations):
                    continue
                value = other_labels[c.topology_key]
                counts[value] = counts.get(value, 0) + sum(
                    1 for p, n in pods if n == other and p.namespace == pod.namespace and c.selector.matches(p.labels)
                )
            if c.topology_key not in labels:
                fits = False
                break
            smallest = min(counts.values()) if counts else 0
            if len(counts) < c.min_domains:
                smallest = 0
            own = 1 if c.selector.matches(pod.labels) else 0
            if counts.get(labels[c.topology_key], 0) + own - smallest > c.max_skew:
                fits = False
                break
        if fits:
            ok.add(name)
    return ok


@settings(max_examples=80, deadline=None)
@given(
    layout=st.lists(st.tuples(st.sampled_from(["a", "b", "c", ""]), st.booleans()), min_size=1, max_size=6),
    bound=st.lists(st.tuples(st.sampled_from([WEB, {"app": "db"}]), st.integers(0, 5)), max_size=8),
    constraints=st.lists(
        st.tuples(
            st.sampled_from([ZONE, HOST]),
            st.integers(1, 2),
            st.sampled_from([None, 2, 4]),
            st.sampled_from(["Honor", "Ignore"]),
            st.sampled_from(["Honor", "Ignore"]),
        ),
        min_size=1,
        max_size=2,
    ),
    selector=st.sampled_from([None, {"zone-pick": "yes"}]),
    own=st.sampled_from([WEB, {"app": "db"}]),
)
def test_the_filter_agrees_with_a_per_node_reading(
    layout: list[tuple[str, bool]],
    bound: list[tuple[dict[str, str], int]],
    constraints: list[tuple[str, int, int | None, str, str]],
    selector: dict[str, str] | None,
    own: dict[str, str],
) -> None:
    nodes = {}
    for i, (zone, tainted) in enumerate(layout):
        labels = {ZONE: zone} if zone else {}
        if i % 2 == 0:
            labels["zone-pick"] = "yes"
        nodes[f"n{i}"] = objects.node(f"n{i}", labels=labels, taints=_TAINT if tainted else None)
    held = [
        (_pod(f"b{i}", labels=lab, node=f"n{at % len(layout)}"), f"n{at % len(layout)}")
        for i, (lab, at) in enumerate(bound)
    ]
    specs = []
    for key, skew, min_domains, affinity_policy, taints_policy in constraints:
        spec: dict[str, Any] = _constraint(
            key, skew, nodeAffinityPolicy=affinity_policy, nodeTaintsPolicy=taints_policy
        )
        if min_domains is not None:
            spec["minDomains"] = min_domains
        specs.append(spec)
    assume(len({s["topologyKey"] for s in specs}) == len(specs))
    incoming = _pod("in", *specs, labels=own, node_selector=selector)
    cluster = Cluster(list(nodes.values()), ("topology_spread",), bound=[raw for raw, _ in held])
    result = cluster.scheduler.place(api_pod.parse_pod(incoming), cluster.cache.snapshot())
    assert result.state is not None
    got = {cluster.cache.names[s] for s in result.state.feasible.tolist()}
    assert got == _brute(nodes, held, incoming)
