"""NodeResourceTopology objects as NFD's topology-updater publishes them: zones, amounts in scheduler units, the
kubelet's policy and scope (and the deprecated list), and bad input named by its field."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.devices import numa, topology_manager
from scheduler.api.objects import pod as api_pod


def nrt(name: str = "gpu-0", *, zones: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    """A NodeResourceTopology of two NUMA zones of 4 GPUs, 32 CPUs and 256Gi each, unless ``zones`` says otherwise."""
    if zones is None:
        zones = [zone(i, gpus=4, cpus=32, memory="256Gi") for i in range(2)]
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": name},
        "zones": zones,
        **extra,
    }


def zone(number: int, *, gpus: int, cpus: int, memory: str, free_gpus: int | None = None) -> dict[str, Any]:
    free = gpus if free_gpus is None else free_gpus
    return {
        "name": f"node-{number}",
        "type": "Node",
        "costs": [{"name": f"node-{i}", "value": 10 if i == number else 20} for i in range(2)],
        "resources": [
            {"name": "cpu", "capacity": str(cpus), "allocatable": str(cpus - 2), "available": str(cpus - 2)},
            {"name": "memory", "capacity": memory, "allocatable": memory, "available": memory},
            {"name": "nvidia.com/gpu", "capacity": str(gpus), "allocatable": str(gpus), "available": str(free)},
        ],
    }


def test_zones_their_amounts_and_the_policy_are_read() -> None:
    attributes = [
        {"name": "topologyManagerPolicy", "value": "single-numa-node"},
        {"name": "topologyManagerScope", "value": "pod"},
    ]
    zones = [zone(1, gpus=4, cpus=32, memory="256Gi", free_gpus=1), zone(0, gpus=4, cpus=32, memory="256Gi")]
    zones.append({"name": "cache-0", "type": "L3Cache"})  # not a NUMA node
    parsed = numa.parse_node_resource_topology(nrt(zones=zones, attributes=attributes))
    assert parsed.node == "gpu-0"
    assert (parsed.policy, parsed.scope) == (numa.Policy.SINGLE_NUMA_NODE, numa.Scope.POD) and parsed.enforced
    assert [z.number for z in parsed.zones] == [0, 1]  # sorted by NUMA node number, the bit each has in a mask
    first = parsed.zones[0]
    assert first.capacity == {"cpu": 32_000, "memory": 256 * 2**30, "nvidia.com/gpu": 4}
    assert first.allocatable["cpu"] == 30_000 and parsed.zones[1].available["nvidia.com/gpu"] == 1
    assert first.costs == {"node-0": 10, "node-1": 20}


def test_the_deprecated_policy_list_is_read_and_the_attributes_win() -> None:
    legacy = numa.parse_node_resource_topology(nrt(topologyPolicies=["SingleNUMANodeContainerLevel"]))
    assert (legacy.policy, legacy.scope) == (numa.Policy.SINGLE_NUMA_NODE, numa.Scope.CONTAINER)
    both = nrt(
        topologyPolicies=["SingleNUMANodePodLevel"],
        attributes=[{"name": "topologyManagerPolicy", "value": "restricted"}],
    )
    parsed = numa.parse_node_resource_topology(both)
    assert (parsed.policy, parsed.scope) == (numa.Policy.RESTRICTED, numa.Scope.POD)


def test_a_node_without_a_policy_has_no_numa_rule() -> None:
    parsed = numa.parse_node_resource_topology(nrt())
    assert parsed.policy == numa.Policy.NONE and not parsed.enforced
    best_effort = numa.parse_node_resource_topology(nrt(topologyPolicies=["BestEffort"]))
    assert not best_effort.enforced  # best-effort never refuses: the zones only steer


@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        (
            nrt(attributes=[{"name": "topologyManagerPolicy", "value": "strict"}]),
            "attributes[topologyManagerPolicy]",
            "unknown policy 'strict'",
        ),
        (
            nrt(attributes=[{"name": "topologyManagerScope", "value": "node"}]),
            "attributes[topologyManagerScope]",
            "unknown scope 'node'",
        ),
        (nrt(topologyPolicies=["Strict"]), "topologyPolicies[0]", "unknown topology policy"),
        (nrt(zones=[{"name": "numa", "type": "Node"}]), "zones[0].name", "does not end in its NUMA node number"),
        (
            nrt(
                zones=[
                    {
                        "name": "node-0",
                        "type": "Node",
                        "resources": [{"name": "cpu", "capacity": "4", "allocatable": "4"}],
                    }
                ]
            ),
            "zones[0].resources[0].available",
            "has no available",
        ),
        (
            nrt(
                zones=[
                    {
                        "name": "node-0",
                        "type": "Node",
                        "resources": [{"name": "cpu", "capacity": "-4", "allocatable": "4", "available": "4"}],
                    }
                ]
            ),
            "zones[0].resources[0].capacity.cpu",
            "negative",
        ),
        (
            nrt(zones=[zone(0, gpus=4, cpus=8, memory="1Gi"), zone(0, gpus=4, cpus=8, memory="1Gi")]),
            "zones",
            "share a NUMA node number",
        ),
    ],
)
def test_bad_input_names_the_object_and_the_field(raw: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(InvalidObject) as err:
        numa.parse_node_resource_topology(raw)
    assert err.value.obj == "noderesourcetopology gpu-0" and err.value.field == field and words in err.value.reason


def test_koordinator_policies_from_the_annotation_or_the_label() -> None:
    spec = '{"numaTopologyPolicy": "SingleNUMANode"}'
    assert numa.koordinator_policy(spec, obj="pod a", field="f") == numa.Policy.SINGLE_NUMA_NODE
    assert numa.koordinator_policy("Restricted", obj="node n", field="f") == numa.Policy.RESTRICTED
    with pytest.raises(InvalidObject, match="unknown NUMA topology policy 'Single'"):
        numa.koordinator_policy("Single", obj="node n", field="f")
    with pytest.raises(InvalidObject, match="not JSON"):
        numa.koordinator_policy("{nope", obj="pod a", field="f")


def _pod(*, qos: str = "", limits: bool = True, annotation: str | None = None) -> dict[str, Any]:
    resources_ = {"requests": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "2"}}
    if limits:
        resources_["limits"] = {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "2"}
    pod: dict[str, Any] = {
        "metadata": {"name": "train", "namespace": "ml", "annotations": {}},
        "spec": {
            "schedulerName": "gpusched",
            "initContainers": [
                {"name": "fetch", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "proxy", "restartPolicy": "Always", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
            ],
            "containers": [{"name": "main", "resources": resources_}],
        },
        "status": {"qosClass": qos} if qos else {},
    }
    if annotation is not None:
        pod["metadata"]["annotations"][numa.KOORDINATOR_POD_SPEC] = annotation
    return pod


def test_a_pod_says_what_the_topology_manager_aligns_of_it() -> None:
    ask = api_pod.parse_pod(_pod()).numa
    # The sidecar runs beside the app container, so it is aligned as one; the init container runs before them.
    assert ask.containers == (
        (("cpu", 4000), ("memory", 8 * 2**30), ("nvidia.com/gpu", 2)),
        (("cpu", 1000), ("memory", 2**30)),
    )
    assert ask.init_containers == ((("cpu", 1000), ("memory", 2**30)),)
    assert ask.guaranteed and ask.policy is None
    assert not api_pod.parse_pod(_pod(limits=False)).numa.guaranteed  # requests without limits: Burstable
    assert not api_pod.parse_pod(_pod(qos="Burstable")).numa.guaranteed  # the API server's class wins
    asked = api_pod.parse_pod(_pod(annotation='{"numaTopologyPolicy": "SingleNUMANode"}')).numa
    assert asked.policy == numa.Policy.SINGLE_NUMA_NODE
    # Replicas keep one shape: the ask is hashable.
    assert hash(ask) == hash(api_pod.parse_pod(_pod()).numa)


def test_a_bad_policy_annotation_refuses_a_pending_pod_and_is_dropped_from_a_bound_one() -> None:
    with pytest.raises(InvalidObject) as err:
        api_pod.parse_pod(_pod(annotation="Strict"))
    assert err.value.field == f"metadata.annotations[{numa.KOORDINATOR_POD_SPEC}]"
    bound = _pod(annotation="Strict")
    bound["spec"]["nodeName"] = "gpu-0"
    pod, problems = api_pod.parse_bound_pod(bound)
    assert pod.node_name == "gpu-0" and pod.numa.policy is None and len(problems) == 1


def test_one_container_pods_share_their_ask_and_their_requests_are_the_pods() -> None:
    raw = _pod()
    raw["spec"].pop("initContainers")
    first, second = api_pod.parse_pod(raw), api_pod.parse_pod({**raw, "metadata": {**raw["metadata"], "name": "b"}})
    assert first.numa is second.numa and first.numa.one_container and first.numa.guaranteed
    zones = numa.NodeZones(
        "gpu-0",
        numa.Policy.SINGLE_NUMA_NODE,
        numa.Scope.CONTAINER,
        (numa.Zone("node-0", 0, {"nvidia.com/gpu": 4, "cpu": 8000}, {}, {"nvidia.com/gpu": 1, "cpu": 8000}),),
    )
    refused = topology_manager.admit_pod(zones, first)
    assert not refused.admitted and refused.why == "no NUMA zone has 2 nvidia.com/gpu (single-numa-node)"


def test_the_pods_fingerprint_is_read_where_it_covers_every_pod() -> None:
    fingerprint = {"name": numa.FINGERPRINT, "value": "pfp0v001607b76a0e9d3aeb4"}
    assert numa.parse_node_resource_topology(nrt(attributes=[fingerprint])).pods_fingerprint == fingerprint["value"]
    # Another method fingerprints only some of the pods (by the agent's own rule): not read.
    other = [fingerprint, {"name": numa.FINGERPRINT_METHOD, "value": "with-exclusive-resources"}]
    assert numa.parse_node_resource_topology(nrt(attributes=other)).pods_fingerprint is None
    assert numa.parse_node_resource_topology(nrt()).pods_fingerprint is None
