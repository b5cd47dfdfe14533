"""Pods are read as kube-scheduler reads them: effective requests, whole and shared GPUs, and where they may go."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.basics import resources
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.objects import pod as api_pod
from scheduler.api.objects import run_time as api_run_time
from scheduler.api.objects.host_ports import HostPort
from scheduler.core import memo
from tests.api import objects

GIB = 2**30


def _with_containers(containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": containers, **spec}}


def _container(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **extra: Any) -> Any:
    return {"name": "c", "resources": {"requests": requests or {}, "limits": limits or {}}, **extra}


def test_requests_are_summed_over_containers_and_pods_counts_one() -> None:
    pod = api_pod.parse_pod(
        _with_containers([_container({"cpu": "500m", "memory": "1Gi"}), _container({"cpu": "1.5", "memory": "512Mi"})])
    )
    assert pod.key == "ns/p"
    assert pod.resources == {"cpu": 2000, "memory": GIB + 512 * 2**20, "pods": 1}
    assert pod.gpu == resources.NO_GPU


def test_a_limit_stands_in_for_a_missing_request_but_not_for_a_given_one() -> None:
    pod = api_pod.parse_pod(
        _with_containers([_container({"cpu": "250m"}, {"cpu": "2", "memory": "4Gi", "example.com/foo": "3"})])
    )
    assert pod.resources == {"cpu": 250, "memory": 4 * GIB, "example.com/foo": 3, "pods": 1}


def test_whole_gpus_come_from_limits_and_are_not_a_plain_counter() -> None:
    pod = api_pod.parse_pod(objects.pod("train", gpus=2))
    assert pod.gpu.whole and not pod.gpu.shared
    assert (pod.gpu.count, pod.gpu.milli, pod.gpu.total_milli) == (2, 1000, 2000)
    assert resources.GPU not in pod.resources


def test_init_containers_and_sidecars_are_counted_as_kube_scheduler_does() -> None:
    # App containers: 1 CPU. Sidecar (restartPolicy Always) started first: 500m, runs alongside everything after it.
    # Plain init containers run one at a time, each alongside the sidecars started before it:
    #   init-a (before the sidecar): 3 CPU; init-b (after it): 2 CPU + 500m = 2.5 CPU.
    # Peak of init phase = max(3, 0.5, 2.5) = 3; steady state = 1 + 0.5 = 1.5; overhead 100m on top: 3.1 CPU.
    # Memory: steady 1Gi + 1Gi = 2Gi; init peak max(0, 1Gi, 4Gi + 1Gi) = 5Gi; plus overhead 0.
    spec = {
        "initContainers": [
            _container({"cpu": "3"}),
            _container({"cpu": "500m", "memory": "1Gi"}, restartPolicy="Always"),
            _container({"cpu": "2", "memory": "4Gi"}),
        ],
        "overhead": {"cpu": "100m"},
    }
    pod = api_pod.parse_pod(_with_containers([_container({"cpu": "1", "memory": "1Gi"})], **spec))
    assert pod.resources == {"cpu": 3100, "memory": 5 * GIB, "pods": 1}


def test_sidecars_add_to_the_app_containers_when_they_dominate() -> None:
    spec = {"initContainers": [_container({"cpu": "1"}, restartPolicy="Always"), _container({"cpu": "1500m"})]}
    pod = api_pod.parse_pod(_with_containers([_container({"cpu": "2"})], **spec))
    # Steady: 2 + 1 = 3; init peak: max(1, 1 + 1.5) = 2.5 -> 3 CPU.
    assert pod.resources["cpu"] == 3000


def test_a_shared_gpu_with_memory_and_models() -> None:
    pod = api_pod.parse_pod(objects.pod("infer", milli=250, gpu_memory="10Gi", models="A100|H100"))
    assert pod.gpu.shared and not pod.gpu.whole
    assert pod.gpu == resources.GpuRequest(count=1, milli=250, memory=10 * GIB, models=("A100", "H100"))


@pytest.mark.parametrize("milli", [1, 999])
def test_gpu_milli_accepts_1_to_999(milli: int) -> None:
    assert api_pod.parse_pod(objects.pod("p", milli=milli)).gpu.milli == milli


def test_models_alone_restrict_a_whole_gpu_pod() -> None:
    pod = api_pod.parse_pod(objects.pod("p", gpus=1, models="H100"))
    assert pod.gpu == resources.GpuRequest(count=1, milli=1000, models=("H100",))


MILLI_FIELD = "metadata.annotations[gpusched.io/gpu-milli]"


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (objects.pod("p", milli=0), MILLI_FIELD),
        (objects.pod("p", milli=1000), MILLI_FIELD),
        (objects.pod("p", annotations={"gpusched.io/gpu-milli": "abc"}), MILLI_FIELD),
        (objects.pod("p", annotations={"gpusched.io/gpu-milli": "0.5"}), MILLI_FIELD),
        (objects.pod("p", gpus=2, milli=500), MILLI_FIELD),
        (objects.pod("p", gpu_memory="1Gi"), "metadata.annotations[gpusched.io/gpu-memory]"),
        (objects.pod("p", milli=100, gpu_memory="much"), "metadata.annotations[gpusched.io/gpu-memory]"),
        (objects.pod("p", gpus=1, models="A100||H100"), "metadata.annotations[gpusched.io/gpu-model]"),
        (objects.pod("p", annotations={"gpusched.io/gpu-ids": "0,x"}), "metadata.annotations[gpusched.io/gpu-ids]"),
        (objects.pod("p", annotations={"gpusched.io/gpu-ids": "1,1"}), "metadata.annotations[gpusched.io/gpu-ids]"),
        (objects.pod("p", annotations={"gpusched.io/gpu-ids": "-1"}), "metadata.annotations[gpusched.io/gpu-ids]"),
        (objects.pod("p", cpu="lots"), "spec.containers[0].resources.requests.cpu"),
        (
            objects.pod("p", affinity=[{"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}]),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0].operator",
        ),
        (
            objects.pod("p", affinity=[{"matchExpressions": [{"key": "zone", "operator": "In"}]}]),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0].values",
        ),
        (objects.pod("p", tolerations=[{"key": "k", "operator": "Matches"}]), "spec.tolerations[0].operator"),
    ],
)
def test_bad_pods_raise_naming_the_pod_and_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObject) as err:
        api_pod.parse_pod(raw)
    assert err.value.field == field
    assert err.value.obj == "pod default/p"
    assert field in str(err.value)


def test_a_pod_without_a_name_is_refused() -> None:
    with pytest.raises(InvalidObject) as err:
        api_pod.parse_pod({"metadata": {}, "spec": {"containers": []}})
    assert err.value.field == "metadata.name"


def test_where_a_pod_is_and_what_constrains_it() -> None:
    raw = objects.pod(
        "p",
        node_name="n1",
        annotations={"gpusched.io/gpu-ids": "2, 0"},
        labels={"gpusched.io/queue": "research", "gpusched.io/pod-group": "job-1"},
        node_selector={"pool": "gpu"},
        tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        affinity=[{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}],
        gpus=2,
        phase="Running",
    )
    pod = api_pod.parse_pod(raw)
    assert pod.node_name == "n1"
    assert pod.gpu_ids == (2, 0)
    assert (pod.queue, pod.pod_group) == ("research", "job-1")
    assert pod.node_selector == {"pool": "gpu"}
    assert pod.tolerations[0].key == "dedicated" and pod.tolerations[0].operator == "Exists"
    assert pod.affinity[0].labels[0].values == ("a", "b")
    assert pod.phase == "Running" and not pod.terminal
    assert pod.scheduler_name == "gpusched"


def test_finished_pods_hold_nothing() -> None:
    assert api_pod.parse_pod(objects.pod("p", phase="Succeeded")).terminal
    assert api_pod.parse_pod(objects.pod("p", phase="Failed")).terminal


def test_the_compat_pod_group_label_is_read_too() -> None:
    pod = api_pod.parse_pod(objects.pod("p", labels={"scheduling.x-k8s.io/pod-group": "g"}))
    assert pod.pod_group == "g"


_ANTI = {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname"}]}


def _spec_with(**extra: Any) -> dict[str, Any]:
    raw = objects.pod("p")
    raw["spec"].update(extra)
    return raw


@pytest.mark.parametrize(
    ("extra", "field", "what"),
    [
        (
            {
                "volumes": [
                    {"name": "c", "configMap": {"name": "x"}},
                    {"name": "d", "gcePersistentDisk": {"pdName": "d"}},
                ]
            },
            "spec.volumes[1].gcePersistentDisk",
            "gcePersistentDisk volumes",
        ),
        ({"volumes": [{"name": "e", "rbd": {}}]}, "spec.volumes[0].rbd", "rbd volumes"),
    ],
)
def test_a_pending_pod_of_ours_asking_for_what_gpusched_does_not_honour_is_refused_naming_the_field(
    extra: dict[str, Any], field: str, what: str
) -> None:
    with pytest.raises(api_pod.Unsupported) as err:
        api_pod.parse_pod(_spec_with(**extra))
    assert isinstance(err.value, InvalidObject)  # reported by the operator as any pod it cannot take
    assert err.value.field == field
    assert err.value.obj == "pod default/p"
    assert what in str(err.value) and "does not support" in str(err.value)


def test_everything_unsupported_is_named_in_one_refusal() -> None:
    with pytest.raises(api_pod.Unsupported) as err:
        api_pod.parse_pod(
            _spec_with(
                volumes=[{"name": "d", "iscsi": {"targetPortal": "t"}}],
                affinity={
                    "podAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {"topologyKey": "zone", "namespaceSelector": {"matchLabels": {"team": "a"}}}
                        ]
                    }
                },
            )
        )
    assert "namespaceSelector" in str(err.value) and "iscsi volumes" in str(err.value)


def test_claims_and_ephemeral_volumes_are_honoured_not_refused() -> None:
    pod = api_pod.parse_pod(
        _spec_with(
            volumes=[
                {"name": "d", "persistentVolumeClaim": {"claimName": "data", "readOnly": True}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            ]
        )
    )
    assert [(c.name, c.read_only, c.ephemeral) for c in pod.volumes] == [
        ("data", True, False),
        ("p-scratch", False, True),
    ]


def test_harmless_fields_and_empty_affinity_objects_are_not_refused() -> None:
    api_pod.parse_pod(
        _spec_with(
            affinity={"podAntiAffinity": {}, "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}},
            topologySpreadConstraints=[],
            volumes=[{"name": "s", "secret": {"secretName": "s"}}, {"name": "t", "emptyDir": {}}],
            containers=[{"name": "c", "ports": [{"containerPort": 80}]}],
        )
    )


@pytest.mark.parametrize(
    "extra", [{"nodeName": "n1"}, {"schedulerName": "default-scheduler"}, {"schedulerName": "other"}]
)
def test_bound_pods_and_other_schedulers_pods_are_read_whatever_they_ask(extra: dict[str, Any]) -> None:
    # They hold room on their nodes (or are not ours to place): refusing them would hide that room.
    raw = _spec_with(affinity={"podAntiAffinity": _ANTI}, **extra)
    pod = api_pod.parse_pod(raw)
    assert pod.key == "default/p"
    assert api_pod.parse_bound_pod(raw)[1] == ()


def test_host_ports_are_read_with_kube_schedulers_defaults() -> None:
    raw = _spec_with(
        containers=[
            {
                "name": "c",
                "ports": [
                    {"containerPort": 80},
                    {"containerPort": 8080, "hostPort": 8080},
                    {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
                ],
            }
        ]
    )
    assert api_pod.parse_pod(raw).host_ports == (HostPort("TCP", 8080, "0.0.0.0"), HostPort("UDP", 53, "10.0.0.1"))


@pytest.mark.parametrize(
    ("port", "field"),
    [
        ({"containerPort": 1, "hostPort": 70000}, "spec.containers[0].ports[0].hostPort"),
        ({"containerPort": 1, "hostPort": 1, "protocol": "ICMP"}, "spec.containers[0].ports[0].protocol"),
    ],
)
def test_bad_host_ports_are_refused_naming_the_field(port: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObject) as err:
        api_pod.parse_pod(_spec_with(containers=[{"name": "c", "ports": [port]}]))
    assert err.value.field == field


def test_a_pods_controller_kind_and_its_consolidation_annotation_are_read() -> None:
    raw = objects.pod("p", gpus=1, annotations={"gpusched.io/consolidation": "never"})
    raw["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs", "uid": "u1", "controller": True}]
    pod = api_pod.parse_pod(raw)
    assert (pod.owner, pod.owner_kind, pod.annotations["gpusched.io/consolidation"]) == ("u1", "ReplicaSet", "never")


def test_a_bad_consolidation_annotation_is_refused_on_a_pending_pod_and_read_as_never_on_a_bound_one() -> None:
    field = "metadata.annotations[gpusched.io/consolidation]"
    with pytest.raises(InvalidObject, match="'sometimes' is not one of allow, never") as err:
        api_pod.parse_pod(objects.pod("p", annotations={"gpusched.io/consolidation": "sometimes"}))
    assert err.value.field == field
    bound = api_pod.parse_pod(objects.pod("p", annotations={"gpusched.io/consolidation": "sometimes"}, node_name="n"))
    assert bound.node_name == "n"


# --- declared run times ---------------------------------------------------------------------------------------


def _timed(*, deadline: object = None, kueue: str | None = None, estimate: str | None = None, **kw: Any) -> Any:
    raw = objects.pod(
        "p",
        gpus=1,
        labels={api_run_time.LABEL_KUEUE_MAX_EXEC_TIME: kueue} if kueue is not None else None,
        annotations={api_run_time.ANNOTATION_EXPECTED_RUNTIME: estimate} if estimate is not None else None,
        **kw,
    )
    if deadline is not None:
        raw["spec"]["activeDeadlineSeconds"] = deadline
    return raw


@pytest.mark.parametrize(
    ("estimate", "seconds"),
    [("2h30m", 9000.0), ("90m", 5400.0), ("45s", 45.0), ("1.5h", 5400.0), ("3600", 3600.0), ("1h0m30s", 3630.0)],
)
def test_an_expected_runtime_is_a_soft_estimate_read_as_a_duration_or_seconds(estimate: str, seconds: float) -> None:
    run_time = api_pod.parse_pod(_timed(estimate=estimate)).run_time
    assert run_time == api_run_time.RunTime(seconds, False, "metadata.annotations[gpusched.io/expected-runtime]")


def test_a_deadline_is_hard_and_the_shortest_declaration_wins() -> None:
    assert api_pod.parse_pod(_timed(deadline=600)).run_time == api_run_time.RunTime(
        600.0, True, "spec.activeDeadlineSeconds"
    )
    kueue = api_pod.parse_pod(_timed(kueue="300", deadline=600, estimate="1h")).run_time
    assert kueue == api_run_time.RunTime(300.0, True, "metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]")
    # An estimate shorter than the deadline is what the pod is expected to take; the deadline still bounds it.
    assert api_pod.parse_pod(_timed(deadline=7200, estimate="30m")).run_time == api_run_time.RunTime(
        1800.0, False, "metadata.annotations[gpusched.io/expected-runtime]"
    )
    # Equal: the deadline, which nothing overruns.
    assert api_pod.parse_pod(_timed(deadline=1800, estimate="30m")).run_time.hard  # type: ignore[union-attr]
    assert api_pod.parse_pod(objects.pod("p", gpus=1)).run_time is None


def test_a_start_and_a_run_time_leave_the_shape_hashable_and_as_it_was() -> None:
    # Nothing places by run time yet: pods that differ only by it or by their start share one shape.
    a = api_pod.parse_pod(_timed(estimate="2h"))
    b = api_pod.parse_pod({**_timed(estimate="2h"), "status": {"startTime": "2026-01-01T00:00:00Z"}})
    assert b.started == 1767225600.0
    assert hash(a.run_time) == hash(b.run_time)
    assert memo.pod_shape(a) == memo.pod_shape(b) is not None
    assert memo.pod_shape(api_pod.parse_pod(_timed(estimate="3h"))) == memo.pod_shape(a)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (_timed(estimate="soon"), "metadata.annotations[gpusched.io/expected-runtime]"),
        (_timed(estimate="0s"), "metadata.annotations[gpusched.io/expected-runtime]"),
        (_timed(estimate="2h30"), "metadata.annotations[gpusched.io/expected-runtime]"),
        (_timed(estimate="-5"), "metadata.annotations[gpusched.io/expected-runtime]"),
        (_timed(kueue="1.5"), "metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]"),
        (_timed(kueue="0"), "metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]"),
        (_timed(deadline="600"), "spec.activeDeadlineSeconds"),
    ],
)
def test_a_bad_run_time_refuses_a_pending_pod_naming_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObject) as err:
        api_pod.parse_pod(raw)
    assert err.value.field == field and err.value.obj == "pod default/p"


def test_a_bound_pods_bad_run_time_is_left_out_and_reported_and_the_pod_keeps_its_room() -> None:
    raw = _timed(deadline=600, estimate="soon", node_name="n1")
    pod, problems = api_pod.parse_bound_pod(raw)
    assert (pod.node_name, pod.gpu.count) == ("n1", 1)
    assert pod.run_time == api_run_time.RunTime(600.0, True, "spec.activeDeadlineSeconds")
    assert [p.field for p in problems] == ["metadata.annotations[gpusched.io/expected-runtime]"]
    # With another malformed annotation too, both are reported and the pod still holds its node.
    raw["metadata"]["annotations"]["gpusched.io/gpu-ids"] = "x"
    pod, problems = api_pod.parse_bound_pod(raw)
    assert pod.node_name == "n1"
    assert {p.field for p in problems} == {
        "metadata.annotations[gpusched.io/gpu-ids]",
        "metadata.annotations[gpusched.io/expected-runtime]",
    }
    # Another scheduler's pending pod is read without it.
    assert api_pod.parse_pod(_timed(kueue="x", scheduler_name="default-scheduler")).run_time is None


def test_the_expected_end_is_the_start_plus_the_run_time() -> None:
    pod = api_pod.parse_pod(_timed(estimate="1h"))
    assert api_pod.expected_end(pod) is None  # not started
    assert api_pod.expected_end(pod, started=1000.0) == 4600.0
    started = api_pod.parse_pod({**_timed(estimate="1h"), "status": {"startTime": "2026-01-01T00:00:00Z"}})
    assert api_pod.expected_end(started, started=1000.0) == 1767225600.0 + 3600.0  # the pod's own start wins
    assert api_pod.expected_end(api_pod.parse_pod(objects.pod("p")), started=1000.0) is None
