"""HAMi's protocol: the register annotation read as HAMi's device plugin writes it, the allocation written as its
``Allocate`` reads it, and HAMi's resource names read as gpusched's GPU requests."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.basics.resources import GpuRequest
from scheduler.api.devices import hami
from scheduler.api.objects import node as api_node
from scheduler.api.objects import pod as api_pod
from tests.api import hami_annotations, objects

MIB = 2**20
UUIDS = [f"GPU-0000000{i}-5c87-89ac-b1a6-7b53aa24b0ec" for i in range(4)]
FIELD = "metadata.annotations[hami.io/node-nvidia-register]"

# As HAMi's device plugin writes it (JSON; zero fields left out, so no "index" on the first device).
REGISTER_JSON = json.dumps(
    [
        {"id": UUIDS[i], **({"index": i} if i else {}), "count": 10, "devmem": 81920, "devcore": 100}
        | {"type": "NVIDIA-NVIDIA A100-SXM4-80GB", "numa": i // 2, "mode": "hami-core", "health": True}
        for i in range(4)
    ]
)
# The older text form, seven fields a device (no index: the listing order is the index).
REGISTER_TEXT = "".join(f"{u},10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:" for u in UUIDS[:2])


def hami_node(register: str, *, allocatable_gpus: int = 40, **labels: str) -> dict[str, Any]:
    raw = objects.node("n1", gpus=allocatable_gpus)
    raw["metadata"].setdefault("annotations", {})[hami.REGISTER] = register
    raw["metadata"].setdefault("labels", {}).update(labels)
    return raw


# --- the register ----------------------------------------------------------------------------------------------


def test_the_json_register_gives_each_device_in_index_order() -> None:
    devices = hami.parse_register(REGISTER_JSON, obj="node n1")
    assert [d.uuid for d in devices] == UUIDS
    assert [d.index for d in devices] == [0, 1, 2, 3]
    first = devices[0]
    assert (first.count, first.memory_mib, first.cores, first.numa, first.health) == (10, 81920, 100, 0, True)
    assert first.model == "NVIDIA-A100-SXM4-80GB"


def test_the_text_register_of_older_device_plugins_is_read_too() -> None:
    devices = hami.parse_register(REGISTER_TEXT, obj="node n1")
    assert [(d.uuid, d.index, d.memory_mib) for d in devices] == [(UUIDS[0], 0, 32768), (UUIDS[1], 1, 32768)]
    assert devices[0].model == "Tesla-V100-PCIE-32GB"
    nine = f"{UUIDS[1]},10,1024,100,NVIDIA-X,0,false,1,hami-core:{UUIDS[0]},10,1024,100,NVIDIA-X,0,true,0,mig:"
    later = hami.parse_register(nine, obj="node n1")
    assert [(d.uuid, d.health, d.mode) for d in later] == [(UUIDS[0], True, "mig"), (UUIDS[1], False, "hami-core")]


def test_a_device_without_health_in_json_is_unhealthy_as_go_reads_it() -> None:
    (device,) = hami.parse_register(json.dumps([{"id": UUIDS[0], "count": 10, "devmem": 1}]), obj="node n1")
    assert not device.health and not device.usable


@pytest.mark.parametrize(
    "register",
    [
        "",
        "GPU-a,10,1024",
        "[{]",
        '{"id": "GPU-a"}',
        '[{"count": 10}]',
        '[{"id": "GPU-a", "devmem": -1}]',
        '[{"id": "GPU-a", "devmem": "lots"}]',
        '[{"id": "GPU-a", "health": "yes"}]',
        "GPU-a,10,1024,100,NVIDIA-X,0:",
        "GPU-a,ten,1024,100,NVIDIA-X,0,true:",
        "GPU-a,10,1024,100,NVIDIA-X,0,maybe:",
        ",10,1024,100,NVIDIA-X,0,true:",
        "GPU-a,10,1024,100,NVIDIA-X,0,true:GPU-a,10,1024,100,NVIDIA-X,0,true:",
    ],
)
def test_a_register_hami_would_not_read_is_refused_naming_node_and_field(register: str) -> None:
    with pytest.raises(InvalidObject) as err:
        hami.parse_register(register, obj="node n1")
    assert err.value.obj == "node n1"
    assert err.value.field.startswith(FIELD)


devices_strategy = st.lists(
    st.builds(
        hami.Device,
        uuid=st.uuids().map(lambda u: f"GPU-{u}"),
        index=st.integers(0, 15),
        count=st.integers(1, 100),
        memory_mib=st.integers(0, 2**31 - 1),
        cores=st.integers(0, 100),
        type=st.sampled_from(["NVIDIA-NVIDIA A100-SXM4-80GB", "NVIDIA-Tesla V100-PCIE-32GB", "NVIDIA-NVIDIA H100"]),
        numa=st.integers(0, 7),
        health=st.booleans(),
        mode=st.sampled_from(["hami-core", "mps", "mig"]),
    ),
    max_size=8,
    unique_by=lambda d: d.uuid,
)


@settings(max_examples=200, deadline=None)
@given(devices_strategy)
def test_register_round_trip_in_both_forms(devices: list[hami.Device]) -> None:
    in_order = sorted(devices, key=lambda d: d.index)  # stable: listing order among equal indices
    assert list(hami.parse_register(hami_annotations.encode_register(devices), obj="node n")) == in_order
    if devices:  # an empty text register is refused, as HAMi's decoder refuses it
        assert list(hami.parse_register(hami_annotations.encode_register_text(devices), obj="node n")) == in_order


# --- the node ----------------------------------------------------------------------------------------------------


def test_a_hami_node_has_its_devices_not_the_split_count_as_gpus() -> None:
    node = api_node.parse_node(hami_node(REGISTER_JSON, allocatable_gpus=40))
    assert node.gpus == 4  # not 40: HAMi advertises devices x split count
    assert node.gpu_memory == 81920 * MIB
    assert node.gpu_model == "NVIDIA-A100-SXM4-80GB"
    assert [d.uuid for d in node.hami_devices] == UUIDS
    assert node.problems == ()


def test_the_feature_discovery_label_names_the_model_when_there_is_one() -> None:
    node = api_node.parse_node(hami_node(REGISTER_JSON, **{"nvidia.com/gpu.product": "A100-custom"}))
    assert node.gpu_model == "A100-custom"


def test_unhealthy_and_mig_devices_are_left_out_and_told() -> None:
    devices = list(hami.parse_register(REGISTER_JSON, obj="n"))
    devices[1] = hami.Device(**{**_fields(devices[1]), "health": False})
    devices[2] = hami.Device(**{**_fields(devices[2]), "mode": "mig", "memory_mib": 40960})
    node = api_node.parse_node(hami_node(hami_annotations.encode_register(devices)))
    assert [d.uuid for d in node.hami_devices] == [UUIDS[0], UUIDS[3]]
    assert node.gpus == 2
    (problem,) = node.problems
    assert UUIDS[1] in problem.reason and UUIDS[2] in problem.reason and problem.field == FIELD


def test_devices_of_different_memory_count_as_the_smallest() -> None:
    devices = [hami.Device(uuid=UUIDS[0], memory_mib=40960), hami.Device(uuid=UUIDS[1], index=1, memory_mib=81920)]
    assert api_node.parse_node(hami_node(hami_annotations.encode_register(devices))).gpu_memory == 40960 * MIB


def test_an_unreadable_register_leaves_the_node_usable_without_gpus() -> None:
    node = api_node.parse_node(hami_node("garbage", allocatable_gpus=40))
    assert node.gpus == 0 and node.hami_devices == ()
    assert node.allocatable["cpu"] == 32000
    (problem,) = node.problems
    assert (problem.obj, problem.field) == ("node n1", FIELD)


def test_no_gpus_while_the_device_plugin_advertises_none() -> None:
    node = api_node.parse_node(hami_node(REGISTER_JSON, allocatable_gpus=0))
    assert node.gpus == 0


def _fields(device: hami.Device) -> dict[str, Any]:
    return {name: getattr(device, name) for name in hami.Device.__slots__}


# --- the pod's annotations ---------------------------------------------------------------------------------------


DEVICES = hami.parse_register(REGISTER_JSON, obj="node n1")


def test_whole_gpus_are_dealt_to_containers_in_order_with_all_their_memory() -> None:
    gpu = GpuRequest(count=3, milli=1000)
    containers = hami.allocation(DEVICES, (3, 1, 2), (2, 0, 1), gpu, obj="pod ns/p")
    assert containers == (
        (hami.ContainerDevice(UUIDS[3], 81920, 100), hami.ContainerDevice(UUIDS[1], 81920, 100)),
        (),
        (hami.ContainerDevice(UUIDS[2], 81920, 100),),
    )
    assert hami.encode_pod_devices(containers) == (
        f"{UUIDS[3]},NVIDIA,81920,100:{UUIDS[1]},NVIDIA,81920,100:;;{UUIDS[2]},NVIDIA,81920,100:;"
    )


def test_a_shared_gpu_gets_its_compute_share_in_percent_and_its_memory_in_mib() -> None:
    gpu = GpuRequest(count=1, milli=255, memory=3000 * MIB + 1)
    (only,) = hami.allocation(DEVICES, (2,), (1,), gpu, obj="pod ns/p")
    assert only == (hami.ContainerDevice(UUIDS[2], memory_mib=3001, cores=26),)


def test_a_shared_gpu_without_memory_is_not_capped() -> None:
    (only,) = hami.allocation(DEVICES, (0,), (1,), GpuRequest(count=1, milli=500), obj="pod ns/p")
    assert only == (hami.ContainerDevice(UUIDS[0], memory_mib=81920, cores=50),)


@pytest.mark.parametrize(("gpu_ids", "per_container"), [((0, 1), (1,)), ((0,), (1, 1)), ((7,), (1,))])
def test_gpus_that_cannot_be_dealt_out_are_refused(gpu_ids: tuple[int, ...], per_container: tuple[int, ...]) -> None:
    with pytest.raises(InvalidObject) as err:
        hami.allocation(DEVICES, gpu_ids, per_container, GpuRequest(count=len(gpu_ids), milli=1000), obj="pod ns/p")
    assert err.value.obj == "pod ns/p"


def test_pod_annotations_are_what_the_device_plugin_finds_the_pod_by() -> None:
    containers = ((hami.ContainerDevice(UUIDS[0], 81920, 100),),)
    annotations = hami.pod_annotations("n1", containers, now=1716199325.7)
    assert annotations == {
        "hami.io/vgpu-devices-to-allocate": f"{UUIDS[0]},NVIDIA,81920,100:;",
        "hami.io/vgpu-devices-allocated": f"{UUIDS[0]},NVIDIA,81920,100:;",
        "hami.io/vgpu-node": "n1",
        "hami.io/vgpu-time": "1716199325",
        "hami.io/bind-time": "1716199325",
        "hami.io/bind-phase": "allocating",
    }


container_devices = st.lists(
    st.lists(
        st.builds(
            hami.ContainerDevice,
            uuid=st.uuids().map(lambda u: f"GPU-{u}"),
            memory_mib=st.integers(0, 2**31 - 1),
            cores=st.integers(0, 100),
        ),
        max_size=4,
    ).map(tuple),
    max_size=5,
).map(tuple)


@settings(max_examples=200, deadline=None)
@given(container_devices)
def test_pod_devices_round_trip(containers: tuple[tuple[hami.ContainerDevice, ...], ...]) -> None:
    encoded = hami.encode_pod_devices(containers)
    assert hami_annotations.decode_pod_devices(encoded) == containers


# --- HAMi's resource names on pods -------------------------------------------------------------------------------


def hami_pod(*, gpus: int = 1, annotations: dict[str, str] | None = None, **per_gpu: str) -> dict[str, Any]:
    """A one-container pod asking ``gpus`` in limits and HAMi's per-device resources in requests."""
    names = {"cores": hami.RESOURCE_CORES, "mem": hami.RESOURCE_MEMORY, "percent": hami.RESOURCE_MEMORY_PERCENTAGE}
    return objects.pod("p", gpus=gpus, annotations=annotations, extra={names[k]: v for k, v in per_gpu.items()})


def test_gpucores_and_gpumem_make_a_shared_gpu() -> None:
    pod = api_pod.parse_pod(hami_pod(cores="30", mem="3000"))
    assert pod.gpu == GpuRequest(count=1, milli=300, memory=3000 * MIB)
    assert pod.gpu_per_container == (1,)
    assert not set(hami.RESOURCES) & set(pod.resources), "never counted as node resources"


def test_gpucores_100_or_nothing_below_a_device_is_whole_gpus() -> None:
    assert api_pod.parse_pod(hami_pod(gpus=2, cores="100")).gpu == GpuRequest(count=2, milli=1000)
    assert api_pod.parse_pod(hami_pod(gpus=2, percent="100")).gpu == GpuRequest(count=2, milli=1000)


def test_gpu_milli_with_one_device_plugin_gpu_is_the_shared_gpu() -> None:
    pod = api_pod.parse_pod(objects.pod("p", gpus=1, milli=250, gpu_memory="4Gi"))
    assert pod.gpu == GpuRequest(count=1, milli=250, memory=4 * 2**30)
    assert pod.gpu_per_container == (1,)


def test_gpumem_with_gpu_milli_is_the_shared_gpus_memory() -> None:
    pod = api_pod.parse_pod(hami_pod(mem="2048", annotations={"gpusched.io/gpu-milli": "200"}))
    assert pod.gpu == GpuRequest(count=1, milli=200, memory=2048 * MIB)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (hami_pod(mem="3000"), "spec.containers[0].resources.requests.nvidia.com/gpumem"),
        (hami_pod(percent="50", cores="50"), "spec.containers[0].resources.requests.nvidia.com/gpumem-percentage"),
        (hami_pod(gpus=2, cores="50"), "spec.containers[0].resources"),
    ],
)
def test_shares_gpusched_does_not_honour_are_refused_for_its_own_pods(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(api_pod.Unsupported) as err:
        api_pod.parse_pod(raw)
    assert err.value.field == field


def test_a_bound_pod_with_such_a_share_holds_whole_gpus() -> None:
    raw = hami_pod(gpus=2, cores="50", mem="3000")
    raw["spec"]["nodeName"] = "n1"
    assert api_pod.parse_pod(raw).gpu == GpuRequest(count=2, milli=1000)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (hami_pod(cores="150"), "spec.containers[0].resources.requests.nvidia.com/gpucores"),
        (hami_pod(gpus=0, cores="50"), "spec.containers[0].resources"),
        (
            hami_pod(cores="50", annotations={"gpusched.io/gpu-milli": "500"}),
            "metadata.annotations[gpusched.io/gpu-milli]",
        ),
        (hami_pod(cores="lots"), "spec.containers[0].resources.requests.nvidia.com/gpucores"),
    ],
)
def test_bad_hami_requests_name_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObject) as err:
        api_pod.parse_pod(raw)
    assert err.value.field == field and err.value.obj == "pod default/p"


def test_two_containers_share_out_the_pods_gpus() -> None:
    raw = objects.pod("p", gpus=2)
    second = {"name": "side", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    raw["spec"]["containers"].insert(0, {"name": "cpu", "image": "x"})
    raw["spec"]["containers"].append(second)
    pod = api_pod.parse_pod(raw)
    assert pod.gpu.count == 3 and pod.gpu_per_container == (0, 2, 1)
