"""Inter-pod affinity terms are read as kube-scheduler reads them: namespaces resolved against the pod, label
selectors, matchLabelKeys / mismatchLabelKeys merged, weights checked."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.objects import affinity as api_affinity
from scheduler.api.objects import pod as api_pod
from tests.api import objects


def _pod(affinity: dict[str, Any], *, labels: dict[str, str] | None = None, namespace: str = "shop") -> Any:
    raw = objects.pod("p", labels=labels, namespace=namespace, scheduler_name="default-scheduler")
    raw["spec"]["affinity"] = affinity
    return api_pod.parse_pod(raw)


def _anti(term: dict[str, Any]) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def test_a_term_without_namespaces_selects_in_the_pods_own_namespace() -> None:
    pod = _pod(_anti({"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}))
    (term,) = pod.pod_affinity.anti_required
    assert term.namespaces == frozenset({"shop"}) and term.topology_key == "zone"
    assert term.matches("shop", {"app": "web", "x": "y"})
    assert not term.matches("other", {"app": "web"})
    assert not term.matches("shop", {"app": "db"})


def test_listed_namespaces_and_an_empty_namespace_selector() -> None:
    listed = _pod(_anti({"labelSelector": {}, "namespaces": ["a", "b"], "topologyKey": "zone"}))
    (term,) = listed.pod_affinity.anti_required
    assert term.matches("a", {}) and term.matches("b", {"any": "thing"}) and not term.matches("shop", {})
    everywhere = _pod(_anti({"labelSelector": {}, "namespaceSelector": {}, "topologyKey": "zone"}))
    (term,) = everywhere.pod_affinity.anti_required
    assert term.namespaces == api_affinity.ALL_NAMESPACES and term.matches("anywhere", {})


def test_a_missing_selector_selects_nothing_and_an_empty_one_everything() -> None:
    (none,) = _pod(_anti({"topologyKey": "zone"})).pod_affinity.anti_required
    (every,) = _pod(_anti({"labelSelector": {}, "topologyKey": "zone"})).pod_affinity.anti_required
    assert not none.matches("shop", {"app": "web"})
    assert every.matches("shop", {"app": "web"}) and every.matches("shop", {})


def test_match_expressions() -> None:
    selector = {
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["front", "edge"]},
            {"key": "canary", "operator": "DoesNotExist"},
            {"key": "app", "operator": "Exists"},
            {"key": "team", "operator": "NotIn", "values": ["ops"]},
        ]
    }
    (term,) = _pod(_anti({"labelSelector": selector, "topologyKey": "zone"})).pod_affinity.anti_required
    assert term.matches("shop", {"tier": "edge", "app": "x"})
    assert not term.matches("shop", {"tier": "edge", "app": "x", "canary": "1"})
    assert not term.matches("shop", {"tier": "back", "app": "x"})
    assert not term.matches("shop", {"tier": "front", "app": "x", "team": "ops"})


def test_match_label_keys_and_mismatch_label_keys_use_the_pods_own_values() -> None:
    raw = {
        "labelSelector": {"matchLabels": {"app": "web"}},
        "matchLabelKeys": ["pod-template-hash", "absent"],
        "mismatchLabelKeys": ["tenant"],
        "topologyKey": "zone",
    }
    pod = _pod(_anti(raw), labels={"app": "web", "pod-template-hash": "abc", "tenant": "t1"})
    (term,) = pod.pod_affinity.anti_required
    assert term.matches("shop", {"app": "web", "pod-template-hash": "abc", "tenant": "t2"})
    assert not term.matches("shop", {"app": "web", "pod-template-hash": "old", "tenant": "t2"})
    assert not term.matches("shop", {"app": "web", "pod-template-hash": "abc", "tenant": "t1"})


def test_all_four_kinds_are_read_with_their_weights() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}
    pod = _pod(
        {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [term],
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 30, "podAffinityTerm": term}],
            },
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 70, "podAffinityTerm": term}],
            },
        }
    )
    a = pod.pod_affinity
    assert len(a.required) == 1 and not a.anti_required
    assert [w.weight for w in a.preferred] == [30] and [w.weight for w in a.anti_preferred] == [70]
    assert a and len(a.terms) == 3
    assert not _pod({"podAffinity": {}}).pod_affinity


@pytest.mark.parametrize(
    ("affinity", "field"),
    [
        (
            _anti({"labelSelector": {}}),
            "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
        ),
        (
            {
                "podAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "podAffinityTerm": {}}]
                }
            },
            "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
        ),
        (
            _anti(
                {
                    "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
                    "topologyKey": "z",
                }
            ),
            "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector"
            ".matchExpressions[0].operator",
        ),
    ],
)
def test_bad_terms_are_refused_naming_the_field(affinity: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObject) as err:
        _pod(affinity)
    assert err.value.field == field


def test_a_namespace_selector_with_labels_is_refused_for_a_pending_pod_of_ours_and_read_widely_for_others() -> None:
    term = {"labelSelector": {}, "namespaceSelector": {"matchLabels": {"team": "a"}}, "topologyKey": "zone"}
    raw = objects.pod("p")
    raw["spec"]["affinity"] = _anti(term)
    with pytest.raises(api_pod.Unsupported) as err:
        api_pod.parse_pod(raw)
    assert err.value.field.endswith("requiredDuringSchedulingIgnoredDuringExecution[0].namespaceSelector")
    raw["spec"]["nodeName"] = "n1"
    (parsed,) = api_pod.parse_pod(raw).pod_affinity.anti_required
    assert parsed.namespaces == api_affinity.ALL_NAMESPACES and parsed.namespace_labels


def _spread(*constraints: dict[str, Any], labels: dict[str, str] | None = None) -> Any:
    raw = objects.pod("p", labels=labels)
    raw["spec"]["topologySpreadConstraints"] = list(constraints)
    return api_pod.parse_pod(raw)


def test_spread_constraints_are_read_with_kube_schedulers_defaults() -> None:
    (c,) = _spread(
        {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}
    ).spread
    assert (c.max_skew, c.topology_key, c.hard, c.min_domains) == (2, "zone", True, 1)
    assert c.honor_affinity and not c.honor_taints
    assert c.selector.matches({"any": "pod"})
    (soft,) = _spread(
        {
            "maxSkew": 1,
            "topologyKey": "zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "web"}},
            "matchLabelKeys": ["rev"],
            "nodeAffinityPolicy": "Ignore",
            "nodeTaintsPolicy": "Honor",
        },
        labels={"app": "web", "rev": "2"},
    ).spread
    assert not soft.hard and not soft.honor_affinity and soft.honor_taints
    assert soft.selector.matches({"app": "web", "rev": "2"}) and not soft.selector.matches({"app": "web", "rev": "1"})


@pytest.mark.parametrize(
    ("constraint", "field"),
    [
        ({"maxSkew": 0, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}, "maxSkew"),
        ({"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}, "topologyKey"),
        ({"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "Maybe"}, "whenUnsatisfiable"),
        ({"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2}, "minDomains"),
        (
            {"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule", "nodeTaintsPolicy": "X"},
            "nodeTaintsPolicy",
        ),
    ],
)
def test_bad_spread_constraints_are_refused_naming_the_field(constraint: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObject) as err:
        _spread(constraint)
    assert err.value.field == f"spec.topologySpreadConstraints[0].{field}"


def test_the_cluster_defaults_need_a_controller() -> None:
    assert api_affinity.default_spread("") == ()
    host, zone = api_affinity.default_spread("rs-1")
    assert (host.topology_key, host.max_skew, host.hard) == ("kubernetes.io/hostname", 3, False)
    assert (zone.topology_key, zone.max_skew) == ("topology.kubernetes.io/zone", 5)
    assert host.selector.matches({api_affinity.OWNER_KEY: "rs-1"}) and not host.selector.matches({})


def test_services_selecting_a_pod_merge_into_the_cluster_defaults() -> None:
    web = {"app": "web", "tier": "front"}
    selecting = api_affinity.services_selecting(web, [{"app": "web"}, {"tier": "front"}, {"app": "db"}, {}])
    assert selecting == (("app", "web"), ("tier", "front"))  # the db Service and the empty selector pick nothing
    assert api_affinity.services_selecting({}, [{"app": "web"}]) == ()
    host, zone = api_affinity.default_spread("", selecting)
    assert zone.topology_key == "topology.kubernetes.io/zone" and not zone.hard
    assert host.selector.matches(web) and not host.selector.matches({"app": "web"})
    # With a controller too: its pods that the Services select (kube-scheduler ANDs both selectors).
    (both, _) = api_affinity.default_spread("rs-1", (("app", "web"),))
    assert both.selector.matches({"app": "web", api_affinity.OWNER_KEY: "rs-1"})
    assert not both.selector.matches({"app": "web", api_affinity.OWNER_KEY: "rs-2"})
