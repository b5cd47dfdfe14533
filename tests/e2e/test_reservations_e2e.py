"""Reservations through ``gpusched run`` with the shipped RBAC (docs/reservations.md): a Reservation for 8 GPUs
holds one node; a pod it does not name never lands there, even when nothing else fits, and is told which Reservation
holds it; its owner's pod lands there at once; its expiry frees the room; a leader kill keeps it held; the API server
refuses a bad one, naming the field."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e import kube as kube_mod
from tests.e2e.kube import Scenario, node_of
from tests.e2e.localcluster import APIError
from tests.e2e.test_resilience_e2e import FAST_LEASE

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "reservations" / "reservation.yaml"


def _example(**spec: Any) -> dict[str, Any]:
    """The documented example, with ``spec`` changed."""
    body: dict[str, Any] = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    body["spec"].update(spec)
    return {key: value for key, value in body.items() if value is not None}


def _create(sched: Scenario, body: dict[str, Any]) -> None:
    sched.kube.request("POST", kube_mod.Kube.custom_path("reservations", sched.namespace), body)


def _reservation(sched: Scenario, name: str) -> dict[str, Any]:
    got: dict[str, Any] = sched.kube.request("GET", kube_mod.Kube.custom_path("reservations", sched.namespace, name))
    return got


def _status_when(sched: Scenario, name: str, phase: str, *, timeout: float = 60.0) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        status: dict[str, Any] = _reservation(sched, name).get("status") or {}
        return status if status.get("phase") == phase else None

    got: dict[str, Any] = kube_mod.wait_until(
        reached, timeout=timeout, what=f"reservation {name} {phase}", describe=lambda: str(_reservation(sched, name))
    )
    return got


def _told(sched: Scenario, name: str, words: str) -> str:
    """Pod ``name``'s PodScheduled=False message, once it says ``words``."""

    def said() -> str | None:
        condition = kube_mod.condition(sched.pod(name), "PodScheduled") or {}
        message = str(condition.get("message") or "")
        return message if words in message else None

    found: str = kube_mod.wait_until(said, timeout=30, what=f"pod {name} told {words!r}", describe=sched.describe)
    return found


def test_a_reservation_holds_its_node_for_its_owner_and_its_expiry_frees_it(sched: Scenario) -> None:
    sched.add_nodes([kube_mod.gpu_node("rsv-0"), kube_mod.gpu_node("rsv-1")])
    sched.start_gpusched()
    _create(sched, _example(ttlSeconds=40))
    status = _status_when(sched, "big-train", "Available")
    (held,) = status["nodes"]
    assert status["held"]["nvidia.com/gpu"] == "8", status
    sched.wait_event("big-train", "Reserved", kind="Reservation")
    table = sched.kube.kubectl("get", "rsv", "-n", sched.namespace).stdout
    assert "Available" in table and held in table, table

    # Another 8-GPU pod takes the other node; the next non-owner fits nowhere else, and still never gets the held one.
    sched.create_pod(kube_mod.pod("filler", gpus=8))
    (filler,) = sched.wait_bound(["filler"])
    assert node_of(filler) != held
    sched.create_pod(kube_mod.pod("waiter", gpus=4))
    told = _told(sched, "waiter", f"Reservation {sched.namespace}/big-train")
    assert "0/" in told, told
    # Its owner's pod goes into the held room at once.
    sched.create_pod(kube_mod.pod("train", gpus=4, labels={"app": "train"}))
    (train,) = sched.wait_bound(["train"])
    assert node_of(train) == held
    sched.stays_unbound(["waiter"], seconds=3)
    assert (_reservation(sched, "big-train")["status"] or {})["phase"] == "Available"

    # Its time is up: the room is free, and the pod that waited binds there.
    expired = _status_when(sched, "big-train", "Expired", timeout=90)
    assert expired.get("nodes") == [] and "held" not in expired, expired
    (waiter,) = sched.wait_bound(["waiter"], timeout=60)
    assert node_of(waiter) == held
    sched.wait_event("big-train", "Expired", kind="Reservation")
    kube_mod.check_no_overcommit(sched.pods(), sched.my_nodes())


def test_a_leader_kill_keeps_the_reservation_and_its_hold(sched: Scenario) -> None:
    sched.add_nodes([kube_mod.gpu_node("rsvha-0"), kube_mod.gpu_node("rsvha-1")])
    first = sched.gpusched("replica-a", config=FAST_LEASE).start()
    second = sched.gpusched("replica-b", config=FAST_LEASE).start()
    first.wait_ready()
    second.wait_ready()
    (leader,) = kube_mod.wait_until(
        lambda: [r for r in (first, second) if r.is_leader()], timeout=60, what="one replica leading"
    )
    standby = second if leader is first else first
    _create(sched, _example())
    (held,) = _status_when(sched, "big-train", "Available")["nodes"]

    leader.kill()
    standby.wait_leader(timeout=30)
    # The new leader holds it where the old one did: of two 8-GPU pods that are not its owners, one fits, on the
    # other node; the other waits, told why.
    for name in ("after-0", "after-1"):
        sched.create_pod(kube_mod.pod(name, gpus=8))
    placed = kube_mod.wait_until(
        lambda: [p for p in sched.pods() if p["metadata"]["name"].startswith("after-") and node_of(p)] or None,
        timeout=60,
        what="one pod bound",
        describe=sched.describe,
    )
    (bound,) = placed
    assert node_of(bound) != held
    (waiting,) = {"after-0", "after-1"} - {bound["metadata"]["name"]}
    _told(sched, waiting, f"Reservation {sched.namespace}/big-train")
    sched.stays_unbound([waiting], seconds=3)
    status = _reservation(sched, "big-train")["status"]
    assert (status["phase"], status["nodes"]) == ("Available", [held]), status
    # Its owner still lands in it.
    sched.create_pod(kube_mod.pod("train", gpus=8, labels={"app": "train"}))
    (train,) = sched.wait_bound(["train"])
    assert node_of(train) == held


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({"replicas": 0}, "spec.replicas", "greater than or equal to 1"),
        ({"owners": []}, "spec.owners", "at least 1 items"),
        (
            {"owners": [{"podGroup": "g", "object": {"kind": "Job", "name": "j"}}]},
            "spec.owners[0]",
            "an owner is exactly one of labelSelector, object, podGroup",
        ),
        ({"owners": [{"labelSelector": {}}]}, "spec.owners[0].labelSelector", "an empty selector"),
        ({"ttlSeconds": 0}, "spec.ttlSeconds", "greater than or equal to 1"),
        ({"ttlSeconds": 60, "expires": "2030-01-01T00:00:00Z"}, "spec", "set ttlSeconds or expires, not both"),
        ({"template": {"spec": {"containers": []}}}, "spec.template.spec.containers", "at least 1 items"),
    ],
    ids=["replicas-0", "no-owner", "two-owner-kinds", "empty-selector", "ttl-0", "ttl-and-expires", "no-container"],
)
def test_invalid_reservation_refused(scenario: Scenario, spec: dict[str, Any], field: str, words: str) -> None:
    path = kube_mod.Kube.custom_path("reservations", scenario.namespace)
    with pytest.raises(APIError) as info:
        created = scenario.kube.request("POST", path, _example(**spec))
        scenario.kube.request("DELETE", f"{path}/{created['metadata']['name']}")
    assert info.value.status == 422, info.value.body
    message = json.loads(info.value.body)["message"]
    assert field in message and words in message, message
