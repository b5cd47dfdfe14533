"""PersistentVolumeClaims through ``gpusched run`` on a real API server, with the real kube-controller-manager's PV
controller binding volumes to claims (docs/pods.md): a WaitForFirstConsumer claim gets a static local volume of a
node the pod can go to, and that volume; a bound claim takes the pod to its volume's node; a claim to be
provisioned is annotated with the node (the test plays the provisioner); an unbound Immediate claim, a missing
claim and a ReadWriteOncePod claim in use keep the pod waiting with kube-scheduler's messages, and the pod binds
once that changes; a generic ephemeral volume's claim, made by the ephemeral-volume controller, is bound too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e.kube import Scenario, node_of
from tests.e2e.localcluster import APIError

pytestmark = pytest.mark.e2e

HOST = "kubernetes.io/hostname"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
SELECTED_NODE = "volume.kubernetes.io/selected-node"


class Volumes:
    """The cluster-scoped objects of one test (storage classes, volumes), deleted when it ends."""

    def __init__(self, scenario: Scenario) -> None:
        self.s = scenario
        self.prefix = scenario.name[:30].rstrip("-")
        self.made: list[str] = []

    def name(self, short: str) -> str:
        return f"{self.prefix}-{short}"

    def storage_class(self, short: str, *, wait: bool = True, provisioner: str = NO_PROVISIONER) -> str:
        name = self.name(short)
        body = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": name},
            "provisioner": provisioner,
            "volumeBindingMode": "WaitForFirstConsumer" if wait else "Immediate",
        }
        self.s.kube.request("POST", "/apis/storage.k8s.io/v1/storageclasses", body)
        self.made.append(f"/apis/storage.k8s.io/v1/storageclasses/{name}")
        return name

    def volume(
        self,
        short: str,
        storage_class: str,
        *,
        node: str,
        size: str = "10Gi",
        claim: str = "",
        modes: tuple[str, ...] = ("ReadWriteOnce",),
    ) -> str:
        name = self.name(short)
        spec: dict[str, Any] = {
            "capacity": {"storage": size},
            "accessModes": list(modes),
            "storageClassName": storage_class,
            "persistentVolumeReclaimPolicy": "Retain",
            "local": {"path": f"/mnt/{short}"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": HOST, "operator": "In", "values": [node]}]}]
                }
            },
        }
        if claim:
            spec["claimRef"] = {"namespace": self.s.namespace, "name": claim}
        self.s.kube.request("POST", "/api/v1/persistentvolumes", {"metadata": {"name": name}, "spec": spec})
        self.made.append(f"/api/v1/persistentvolumes/{name}")
        return name

    def claim(
        self,
        name: str,
        storage_class: str,
        *,
        size: str = "5Gi",
        volume: str = "",
        modes: tuple[str, ...] = ("ReadWriteOnce",),
    ) -> None:
        spec: dict[str, Any] = {
            "accessModes": list(modes),
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": size}},
        }
        if volume:
            spec["volumeName"] = volume
        self.s.kube.request("POST", self.claims_path(), {"metadata": {"name": name}, "spec": spec})

    def claims_path(self, name: str = "") -> str:
        return f"/api/v1/namespaces/{self.s.namespace}/persistentvolumeclaims" + (f"/{name}" if name else "")

    def read_claim(self, name: str) -> dict[str, Any]:
        got: dict[str, Any] = self.s.kube.request("GET", self.claims_path(name))
        return got

    def read_volume(self, name: str) -> dict[str, Any]:
        got: dict[str, Any] = self.s.kube.request("GET", f"/api/v1/persistentvolumes/{name}")
        return got

    def wait_claim_bound(self, name: str, timeout: float = 60.0) -> dict[str, Any]:
        def bound() -> dict[str, Any] | None:
            claim = self.read_claim(name)
            return claim if claim.get("status", {}).get("phase") == "Bound" else None

        got: dict[str, Any] = kube_mod.wait_until(
            bound, timeout=timeout, what=f"claim {name} Bound", describe=self.s.describe
        )
        return got

    def cleanup(self) -> None:
        for path in reversed(self.made):
            with contextlib.suppress(APIError):
                self.s.kube.request("DELETE", path)


@pytest.fixture
def vols(sched: Scenario) -> Iterator[Volumes]:
    v = Volumes(sched)
    try:
        yield v
    finally:
        v.cleanup()


def with_claim(manifest: dict[str, Any], claim: str) -> dict[str, Any]:
    manifest["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    return manifest


def nodes(sched: Scenario, *names: str) -> None:
    sched.add_nodes([kube_mod.gpu_node(n, gpus=2) for n in names])


def test_a_wait_for_first_consumer_claim_gets_the_local_volume_of_the_node_the_pod_goes_to(
    sched: Scenario, vols: Volumes
) -> None:
    nodes(sched, "vol-a", "vol-b", "vol-c")
    local = vols.storage_class("local")
    on_b = vols.volume("pv-b", local, node="vol-b")
    on_c = vols.volume("pv-c", local, node="vol-c")
    vols.claim("data", local)
    sched.start_gpusched()
    sched.create_pod(with_claim(kube_mod.pod("notebook", gpus=1), "data"))
    (pod,) = sched.wait_bound(["notebook"], timeout=90)
    node = node_of(pod)
    assert node in ("vol-b", "vol-c")  # vol-a has no volume
    claim = vols.wait_claim_bound("data")
    expected = on_b if node == "vol-b" else on_c
    assert claim["spec"]["volumeName"] == expected
    assert vols.read_volume(expected)["spec"]["claimRef"]["name"] == "data"
    other = on_c if expected == on_b else on_b
    assert vols.read_volume(other)["status"]["phase"] == "Available"  # the other volume was left alone

    # The remaining volume goes to the next claim, and takes its pod to its node.
    vols.claim("more", local)
    sched.create_pod(with_claim(kube_mod.pod("second", gpus=1), "more"))
    (second,) = sched.wait_bound(["second"], timeout=90)
    assert node_of(second) == ("vol-c" if other == on_c else "vol-b")
    assert vols.wait_claim_bound("more")["spec"]["volumeName"] == other

    # No volume is left: a third claim's pod waits with kube-scheduler's message.
    vols.claim("none-left", local)
    sched.create_pod(with_claim(kube_mod.pod("third"), "none-left"))
    event = sched.wait_event("third", "FailedScheduling")
    assert "node(s) didn't find available persistent volumes to bind" in event["message"], event["message"]


def test_a_bound_claim_takes_the_pod_to_its_volumes_node(sched: Scenario, vols: Volumes) -> None:
    nodes(sched, "bound-a", "bound-b", "bound-c")
    manual = vols.storage_class("manual", wait=False)
    volume = vols.volume("pv", manual, node="bound-b", claim="db")
    vols.claim("db", manual, volume=volume)
    vols.wait_claim_bound("db")  # the PV controller binds a pre-bound pair by itself
    sched.start_gpusched()
    sched.create_pod(with_claim(kube_mod.pod("db-0", gpus=1), "db"))
    (pod,) = sched.wait_bound(["db-0"], timeout=90)
    assert node_of(pod) == "bound-b"
    # A pod the volume's node cannot hold waits, and says why for the other nodes.
    sched.create_pod(with_claim(kube_mod.pod("db-big", gpus=2), "db"))
    event = sched.wait_event("db-big", "FailedScheduling")
    assert "node(s) had volume node affinity conflict" in event["message"], event["message"]


def test_an_unbound_immediate_claim_leaves_the_pod_pending_with_kubes_message(sched: Scenario, vols: Volumes) -> None:
    nodes(sched, "imm-a")
    never = vols.storage_class("never", wait=False, provisioner="example.com/nobody")
    vols.claim("later", never)
    sched.start_gpusched()
    sched.create_pod(with_claim(kube_mod.pod("waits"), "later"))
    event = sched.wait_event("waits", "FailedScheduling")
    # kube-scheduler's FitError: VolumeBinding's PreFilter message, then what its PostFilter plugins said (DRA's, and
    # preemption's, which no eviction helps), as tests/e2e/test_messages_side_by_side_e2e.py compares them.
    assert event["message"] == (
        "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. no new claims to deallocate, "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    ), event
    sched.stays_unbound(["waits"], seconds=2)


def test_a_missing_claim_keeps_the_pod_waiting_until_it_is_created(sched: Scenario, vols: Volumes) -> None:
    nodes(sched, "late-a", "late-b")
    local = vols.storage_class("local")
    volume = vols.volume("pv", local, node="late-b")
    sched.start_gpusched()
    sched.create_pod(with_claim(kube_mod.pod("early"), "late"))
    event = sched.wait_event("early", "FailedScheduling")
    assert 'persistentvolumeclaim "late" not found' in event["message"], event["message"]
    sched.stays_unbound(["early"], seconds=2)
    vols.claim("late", local)
    (pod,) = sched.wait_bound(["early"], timeout=90)
    assert node_of(pod) == "late-b"
    assert vols.wait_claim_bound("late")["spec"]["volumeName"] == volume


def test_a_read_write_once_pod_claim_in_use_keeps_the_second_pod_waiting(sched: Scenario, vols: Volumes) -> None:
    nodes(sched, "rwop-a", "rwop-b")
    manual = vols.storage_class("manual", wait=False)
    volume = vols.volume("pv", manual, node="rwop-a", claim="solo", modes=("ReadWriteOncePod",))
    vols.claim("solo", manual, volume=volume, modes=("ReadWriteOncePod",))
    vols.wait_claim_bound("solo")
    sched.start_gpusched()
    sched.create_pod(with_claim(kube_mod.pod("first"), "solo"))
    sched.wait_bound(["first"], timeout=90)
    sched.create_pod(with_claim(kube_mod.pod("second"), "solo"))
    event = sched.wait_event("second", "FailedScheduling")
    assert (
        "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
        in event["message"]
    ), event["message"]
    sched.stays_unbound(["second"], seconds=2)
    sched.delete_pod("first")
    (pod,) = sched.wait_bound(["second"], timeout=90)
    assert node_of(pod) == "rwop-a"


def test_provisioning_is_asked_for_the_chosen_node_and_the_pod_binds_once_the_volume_is_made(
    sched: Scenario, vols: Volumes
) -> None:
    nodes(sched, "prov-a")
    csi = vols.storage_class("csi", provisioner="disk.example.com")
    vols.claim("scratch", csi)
    sched.start_gpusched()
    sched.create_pod(with_claim(kube_mod.pod("trainer", gpus=1), "scratch"))

    def annotated() -> str:
        return str(vols.read_claim("scratch")["metadata"].get("annotations", {}).get(SELECTED_NODE, ""))

    node = kube_mod.wait_until(annotated, timeout=60, what="the claim's selected-node annotation")
    assert node == "prov-a"
    sched.stays_unbound(["trainer"], seconds=2)  # not before its volume is there
    # The test is the provisioner: a volume on that node, made for the claim; the PV controller binds them.
    vols.volume("made", csi, node=node, claim="scratch")
    (pod,) = sched.wait_bound(["trainer"], timeout=90)
    assert node_of(pod) == "prov-a"


def test_a_generic_ephemeral_volume_is_bound_on_the_pods_node(sched: Scenario, vols: Volumes) -> None:
    nodes(sched, "eph-a", "eph-b")
    local = vols.storage_class("local")
    volume = vols.volume("pv", local, node="eph-b")
    sched.start_gpusched()
    manifest = kube_mod.pod("scratchy")
    template = {
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": local,
            "resources": {"requests": {"storage": "1Gi"}},
        }
    }
    manifest["spec"]["volumes"] = [{"name": "cache", "ephemeral": {"volumeClaimTemplate": template}}]
    sched.create_pod(manifest)
    (pod,) = sched.wait_bound(["scratchy"], timeout=90)  # the ephemeral-volume controller made the claim
    assert node_of(pod) == "eph-b"
    assert vols.wait_claim_bound("scratchy-cache")["spec"]["volumeName"] == volume


def test_a_gangs_members_get_distinct_volumes_and_land_whole(sched: Scenario, vols: Volumes) -> None:
    # The gang score would put both 1-GPU members on one node; each node has one local volume.
    nodes(sched, "gang-a", "gang-b")
    local = vols.storage_class("local")
    on_a = vols.volume("pv-a", local, node="gang-a")
    on_b = vols.volume("pv-b", local, node="gang-b")
    sched.start_gpusched()
    sched.create_podgroup(kube_mod.podgroup("writers", min_member=2))
    for i in range(2):
        vols.claim(f"shard-{i}", local)
        sched.create_pod(with_claim(kube_mod.pod(f"writer-{i}", gpus=1, group="writers"), f"shard-{i}"))
    pods = sched.wait_bound(["writer-0", "writer-1"], timeout=90)
    assert sorted(node_of(p) for p in pods) == ["gang-a", "gang-b"], kube_mod.summary(pods)
    for p in pods:
        claim = vols.wait_claim_bound(p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"])
        assert claim["spec"]["volumeName"] == (on_a if node_of(p) == "gang-a" else on_b)
