"""Dynamic Resource Allocation through ``gpusched run`` on a real API server (docs/devices.md): kwok nodes publish
their GPUs in ResourceSlices as NVIDIA's DRA driver does, pods ask for them through ResourceClaimTemplates (the
real kube-controller-manager's resourceclaim controller makes a claim per pod) and a shared ResourceClaim.
gpusched writes each allocation and ``reservedFor`` before it binds; the devices are the tightest set, a
``matchAttribute`` on the PCIe root holds, a gang of DRA pods is placed whole, nothing is given twice, the GPUs
count in the queue's status and a limit, and a deleted pod's devices go to the next pod.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.api import dra_objects as dra
from tests.e2e import kube as kube_mod
from tests.e2e.kube import Scenario, node_of
from tests.e2e.localcluster import APIError

pytestmark = pytest.mark.e2e

API = "/apis/resource.k8s.io/v1"


class Devices:
    """The DRA objects of one test (a class, slices, templates, claims), deleted when it ends."""

    def __init__(self, scenario: Scenario) -> None:
        self.s = scenario
        self.gpu_class = f"{scenario.name[:40].rstrip('-')}-gpu"
        self.made: list[str] = []

    def post(self, path: str, body: dict[str, Any], *, cluster_scoped: bool = True) -> None:
        self.s.kube.request("POST", path, body)
        if cluster_scoped:
            self.made.append(f"{path}/{body['metadata']['name']}")

    def setup(self, nodes: list[str], gpus: int = 8) -> None:
        self.post(f"{API}/deviceclasses", dra.gpu_class(self.gpu_class))
        for node in nodes:
            self.post(f"{API}/resourceslices", dra.gpu_slice(node, gpus, name=f"{node}-gpus"))

    def template(self, name: str, count: int, *, same_root: bool = False) -> None:
        spec = dra.claim_spec(
            dra.request(count=count, device_class=self.gpu_class), same=dra.PCIE_ROOT if same_root else ""
        )
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {"spec": spec},
        }
        self.post(f"{API}/namespaces/{self.s.namespace}/resourceclaimtemplates", body, cluster_scoped=False)

    def claim(self, name: str, count: int) -> None:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": dra.claim_spec(dra.request(count=count, device_class=self.gpu_class)),
        }
        self.post(f"{API}/namespaces/{self.s.namespace}/resourceclaims", body, cluster_scoped=False)

    def claims(self) -> dict[str, dict[str, Any]]:
        items = self.s.kube.request("GET", f"{API}/namespaces/{self.s.namespace}/resourceclaims")["items"]
        return {c["metadata"]["name"]: c for c in items}

    def cleanup(self) -> None:
        for path in reversed(self.made):
            with contextlib.suppress(APIError):
                self.s.kube.request("DELETE", path)


@pytest.fixture
def devices(sched: Scenario) -> Iterator[Devices]:
    d = Devices(sched)
    try:
        yield d
    finally:
        d.cleanup()


def dra_pod(
    name: str, *, template: str = "", claim: str = "", queue: str | None = None, group: str = ""
) -> dict[str, Any]:
    manifest = kube_mod.pod(name, queue=queue)
    entry = {"name": "gpus", **({"resourceClaimTemplateName": template} if template else {"resourceClaimName": claim})}
    manifest["spec"]["resourceClaims"] = [entry]
    manifest["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    if group:
        manifest["metadata"].setdefault("labels", {})[kube_mod.LABEL_POD_GROUP] = group
    return manifest


def claim_of(pod: dict[str, Any], devices: Devices) -> dict[str, Any]:
    statuses = pod.get("status", {}).get("resourceClaimStatuses") or []
    named = {s["name"]: s.get("resourceClaimName") for s in statuses}
    name = named.get("gpus") or pod["spec"]["resourceClaims"][0].get("resourceClaimName")
    return devices.claims()[name]


def allocated(claim: dict[str, Any]) -> list[str]:
    return [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]


def root_of(device: str) -> int:
    return int(device.split("-")[1]) // 4


def test_claims_get_their_devices_before_the_binding_and_free_them_after_the_pod(
    sched: Scenario, devices: Devices
) -> None:
    names = [f"{sched.name[:20]}-d{i}" for i in range(3)]
    sched.add_nodes([kube_mod.gpu_node(n, gpus=0) for n in names])
    devices.setup(names)
    queue = f"{sched.name}-q"
    sched.create_queue(kube_mod.queue(queue, limit={"nvidia.com/gpu": "20"}))
    for count in (1, 2, 8):
        devices.template(f"gpu-{count}", count)
    devices.template("gpu-4-one-root", 4, same_root=True)
    devices.claim("shared", 1)
    sched.create_podgroup(kube_mod.podgroup("pair", min_member=2, queue=queue))
    sched.start_gpusched()

    pods = {
        "one": dra_pod("one", template="gpu-1", queue=queue),
        "two": dra_pod("two", template="gpu-2", queue=queue),
        "four": dra_pod("four", template="gpu-4-one-root", queue=queue),
        "eight": dra_pod("eight", template="gpu-8", queue=queue),
        "share-a": dra_pod("share-a", claim="shared", queue=queue),
        "share-b": dra_pod("share-b", claim="shared", queue=queue),
        "gang-0": dra_pod("gang-0", template="gpu-2", queue=queue, group="pair"),
        "gang-1": dra_pod("gang-1", template="gpu-2", queue=queue, group="pair"),
    }
    for manifest in pods.values():
        sched.create_pod(manifest)
    bound = {p["metadata"]["name"]: p for p in sched.wait_bound(list(pods), timeout=120)}

    wanted = {"one": 1, "two": 2, "four": 4, "eight": 8, "share-a": 1, "share-b": 1, "gang-0": 2, "gang-1": 2}
    held: dict[tuple[str, str], str] = {}
    for name, pod in bound.items():
        claim = claim_of(pod, devices)
        got = allocated(claim)
        assert len(got) == wanted[name], (name, claim["status"])
        node = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"]
        assert node == [node_of(pod)], (name, node)
        assert pod["metadata"]["uid"] in {r["uid"] for r in claim["status"]["reservedFor"]}
        assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
        if name != "share-b":
            for device in got:
                assert held.setdefault((node_of(pod), device), name) == name, f"{device} given twice"
            # The pod's gpusched.io/gpu-ids are the devices' indices: the GPUs the queue and the cache count.
            assert kube_mod.gpu_ids_of(pod) == tuple(sorted(int(d.split("-")[1]) for d in got)), name
    # One PCIe root for the constrained claim; the tightest set for the others (2 GPUs on one root).
    assert len({root_of(d) for d in allocated(claim_of(bound["four"], devices))}) == 1
    assert len({root_of(d) for d in allocated(claim_of(bound["two"], devices))}) == 1
    assert node_of(bound["share-a"]) == node_of(bound["share-b"])
    assert len(claim_of(bound["share-a"], devices)["status"]["reservedFor"]) == 2

    # The queue counts the DRA GPUs: 1 + 2 + 4 + 8 + 1 (the shared claim, once) + 2 + 2.
    def usage() -> dict[str, Any] | None:
        status = sched.kube.request("GET", kube_mod.Kube.custom_path("queues", name=queue)).get("status", {})
        return status if status.get("allocated", {}).get("nvidia.com/gpu") == "20" else None

    kube_mod.wait_until(usage, timeout=30, what="queue allocated 20 GPUs", describe=sched.describe)
    # The limit holds: a 1-GPU pod more waits although 4 GPUs are free.
    sched.create_pod(dra_pod("over", template="gpu-1", queue=queue))
    sched.stays_unbound(["over"], seconds=4)

    # Deleting "eight" frees its claim (kube-controller-manager deletes a pod's claim; its devices are free) and
    # its queue room: "over" binds, and a new 8-GPU pod gets the same node's GPUs back.
    eight_claim = claim_of(bound["eight"], devices)["metadata"]["name"]
    sched.delete_pod("eight")
    kube_mod.wait_until(lambda: eight_claim not in devices.claims(), timeout=60, what="the deleted pod's claim gone")
    sched.wait_bound(["over"], timeout=60)
    sched.delete_pod("over")
    sched.create_pod(dra_pod("eight-again", template="gpu-8", queue=queue))
    (again,) = sched.wait_bound(["eight-again"], timeout=60)
    assert node_of(again) == node_of(bound["eight"])
    assert len(allocated(claim_of(again, devices))) == 8


def test_a_claim_no_node_can_meet_waits_with_the_reason(sched: Scenario, devices: Devices) -> None:
    name = f"{sched.name[:20]}-n"
    sched.add_nodes([kube_mod.gpu_node(name, gpus=0)])
    devices.setup([name], gpus=4)
    devices.template("gpu-4-one-root", 4, same_root=True)
    devices.template("gpu-8", 8)
    sched.start_gpusched()
    # Four GPUs under one PCIe root exist (gpu-0..3); eight do not exist at all.
    sched.create_pod(dra_pod("fits", template="gpu-4-one-root"))
    sched.wait_bound(["fits"], timeout=60)
    sched.create_pod(dra_pod("too-big", template="gpu-8"))
    # First the pod waits for its claim to be made from the template; then it cannot have eight GPUs anywhere.
    wait_message(sched, "too-big", "1 Insufficient nvidia.com/gpu")
    sched.create_pod(dra_pod("no-template", template="missing"))
    wait_message(
        sched, "no-template", 'waiting for the resourceclaim controller to create the ResourceClaim for "gpus"'
    )


def wait_message(sched: Scenario, pod: str, text: str) -> None:
    def found() -> str | None:
        for event in sched.kube.events(sched.namespace, name=pod):
            if event.get("reason") == "FailedScheduling" and text in event.get("message", ""):
                return str(event["message"])
        return None

    kube_mod.wait_until(found, timeout=60, what=f"FailedScheduling of {pod} saying {text!r}", describe=sched.describe)


def test_dynamic_mig_partitions_never_over_consume_and_keep_room(sched: Scenario, devices: Devices) -> None:
    # One H100 published as NVIDIA's driver publishes dynamic MIG (partitionable devices, counter sets): the API
    # server takes the slices, gpusched writes allocations it accepts, and no counter is ever used twice.
    name = f"{sched.name[:20]}-m"
    sched.add_nodes([kube_mod.gpu_node(name, gpus=0)])
    devices.post(f"{API}/deviceclasses", dra.mig_class() | {"metadata": {"name": f"{devices.gpu_class}-mig"}})
    devices.post(f"{API}/deviceclasses", dra.gpu_class(devices.gpu_class))
    for raw in dra.mig_slices(name, 1):
        devices.post(f"{API}/resourceslices", raw)
    for label, request in (
        ("mig-1g", dra.mig_request("1g.10gb", "gpus")),
        ("mig-4g", dra.mig_request("4g.40gb", "gpus")),
        ("whole", dra.request(count=1, device_class=devices.gpu_class)),
    ):
        if label != "whole":
            request["exactly"]["deviceClassName"] = f"{devices.gpu_class}-mig"
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": label},
            "spec": {"spec": dra.claim_spec(request)},
        }
        devices.post(f"{API}/namespaces/{sched.namespace}/resourceclaimtemplates", body, cluster_scoped=False)
    sched.start_gpusched()
    sched.create_pod(dra_pod("small", template="mig-1g"))
    (small,) = sched.wait_bound(["small"], timeout=60)
    # The 1g goes where it keeps the 4g possible (memory slices 0-3 stay free together).
    assert allocated(claim_of(small, devices)) == ["gpu-0-mig-1g-10gb-6"]
    sched.create_pod(dra_pod("big", template="mig-4g"))
    (big,) = sched.wait_bound(["big"], timeout=60)
    assert allocated(claim_of(big, devices)) == ["gpu-0-mig-4g-40gb-0"]
    # The full GPU consumes every counter of its set: it is not handed out while a partition holds some (the
    # partitions hold their shares of its GPU slot, so the GPU count says so first).
    sched.create_pod(dra_pod("whole", template="whole"))
    wait_message(sched, "whole", "1 Insufficient nvidia.com/gpu")
    sched.delete_pod("small")
    sched.delete_pod("big")
    sched.wait_bound(["whole"], timeout=90)


def test_mig_claims_count_as_their_share_of_a_gpu_and_a_queues_limit_stops_one(
    sched: Scenario, devices: Devices
) -> None:
    # Two H100s as dynamic MIG; a queue of at most 1 GPU. A 4g and a 3g are 4/7 and 3/7 of a GPU (571 + 428 milli,
    # rounded down): 0.999 GPUs in the queue; a 1g more would be 1.141, so it waits although the second GPU is free.
    name = f"{sched.name[:20]}-q"
    sched.add_nodes([kube_mod.gpu_node(name, gpus=0)])
    devices.post(f"{API}/deviceclasses", dra.mig_class() | {"metadata": {"name": f"{devices.gpu_class}-mig"}})
    for raw in dra.mig_slices(name, 2):
        devices.post(f"{API}/resourceslices", raw)
    for profile in ("1g.10gb", "3g.40gb", "4g.40gb"):
        request = dra.mig_request(profile, "gpus")
        request["exactly"]["deviceClassName"] = f"{devices.gpu_class}-mig"
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": f"mig-{profile[:2]}"},
            "spec": {"spec": dra.claim_spec(request)},
        }
        devices.post(f"{API}/namespaces/{sched.namespace}/resourceclaimtemplates", body, cluster_scoped=False)
    queue = f"{sched.name}-q"
    sched.create_queue(kube_mod.queue(queue, limit={"nvidia.com/gpu": "1"}))
    sched.start_gpusched()
    sched.create_pod(dra_pod("four", template="mig-4g", queue=queue))
    sched.create_pod(dra_pod("three", template="mig-3g", queue=queue))
    bound = {p["metadata"]["name"]: p for p in sched.wait_bound(["four", "three"], timeout=60)}
    four, three = bound["four"], bound["three"]
    # Both on one GPU (the fullest it fits), each holding its share of that GPU's slot, in its binding too.
    assert four["metadata"]["annotations"]["gpusched.io/gpu-milli"] == "571"
    assert three["metadata"]["annotations"]["gpusched.io/gpu-milli"] == "428"
    assert (
        four["metadata"]["annotations"]["gpusched.io/gpu-ids"]
        == three["metadata"]["annotations"]["gpusched.io/gpu-ids"]
    )

    def usage() -> dict[str, Any] | None:
        status = sched.kube.request("GET", kube_mod.Kube.custom_path("queues", name=queue)).get("status", {})
        return status if status.get("allocated", {}).get("nvidia.com/gpu") == "0.999" else None

    kube_mod.wait_until(usage, timeout=30, what="queue allocated 0.999 GPUs", describe=sched.describe)
    sched.create_pod(dra_pod("one", template="mig-1g", queue=queue))
    wait_message(sched, "one", f"queue '{queue}' would hold")
    sched.stays_unbound(["one"], seconds=3)
    # The 3g leaves: its share goes back to the queue, and the 1g runs.
    sched.delete_pod("three")
    (one,) = sched.wait_bound(["one"], timeout=90)
    assert one["metadata"]["annotations"]["gpusched.io/gpu-milli"] == "142"


def test_nvidias_quickstart_selector_and_a_bare_gpu_pod_on_dra_nodes(sched: Scenario, devices: Devices) -> None:
    name = f"{sched.name[:20]}-q"
    sched.add_nodes([kube_mod.gpu_node(name, gpus=0)])
    devices.post(f"{API}/deviceclasses", dra.gpu_class(devices.gpu_class))
    devices.post(f"{API}/resourceslices", dra.gpu_slice(name, 2, product="NVIDIA A100-SXM4-40GB", name=f"{name}-gpus"))
    # NVIDIA's gpu-test6 selects its GPU with Kubernetes' CEL strings library (lowerAscii).
    selector = "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*a100.*$')"
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "a100"},
        "spec": {"spec": dra.claim_spec(dra.request(device_class=devices.gpu_class, selectors=[selector]))},
    }
    devices.post(f"{API}/namespaces/{sched.namespace}/resourceclaimtemplates", body, cluster_scoped=False)
    sched.start_gpusched()
    sched.create_pod(dra_pod("selected", template="a100"))
    (pod,) = sched.wait_bound(["selected"], timeout=60)
    assert len(allocated(claim_of(pod, devices))) == 1
    # A pod asking nvidia.com/gpu with no claim: no device plugin serves it on this node, so a kubelet would refuse
    # it; it is never bound there.
    sched.create_pod(kube_mod.pod("bare", gpus=1))
    wait_message(sched, "bare", "Insufficient nvidia.com/gpu")
    assert not sched.pod("bare")["spec"].get("nodeName")


def test_distinct_roots_and_device_taints_as_the_api_server_takes_them(sched: Scenario, devices: Devices) -> None:
    # A slice with a tainted device and claims with distinctAttribute and tolerations, all accepted by the API
    # server: the allocation gpusched writes spreads over two PCIe roots, and only a tolerant request gets the
    # tainted GPU.
    name = f"{sched.name[:20]}-t"
    sched.add_nodes([kube_mod.gpu_node(name, gpus=0)])
    devices.post(f"{API}/deviceclasses", dra.gpu_class(devices.gpu_class))
    raw = dra.gpu_slice(name, 8, name=f"{name}-gpus")
    for device in raw["spec"]["devices"][4:]:  # the second PCIe root, but for gpu-7
        if device["name"] != "gpu-7":
            device["taints"] = [{"key": "example.com/unhealthy", "value": "ecc", "effect": "NoSchedule"}]
    devices.post(f"{API}/resourceslices", raw)
    tolerate = [{"key": "example.com/unhealthy", "operator": "Exists", "effect": "NoSchedule"}]
    for label, request, distinct in (
        ("spread", dra.request(count=2, device_class=devices.gpu_class), dra.PCIE_ROOT),
        ("tolerant", dra.request(count=5, device_class=devices.gpu_class, tolerations=tolerate), ""),
    ):
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": label},
            "spec": {"spec": dra.claim_spec(request, distinct=distinct)},
        }
        devices.post(f"{API}/namespaces/{sched.namespace}/resourceclaimtemplates", body, cluster_scoped=False)
    sched.start_gpusched()
    sched.create_pod(dra_pod("spread", template="spread"))
    (spread,) = sched.wait_bound(["spread"], timeout=60)
    got = allocated(claim_of(spread, devices))
    # GPU order would give gpu-4; gpu-7 is the only untainted GPU of the second root.
    assert len({root_of(d) for d in got}) == 2 and "gpu-7" in got
    # Three untainted GPUs are left on the first root: five fit only with the tainted ones, which this request
    # tolerates.
    sched.create_pod(dra_pod("tolerant", template="tolerant"))
    (tolerant,) = sched.wait_bound(["tolerant"], timeout=60)
    got = allocated(claim_of(tolerant, devices))
    assert len(got) == 5 and {"gpu-4", "gpu-5", "gpu-6"} & set(got)


def test_extended_resources_backed_by_dra_get_a_claim_before_the_binding(sched: Scenario, devices: Devices) -> None:
    # NVIDIA's chart maps nvidia.com/gpu to its class (extendedResourceName); the node has its GPUs only through
    # DRA. A pod asking nvidia.com/gpu, or the class's implicit name, gets a claim made for it as kube-scheduler
    # makes one: created, allocated, reserved and named in the pod's status before the pod is bound.
    name = f"{sched.name[:20]}-x"
    sched.add_nodes([kube_mod.gpu_node(name, gpus=0)])
    mapped = dra.gpu_class(devices.gpu_class)
    mapped["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    devices.post(f"{API}/deviceclasses", mapped)
    devices.post(f"{API}/resourceslices", dra.gpu_slice(name, 4, name=f"{name}-gpus"))
    queue = f"{sched.name}-q"
    sched.create_queue(kube_mod.queue(queue))
    sched.start_gpusched()
    implicit = f"deviceclass.resource.kubernetes.io/{devices.gpu_class}"
    one = kube_mod.pod("implicit", queue=queue)
    one["spec"]["containers"][0]["resources"]["limits"] = {implicit: "1"}
    sched.create_pod(kube_mod.pod("two", gpus=2, queue=queue))
    sched.create_pod(one)
    bound = {p["metadata"]["name"]: p for p in sched.wait_bound(["two", "implicit"], timeout=60)}
    claims = devices.claims()
    held: set[str] = set()
    for pod_name, resource, count in (("two", "nvidia.com/gpu", 2), ("implicit", implicit, 1)):
        pod = bound[pod_name]
        status = pod["status"]["extendedResourceClaimStatus"]
        claim = claims[status["resourceClaimName"]]
        assert claim["metadata"]["name"].startswith(f"{pod_name}-extended-resources-")
        assert claim["metadata"]["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
        (owner,) = claim["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("Pod", pod["metadata"]["uid"], True)
        # Request names as kube-scheduler's: container 0, the resource's place among cpu, memory and it, sorted.
        request = f"container-0-request-{sorted(['cpu', 'memory', resource]).index(resource)}"
        assert status["requestMappings"] == [
            {"containerName": "main", "resourceName": resource, "requestName": request}
        ]
        (spec_request,) = claim["spec"]["devices"]["requests"]
        assert spec_request["name"] == request and spec_request["exactly"]["count"] == count
        got = allocated(claim)
        assert len(got) == count and not held & set(got)
        held.update(got)
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
        assert kube_mod.gpu_ids_of(pod) == tuple(sorted(int(d.split("-")[1]) for d in got))

    # The queue counts them as GPUs, the implicit name too.
    def usage() -> dict[str, Any] | None:
        status = sched.kube.request("GET", kube_mod.Kube.custom_path("queues", name=queue)).get("status", {})
        return status if status.get("allocated", {}).get("nvidia.com/gpu") == "3" else None

    kube_mod.wait_until(usage, timeout=30, what="queue allocated 3 GPUs", describe=sched.describe)
    # One GPU is left: a pod asking two waits; deleting "two" frees its claim's devices and it binds.
    sched.create_pod(kube_mod.pod("late", gpus=2, queue=queue))
    wait_message(sched, "late", "Insufficient nvidia.com/gpu")
    first = bound["two"]["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
    sched.delete_pod("two")
    kube_mod.wait_until(lambda: first not in devices.claims(), timeout=60, what="the deleted pod's claim gone")
    (late,) = sched.wait_bound(["late"], timeout=60)
    assert len(allocated(claim_of_extended(late, devices))) == 2


def claim_of_extended(pod: dict[str, Any], devices: Devices) -> dict[str, Any]:
    return devices.claims()[pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"]]


def test_a_gang_of_gpu_and_rdma_nic_pods_gets_both_under_one_pcie_root(sched: Scenario, devices: Devices) -> None:
    # GPUDirect RDMA the DRA way: one claim asks a GPU of NVIDIA's driver and an RDMA NIC of another driver, with a
    # matchAttribute on the standard resource.kubernetes.io/pcieRoot across both; the API server takes the NIC
    # driver's slice and the constraint, and gpusched places a gang of such pods whole, one PCIe root each.
    from tests.plugins import test_dra_rdma as rdma

    name = f"{sched.name[:20]}-r"
    sched.add_nodes([kube_mod.gpu_node(name, gpus=0)])
    devices.setup([name])
    nic_class = rdma.nic_class() | {"metadata": {"name": f"{devices.gpu_class}-nic"}}
    devices.post(f"{API}/deviceclasses", nic_class)
    nics = rdma.nic_slice(name)
    nics["metadata"]["name"] = f"{name}-nics"
    devices.post(f"{API}/resourceslices", nics)
    for label, gpus in (("gpu-nic", 3), ("one-gpu-nic", 1)):
        requests = (
            dra.request("gpu", gpus, device_class=devices.gpu_class),
            dra.request("nic", 1, device_class=f"{devices.gpu_class}-nic"),
        )
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": label},
            "spec": {"spec": dra.claim_spec(*requests, same=dra.PCIE_ROOT, same_for=("gpu", "nic"))},
        }
        devices.post(f"{API}/namespaces/{sched.namespace}/resourceclaimtemplates", body, cluster_scoped=False)
    sched.create_podgroup(kube_mod.podgroup("rdma", min_member=2))
    sched.start_gpusched()
    for i in range(2):
        sched.create_pod(dra_pod(f"rdma-{i}", template="gpu-nic", group="rdma"))
    bound = sched.wait_bound(["rdma-0", "rdma-1"], timeout=90)
    roots = []
    for pod in bound:
        got = allocated(claim_of(pod, devices))
        assert len(got) == 4 and len({rdma.root(d) for d in got}) == 1, got
        roots.append(rdma.root(got[0]))
    assert sorted(roots) == [0, 1]
    # A pod asking one GPU and a NIC: both NICs are held, so it waits although two GPUs are free.
    sched.create_pod(dra_pod("rdma-2", template="one-gpu-nic"))
    wait_message(sched, "rdma-2", "cannot allocate all claims")


def test_a_device_shared_by_capacity_is_never_given_beyond_it_across_a_restart(
    sched: Scenario, devices: Devices
) -> None:
    # Consumable capacity: a GPU published with allowMultipleAllocations and 80Gi of memory asked in steps of 10Gi;
    # claims asking 25Gi (30Gi once rounded) share it. The API server takes the slice, the claims' capacity requests
    # and the shares gpusched writes (shareID, consumedCapacity); the third claim waits, after a restart too.
    from tests.plugins import test_dra_capacity as capacity

    name = f"{sched.name[:20]}-c"
    sched.add_nodes([kube_mod.gpu_node(name, gpus=0)])
    shared_class = f"{devices.gpu_class}-shared"
    expression = f"device.attributes['{dra.DRIVER}'].shareable"
    devices.post(f"{API}/deviceclasses", dra.gpu_class(shared_class, expression))
    raw = capacity.shared_gpu_slice(name)
    raw["metadata"]["name"] = f"{name}-shared"
    devices.post(f"{API}/resourceslices", raw)
    spec = capacity.memory_claim("x", "25Gi", shared_class)["spec"]
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "slice"}}
    devices.post(
        f"{API}/namespaces/{sched.namespace}/resourceclaimtemplates",
        body | {"spec": {"spec": spec}},
        cluster_scoped=False,
    )
    replica = sched.start_gpusched()
    for i in range(2):
        sched.create_pod(dra_pod(f"share-{i}", template="slice"))
    bound = sched.wait_bound(["share-0", "share-1"], timeout=60)
    share_ids = set()
    for pod in bound:
        (result,) = claim_of(pod, devices)["status"]["allocation"]["devices"]["results"]
        assert result["device"] == "gpu-0" and result["consumedCapacity"] == {"memory": "30Gi"}, result
        share_ids.add(result["shareID"])
    assert len(share_ids) == 2
    # 60Gi of 80Gi are used: a third 30Gi share waits, and still does once gpusched has read it all again.
    replica.restart().wait_ready().wait_leader()
    sched.create_pod(dra_pod("share-2", template="slice"))
    wait_message(sched, "share-2", "cannot allocate all claims")
    sched.delete_pod("share-0")
    (third,) = sched.wait_bound(["share-2"], timeout=90)
    (result,) = claim_of(third, devices)["status"]["allocation"]["devices"]["results"]
    assert result["device"] == "gpu-0" and result["shareID"] not in share_ids
