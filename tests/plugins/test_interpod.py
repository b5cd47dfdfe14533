"""Inter-pod affinity and anti-affinity (InterPodAffinity), as kube-scheduler applies them, with its messages;
counted per topology domain, what-if placements (a gang's members) included; and property tests of the filter
and the score against a plain per-node, per-pod reading of kube-scheduler's rules."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.crds import podgroup as api_podgroup
from scheduler.api.objects import pod as api_pod
from scheduler.core import gang
from scheduler.framework.interface import Code, CycleState
from scheduler.plugins.interpod import InterPodAffinity
from tests.api import objects
from tests.core.harness import Cluster

PLUGINS: tuple[Any, ...] = ("fit", "interpod", "gpu")
ANTI = "node(s) didn't match pod anti-affinity rules"
AFFINITY = "node(s) didn't match pod affinity rules"
EXISTING = "node(s) didn't satisfy existing pods anti-affinity rules"
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def _term(labels: dict[str, str], key: str, **extra: Any) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": key, **extra}


def _pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    anti: list[dict[str, Any]] | None = None,
    affinity: list[dict[str, Any]] | None = None,
    preferred_anti: list[tuple[int, dict[str, Any]]] | None = None,
    node: str = "",
    namespace: str = "default",
    **kw: Any,
) -> dict[str, Any]:
    raw = objects.pod(name, labels=labels, node_name=node, namespace=namespace, phase="Running" if node else "", **kw)
    spec: dict[str, Any] = {}
    if anti or preferred_anti:
        spec["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": anti or [],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": w, "podAffinityTerm": t} for w, t in preferred_anti or []
            ],
        }
    if affinity:
        spec["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": affinity}
    if spec:
        raw["spec"]["affinity"] = spec
    return raw


def _zones(**zones: str) -> list[dict[str, Any]]:
    return [objects.node(name, labels={ZONE: zone} if zone else {}) for name, zone in zones.items()]


def _failure(cluster: Cluster, raw: dict[str, Any]) -> str:
    result = cluster.schedule(raw)
    assert result.decision is None, result.decision
    assert result.status.code == Code.UNSCHEDULABLE
    return result.status.message


def test_required_anti_affinity_on_hostname_puts_one_replica_per_node() -> None:
    cluster = Cluster([objects.node(n) for n in ("a", "b", "c")], PLUGINS)
    web = {"app": "web"}
    placed = [cluster.place(_pod(f"web-{i}", labels=web, anti=[_term(web, HOST)]))[0] for i in range(3)]
    assert sorted(placed) == ["a", "b", "c"]
    assert (
        _failure(cluster, _pod("web-3", labels=web, anti=[_term(web, HOST)])) == f"0/3 nodes are available: 3 {ANTI}."
    )
    # A pod the term does not select is not held back.
    assert cluster.place(_pod("db", labels={"app": "db"}))[0] == "a"


def test_anti_affinity_counts_per_zone_and_a_node_without_the_key_is_no_domain() -> None:
    cluster = Cluster(_zones(a1="a", a2="a", b1="b", bare=""), PLUGINS)
    web = {"app": "web"}
    assert cluster.place(_pod("w0", labels=web, anti=[_term(web, ZONE)]))[0] == "a1"
    assert cluster.place(_pod("w1", labels=web, anti=[_term(web, ZONE)]))[0] == "b1"
    # Both zones hold one; a node without the zone label is in no domain, so anti-affinity does not exclude it.
    assert cluster.place(_pod("w2", labels=web, anti=[_term(web, ZONE)]))[0] == "bare"


def test_required_affinity_follows_the_selected_pods_domain() -> None:
    cluster = Cluster(
        _zones(a1="a", b1="b", b2="b", bare=""), PLUGINS, bound=[_pod("db", labels={"app": "db"}, node="b2")]
    )
    follow = _pod("cache", affinity=[_term({"app": "db"}, ZONE)])
    assert cluster.place(follow)[0] == "b1"
    lonely = _pod("lonely", affinity=[_term({"app": "nothing"}, ZONE)])
    assert _failure(cluster, lonely) == f"0/4 nodes are available: 4 {AFFINITY}."


def test_the_first_of_a_set_of_pods_with_affinity_to_each_other_goes_where_the_key_is() -> None:
    cluster = Cluster(_zones(bare="", a1="a", b1="b"), PLUGINS)
    web = {"app": "web"}
    first = cluster.place(_pod("w0", labels=web, affinity=[_term(web, ZONE)]))[0]
    assert first == "a1"  # not "bare": every topology key must be on the node
    assert cluster.place(_pod("w1", labels=web, affinity=[_term(web, ZONE)]))[0] == "a1"


def test_existing_pods_anti_affinity_keeps_the_pods_it_selects_away() -> None:
    loner = _pod("loner", labels={"app": "loner"}, anti=[_term({"app": "web"}, HOST)], node="a")
    cluster = Cluster([objects.node("a"), objects.node("b")], PLUGINS, bound=[loner])
    assert cluster.place(_pod("web-0", labels={"app": "web"}))[0] == "b"
    cluster.cache.remove_node("b")
    assert _failure(cluster, _pod("web-1", labels={"app": "web"})) == f"0/1 nodes are available: 1 {EXISTING}."
    # The term names its own namespace: a pod of another namespace is not selected.
    assert cluster.place(_pod("web-2", labels={"app": "web"}, namespace="other"))[0] == "a"
    # Once the pod with the anti-affinity is gone, so is the rule.
    cluster.cache.remove_pod("default/loner")
    assert cluster.place(_pod("web-3", labels={"app": "web"}))[0] == "a"


def test_a_bound_pods_new_labels_are_seen() -> None:
    cluster = Cluster(
        [objects.node("a"), objects.node("b")], PLUGINS, bound=[_pod("x", labels={"app": "db"}, node="a")]
    )
    web = {"app": "web"}
    assert cluster.place(_pod("w0", labels=web, anti=[_term(web, HOST)]))[0] in ("a", "b")
    cluster.cache.remove_pod("default/w0")
    cluster.cache.upsert_pod(api_pod.parse_pod(_pod("x", labels=web, node="a")))
    assert cluster.place(_pod("w1", labels=web, anti=[_term(web, HOST)]))[0] == "b"


def test_gang_members_anti_affinity_holds_inside_the_gangs_what_if() -> None:
    cluster = Cluster([objects.node(n, gpus=8) for n in ("a", "b")], (*PLUGINS, "gang"))
    group = api_podgroup.parse_podgroup({"metadata": {"name": "g", "namespace": "default"}, "spec": {"minMember": 2}})
    labels = {"job": "g"}

    def member(i: int) -> api_pod.PodRequest:
        return api_pod.parse_pod(_pod(f"m-{i}", labels=labels, anti=[_term(labels, HOST)], gpus=1))

    result = gang.place_gang(cluster.scheduler, group, [member(0), member(1)])
    assert result.status.ok, result.status.message
    assert sorted(d.node for d in result.decisions) == ["a", "b"]  # although the gang score pulls them together
    for d in result.decisions:
        cluster.cache.remove_pod(d.pod.key)
    result = gang.place_gang(cluster.scheduler, group, [member(i) for i in range(3)])
    assert not result.status.ok and ANTI in result.status.message, result.status.message
    assert not cluster.cache.snapshot().what_if_pods


def test_preferred_anti_affinity_scores_the_node_without_the_selected_pods_higher() -> None:
    bound = [_pod("web-0", labels={"app": "web"}, node="a")]
    cluster = Cluster(
        [objects.node("a"), objects.node("b")],
        ("fit", {"name": "interpod", "weight": 1}, "gpu"),
        bound=bound,
    )
    spread = _pod("web-1", labels={"app": "web"}, preferred_anti=[(50, _term({"app": "web"}, HOST))])
    assert cluster.place(spread)[0] == "b"  # "a" would win the tie without the preference
    assert cluster.place(_pod("plain"))[0] == "a"


# --- the vectorised filter against a plain per-node reading ---------------------------------------------------

_LABELS = st.sampled_from([{"app": "web"}, {"app": "db"}, {}])
_KEY = st.sampled_from([HOST, ZONE])


def _brute(
    nodes: dict[str, dict[str, str]], bound: list[tuple[dict[str, Any], str]], incoming: dict[str, Any]
) -> set[str]:
    """The nodes kube-scheduler's InterPodAffinity filter lets ``incoming`` onto, node by node."""
    pod = api_pod.parse_pod(incoming)
    held = [(api_pod.parse_pod(raw), node) for raw, node in bound]
    ok = set()
    for name, labels in nodes.items():

        def same(key: str, other: str, labels: dict[str, str] = labels) -> bool:
            return key in labels and nodes[other].get(key) == labels[key]

        # kube-scheduler counts per (topology key, value), summed over the terms with that key.
        counts_exist = all(
            any(
                u.matches(p.namespace, p.labels) and same(u.topology_key, n)
                for u in pod.pod_affinity.required
                if u.topology_key == t.topology_key
                for p, n in held
            )
            for t in pod.pod_affinity.required
        )
        none_anywhere = not any(
            t.matches(p.namespace, p.labels) and t.topology_key in nodes[n]
            for t in pod.pod_affinity.required
            for p, n in held
        )
        keys = all(t.topology_key in labels for t in pod.pod_affinity.required)
        self_match = all(t.matches(pod.namespace, pod.labels) for t in pod.pod_affinity.required)
        if not (keys and (counts_exist or (none_anywhere and self_match))):
            continue
        if any(
            t.matches(p.namespace, p.labels) and same(t.topology_key, n)
            for t in pod.pod_affinity.anti_required
            for p, n in held
        ):
            continue
        if any(
            t.matches(pod.namespace, pod.labels) and same(t.topology_key, n)
            for p, n in held
            for t in p.pod_affinity.anti_required
        ):
            continue
        ok.add(name)
    return ok


@settings(max_examples=60, deadline=None)
@given(
    zones=st.lists(st.sampled_from(["a", "b", ""]), min_size=1, max_size=5),
    bound=st.lists(st.tuples(_LABELS, st.integers(0, 4), st.lists(st.tuples(_LABELS, _KEY), max_size=1)), max_size=6),
    labels=_LABELS,
    anti=st.lists(st.tuples(_LABELS, _KEY), max_size=2),
    affinity=st.lists(st.tuples(_LABELS, _KEY), max_size=2),
)
def test_the_filter_agrees_with_a_per_node_reading(
    zones: list[str],
    bound: list[tuple[dict[str, str], int, list[tuple[dict[str, str], str]]]],
    labels: dict[str, str],
    anti: list[tuple[dict[str, str], str]],
    affinity: list[tuple[dict[str, str], str]],
) -> None:
    nodes = {f"n{i}": ({ZONE: z} if z else {}) | {HOST: f"n{i}"} for i, z in enumerate(zones)}
    held = [
        (
            _pod(f"b{i}", labels=lab, anti=[_term(s, k) for s, k in terms], node=f"n{at % len(zones)}"),
            f"n{at % len(zones)}",
        )
        for i, (lab, at, terms) in enumerate(bound)
    ]
    cluster = Cluster(
        [objects.node(n, labels={k: v for k, v in lab.items() if k != HOST}) for n, lab in nodes.items()],
        ("interpod",),
        bound=[raw for raw, _ in held],
    )
    incoming = _pod(
        "in", labels=labels, anti=[_term(s, k) for s, k in anti], affinity=[_term(s, k) for s, k in affinity]
    )
    result = cluster.scheduler.place(api_pod.parse_pod(incoming), cluster.cache.snapshot())
    assert result.state is not None
    got = {cluster.cache.names[s] for s in result.state.feasible.tolist()}
    assert got == _brute(nodes, held, incoming)


def _brute_score(
    nodes: dict[str, dict[str, str]], held: list[tuple[dict[str, Any], str]], incoming: dict[str, Any]
) -> dict[str, float]:
    """kube-scheduler's InterPodAffinity score of every node, before normalisation, read pod by pod."""
    pod = api_pod.parse_pod(incoming)
    a = pod.pod_affinity
    raw = dict.fromkeys(nodes, 0.0)
    for other_raw, at in held:
        other = api_pod.parse_pod(other_raw)
        o = other.pod_affinity
        # (term, signed weight, whom it must select): the incoming pod's terms select the existing pod, the
        # existing pod's terms select the incoming one.
        terms = [(w.term, w.weight, other) for w in a.preferred]
        terms += [(w.term, -w.weight, other) for w in a.anti_preferred]
        terms += [(t, 1, pod) for t in o.required]
        terms += [(w.term, w.weight, pod) for w in o.preferred]
        terms += [(w.term, -w.weight, pod) for w in o.anti_preferred]
        for term, weight, target in terms:
            if not term.matches(target.namespace, target.labels) or term.topology_key not in nodes[at]:
                continue
            for name, labels in nodes.items():
                if labels.get(term.topology_key) == nodes[at][term.topology_key]:
                    raw[name] += weight
    return raw


def _weighted_pod(
    name: str, labels: dict[str, str], node: str, prefs: list[tuple[int, dict[str, str], str, bool]]
) -> Any:
    raw = _pod(name, labels=labels, node=node)
    spec: dict[str, Any] = {}
    for weight, selector, key, anti in prefs:
        kind = "podAntiAffinity" if anti else "podAffinity"
        spec.setdefault(kind, {"preferredDuringSchedulingIgnoredDuringExecution": []})
        spec[kind]["preferredDuringSchedulingIgnoredDuringExecution"].append(
            {"weight": weight, "podAffinityTerm": _term(selector, key)}
        )
    if spec:
        raw["spec"]["affinity"] = spec
    return raw


_PREF = st.tuples(st.integers(1, 100), _LABELS, _KEY, st.booleans())


@settings(max_examples=60, deadline=None)
@given(
    zones=st.lists(st.sampled_from(["a", "b", ""]), min_size=1, max_size=5),
    bound=st.lists(
        st.tuples(
            _LABELS, st.integers(0, 4), st.lists(_PREF, max_size=2), st.lists(st.tuples(_LABELS, _KEY), max_size=1)
        ),
        max_size=6,
    ),
    labels=_LABELS,
    prefs=st.lists(_PREF, max_size=3),
)
def test_the_score_agrees_with_a_per_pod_reading(
    zones: list[str],
    bound: list[
        tuple[dict[str, str], int, list[tuple[int, dict[str, str], str, bool]], list[tuple[dict[str, str], str]]]
    ],
    labels: dict[str, str],
    prefs: list[tuple[int, dict[str, str], str, bool]],
) -> None:
    nodes = {f"n{i}": ({ZONE: z} if z else {}) | {HOST: f"n{i}"} for i, z in enumerate(zones)}
    held = []
    for i, (lab, at, pod_prefs, required) in enumerate(bound):
        node = f"n{at % len(zones)}"
        raw = _weighted_pod(f"b{i}", lab, node, pod_prefs)
        if required:
            raw["spec"].setdefault("affinity", {})["podAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": [_term(s, k) for s, k in required]
            }
        held.append((raw, node))
    cluster = Cluster(
        [objects.node(n, labels={k: v for k, v in lab.items() if k != HOST}) for n, lab in nodes.items()],
        ("interpod",),
        bound=[raw for raw, _ in held],
    )
    incoming = _weighted_pod("in", labels, "", prefs)
    pod = api_pod.parse_pod(incoming)
    snap = cluster.cache.snapshot()
    names = [cluster.cache.names[s] for s in range(len(nodes))]
    slots = np.array([cluster.cache.slot_of(n) for n in nodes], dtype=np.int64)
    out = np.full(slots.shape[0], np.nan)
    state = CycleState(pod=pod, snapshot=snap, request=snap.request_vector(pod))
    if InterPodAffinity({}).score(state, slots, out) is False:
        out[:] = 0.0  # skipped: what the plugin says is 0 on every node
    raw_scores = _brute_score(nodes, held, incoming)
    values = np.array([raw_scores[cluster.cache.names[int(s)] or ""] for s in slots])
    low, high = values.min(), values.max()
    expected = np.floor(100.0 * (values - low) / (high - low)) if high > low else np.zeros_like(values)
    assert out.tolist() == expected.tolist(), (names, raw_scores)
