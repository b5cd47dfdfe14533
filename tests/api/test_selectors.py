"""Node selectors, required node affinity, taints and tolerations mean what they mean in Kubernetes."""

from __future__ import annotations

import pytest

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.objects import selectors
from scheduler.api.objects.selectors import Requirement, Taint, Toleration

LABELS = {"zone": "a", "gpus": "8", "pool": "train"}


@pytest.mark.parametrize(
    ("requirement", "matches"),
    [
        (Requirement("zone", "In", ("a", "b")), True),
        (Requirement("zone", "In", ("b",)), False),
        (Requirement("missing", "In", ("a",)), False),
        (Requirement("zone", "NotIn", ("b",)), True),
        (Requirement("zone", "NotIn", ("a",)), False),
        (Requirement("missing", "NotIn", ("a",)), True),  # NotIn holds where the label is absent
        (Requirement("zone", "Exists"), True),
        (Requirement("missing", "Exists"), False),
        (Requirement("zone", "DoesNotExist"), False),
        (Requirement("missing", "DoesNotExist"), True),
        (Requirement("gpus", "Gt", ("4",)), True),
        (Requirement("gpus", "Gt", ("8",)), False),
        (Requirement("gpus", "Lt", ("10",)), True),
        (Requirement("zone", "Gt", ("1",)), False),  # not a number: no match
        (Requirement("missing", "Lt", ("1",)), False),
    ],
)
def test_requirements(requirement: Requirement, matches: bool) -> None:
    assert requirement.matches(LABELS) is matches


NO_SCHEDULE = Taint("dedicated", "ml", "NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "tolerates"),
    [
        (Toleration("dedicated", "Equal", "ml", "NoSchedule"), True),
        (Toleration("dedicated", "Equal", "ml"), True),  # no effect: every effect
        (Toleration("dedicated", "Equal", "other", "NoSchedule"), False),
        (Toleration("dedicated", "Exists"), True),
        (Toleration("dedicated", "Exists", effect="NoExecute"), False),
        (Toleration("", "Exists"), True),  # empty key with Exists tolerates everything
        (Toleration("", "Equal", "ml"), False),
        (Toleration("other", "Exists"), False),
    ],
)
def test_tolerations(toleration: Toleration, tolerates: bool) -> None:
    assert toleration.tolerates(NO_SCHEDULE) is tolerates


def test_only_filtering_taints_must_be_tolerated() -> None:
    prefer = Taint("spot", "", "PreferNoSchedule")
    execute = Taint("maintenance", "", "NoExecute")
    assert selectors.tolerated((prefer,), ())
    assert not selectors.tolerated((prefer, execute), ())
    assert selectors.tolerated((prefer, execute), (Toleration("maintenance", "Exists"),))
    assert not selectors.tolerated((NO_SCHEDULE, execute), (Toleration("maintenance", "Exists"),))


def test_tolerations_are_parsed_with_equal_as_default_operator() -> None:
    (toleration,) = selectors.parse_tolerations([{"key": "k", "value": "v"}], obj="pod p")
    assert toleration == Toleration("k", "Equal", "v", "")


def test_pods_with_the_same_tolerations_share_one_reading_and_bad_ones_are_still_refused() -> None:
    defaults = [  # what the API server adds to every pod (DefaultTolerationSeconds)
        {"key": f"node.kubernetes.io/{k}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for k in ("not-ready", "unreachable")
    ]
    first = selectors.parse_tolerations(defaults, obj="pod a")
    assert first == (
        Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute"),
        Toleration("node.kubernetes.io/unreachable", "Exists", "", "NoExecute"),
    )
    assert selectors.parse_tolerations([dict(t) for t in defaults], obj="pod b") is first
    other = selectors.parse_tolerations([{**defaults[0], "effect": "NoSchedule"}], obj="pod c")
    assert other == (Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoSchedule"),)
    for _ in range(2):  # read once, refused each time, naming the pod and the field
        with pytest.raises(InvalidObject) as refused:
            selectors.parse_tolerations([defaults[0], {"key": "k", "operator": "Near"}], obj="pod d")
        assert refused.value.obj == "pod d" and refused.value.field == "spec.tolerations[1].operator"
    with pytest.raises(InvalidObject):
        selectors.parse_tolerations([{"key": ["not", "text"]}, "not a map"], obj="pod e")
    assert selectors.parse_tolerations(None, obj="pod f") == selectors.parse_tolerations([], obj="pod f") == ()


def test_affinity_parsing_keeps_labels_and_fields_apart() -> None:
    spec = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["4"]}],
                            "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}],
                        }
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}],
            }
        }
    }
    (term,) = selectors.parse_node_affinity(spec, obj="pod p")
    assert term.labels == (Requirement("gpus", "Gt", ("4",)),)
    assert term.fields == (Requirement("metadata.name", "NotIn", ("n9",)),)
