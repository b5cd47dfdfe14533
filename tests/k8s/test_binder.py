"""The binder against a fake API server: every answer maps to the callback the operator expects."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import pytest

from scheduler.api.basics.resources import GpuRequest
from scheduler.api.devices import hami
from scheduler.api.objects.node import NodeInfo
from scheduler.api.objects.pod import ANNOTATION_GPU_IDS, PodRequest
from scheduler.framework.interface import Decision
from scheduler.k8s import client as k8s
from scheduler.k8s.ports import binder as binder_mod
from scheduler.k8s.ports.binder import Binder, BinderSettings, Outcome
from tests.k8s.fakeapi import Canned, FakeApiServer, client_for, status

ASSIGNED_ELSEWHERE = (
    'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already assigned to node "{node}"'
)
DELETING = (
    'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is being deleted, cannot be assigned to a host'
)
UID_PRECONDITION = (
    'Operation cannot be fulfilled on pods "{name}": Precondition failed: UID in precondition: u-1, '
    "UID in object meta: u-2"
)
WEBHOOK = 'admission webhook "deny.example.com" denied the request: GPUs are not allowed in this namespace'


@dataclass
class Outcomes:
    bound: list[str] = field(default_factory=list)
    failed: list[tuple[str, str, bool, float]] = field(default_factory=list)
    uncertain: list[str] = field(default_factory=list)

    def on_bound(self, key: str) -> None:
        self.bound.append(key)

    def on_failed(self, pod: PodRequest, reason: str, retry: bool, backoff: float) -> None:
        self.failed.append((pod.key, reason, retry, backoff))

    def on_uncertain(self, key: str) -> None:
        self.uncertain.append(key)


def make_binder(client: k8s.Client, outcomes: Outcomes, **settings: float) -> Binder:
    return Binder(
        client,
        on_bound=outcomes.on_bound,
        on_failed=outcomes.on_failed,
        on_uncertain=outcomes.on_uncertain,
        settings=BinderSettings(**settings),  # type: ignore[arg-type]
    )


def decision(name: str = "p", node: str = "gpu-0", gpus: tuple[int, ...] = (0, 3)) -> Decision:
    return Decision(PodRequest("ns", name, uid=f"uid-{name}"), node, gpus)


def pod_object(name: str, node: str, uid: str, gpu_ids: str = "") -> dict[str, object]:
    annotations = {ANNOTATION_GPU_IDS: gpu_ids} if gpu_ids else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "annotations": annotations},
        "spec": {"nodeName": node},
    }


async def bind_one(client: k8s.Client, d: Decision, **settings: float) -> Outcomes:
    outcomes = Outcomes()
    b = make_binder(client, outcomes, **settings)
    b.bind(d)
    await b.drain()
    return outcomes


async def test_201_with_a_status_body_is_bound(fake: FakeApiServer, client: k8s.Client) -> None:
    # The real API server answers a binding with a Status, not a Binding (kubernetes-client/python #825).
    outcomes = await bind_one(client, decision())
    assert outcomes.bound == ["ns/p"]
    assert outcomes.failed == [] and outcomes.uncertain == []
    (sent,) = fake.requests("POST", "/pods/p/binding")
    assert sent.body["kind"] == "Binding"
    assert sent.body["metadata"]["name"] == "p"
    assert sent.body["metadata"]["uid"] == "uid-p"
    assert sent.body["metadata"]["annotations"] == {ANNOTATION_GPU_IDS: "0,3"}
    assert sent.body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-0"}
    # One round trip per pod: the GPU indices travel with the binding.
    assert [s.method for s in fake.seen] == ["POST"]


async def test_the_generated_client_alone_would_lose_that_success(fake: FakeApiServer, client: k8s.Client) -> None:
    # Why the binder reads raw answers: deserialising the Status as a V1Binding fails on a success.
    with pytest.raises(ValueError, match="target"):
        await client.core.create_namespaced_pod_binding("p", "ns", binder_mod.binding(decision()))
    assert fake.requests("POST", "/binding")


async def test_200_with_empty_body_is_bound(fake: FakeApiServer, client: k8s.Client) -> None:
    fake.bind_answers["p"] = Canned(200, {})
    assert (await bind_one(client, decision())).bound == ["ns/p"]


async def test_no_gpus_no_annotation(fake: FakeApiServer, client: k8s.Client) -> None:
    outcomes = await bind_one(client, decision(gpus=()))
    assert outcomes.bound == ["ns/p"]
    (sent,) = fake.requests("POST", "/binding")
    assert "annotations" not in sent.body["metadata"]


async def test_409_already_assigned_to_our_node_is_bound(fake: FakeApiServer, client: k8s.Client) -> None:
    # An earlier attempt of ours landed (say, its answer was lost): the pod is on our node with our GPUs.
    fake.bind_answers["p"] = Canned(409, status(409, "Conflict", ASSIGNED_ELSEWHERE.format(name="p", node="gpu-0")))
    fake.pods["ns/p"] = pod_object("p", "gpu-0", "uid-p", "0,3")
    outcomes = await bind_one(client, decision())
    assert outcomes.bound == ["ns/p"]
    assert [s.method for s in fake.seen] == ["POST", "GET"]


async def test_409_already_assigned_elsewhere_fails_without_retry(fake: FakeApiServer, client: k8s.Client) -> None:
    fake.bind_answers["p"] = Canned(409, status(409, "Conflict", ASSIGNED_ELSEWHERE.format(name="p", node="gpu-9")))
    fake.pods["ns/p"] = pod_object("p", "gpu-9", "uid-p", "5")
    outcomes = await bind_one(client, decision())
    assert outcomes.bound == [] and outcomes.uncertain == []
    ((key, reason, retry, backoff),) = outcomes.failed
    assert key == "ns/p" and retry is False and backoff == 0.0
    assert "gpu-9" in reason and "5" in reason


async def test_409_on_our_node_with_other_gpus_is_not_ours(fake: FakeApiServer, client: k8s.Client) -> None:
    fake.bind_answers["p"] = Canned(409, status(409, "Conflict", ASSIGNED_ELSEWHERE.format(name="p", node="gpu-0")))
    fake.pods["ns/p"] = pod_object("p", "gpu-0", "uid-p", "6,7")
    outcomes = await bind_one(client, decision())
    assert [(k, retry) for k, _, retry, _ in outcomes.failed] == [("ns/p", False)]


async def test_409_already_assigned_then_pod_gone(fake: FakeApiServer, client: k8s.Client) -> None:
    fake.bind_answers["p"] = Canned(409, status(409, "Conflict", ASSIGNED_ELSEWHERE.format(name="p", node="gpu-0")))
    outcomes = await bind_one(client, decision())  # the GET answers 404
    assert [(k, retry) for k, _, retry, _ in outcomes.failed] == [("ns/p", False)]


@pytest.mark.parametrize(
    "canned",
    [
        Canned(409, status(409, "Conflict", DELETING.format(name="p"))),
        Canned(404, status(404, "NotFound", 'pods "p" not found')),
        Canned(409, status(409, "Conflict", UID_PRECONDITION.format(name="p"))),
    ],
    ids=["being-deleted", "not-found", "uid-precondition"],
)
async def test_gone_fails_without_retry(fake: FakeApiServer, client: k8s.Client, canned: Canned) -> None:
    fake.bind_answers["p"] = canned
    outcomes = await bind_one(client, decision())
    ((key, reason, retry, backoff),) = outcomes.failed
    assert (key, retry, backoff) == ("ns/p", False, 0.0)
    assert reason == canned.body["message"]
    assert outcomes.bound == [] and outcomes.uncertain == []


@pytest.mark.parametrize("code", [500, 503, 504])
async def test_5xx_is_uncertain(fake: FakeApiServer, client: k8s.Client, code: int) -> None:
    fake.bind_answers["p"] = Canned(code, status(code, "InternalError", "etcdserver: request timed out"))
    outcomes = await bind_one(client, decision())
    assert outcomes.uncertain == ["ns/p"]
    assert outcomes.bound == [] and outcomes.failed == []


async def test_timeout_is_uncertain(fake: FakeApiServer) -> None:
    fake.bind_answers["p"] = Canned(201, status(201), hang=True)
    c = client_for(fake.url, timeout=0.2)
    try:
        outcomes = await bind_one(c, decision())
    finally:
        await c.close()
    assert outcomes.uncertain == ["ns/p"]
    assert outcomes.bound == [] and outcomes.failed == []


async def test_connection_refused_is_uncertain() -> None:
    c = client_for("http://127.0.0.1:9", timeout=1.0)
    try:
        outcomes = await bind_one(c, decision())
    finally:
        await c.close()
    assert outcomes.uncertain == ["ns/p"]


async def test_webhook_denial_retries_with_growing_backoff(fake: FakeApiServer, client: k8s.Client) -> None:
    fake.bind_answers["p"] = Canned(400, status(400, "BadRequest", WEBHOOK))
    outcomes = Outcomes()
    b = make_binder(client, outcomes, backoff_initial=1.0, backoff_max=3.0)
    for _ in range(4):
        b.bind(decision())
        await b.drain()
    assert [(k, r, retry) for k, r, retry, _ in outcomes.failed] == [("ns/p", WEBHOOK, True)] * 4
    assert [backoff for *_, backoff in outcomes.failed] == [1.0, 2.0, 3.0, 3.0]
    # Success clears the pod's backoff; the next refusal starts again from the beginning.
    del fake.bind_answers["p"]
    b.bind(decision())
    await b.drain()
    fake.bind_answers["p"] = Canned(403, status(403, "Forbidden", "forbidden"))
    b.bind(decision())
    await b.drain()
    assert outcomes.bound == ["ns/p"]
    assert outcomes.failed[-1][2:] == (True, 1.0)


async def test_429_is_refused_with_retry(fake: FakeApiServer, client: k8s.Client) -> None:
    fake.bind_answers["p"] = Canned(429, status(429, "TooManyRequests", "slow down"), headers={"Retry-After": "2"})
    outcomes = await bind_one(client, decision())
    assert [(k, retry) for k, _, retry, _ in outcomes.failed] == [("ns/p", True)]


async def test_binds_run_concurrently_up_to_the_bound(fake: FakeApiServer, client: k8s.Client) -> None:
    fake.bind_delay = 0.05
    outcomes = Outcomes()
    b = make_binder(client, outcomes, max_in_flight=5)
    for i in range(40):
        b.bind(decision(f"p{i}"))
    assert b.pending == 40  # bind() returned at once, nothing has been sent yet
    await b.drain()
    assert sorted(outcomes.bound) == sorted(f"ns/p{i}" for i in range(40))
    assert fake.max_in_flight == 5
    assert b.in_flight == 0 and b.pending == 0


async def test_bind_from_another_thread(fake: FakeApiServer, client: k8s.Client) -> None:
    outcomes = Outcomes()
    b = make_binder(client, outcomes)
    thread = threading.Thread(target=b.bind, args=(decision(),))
    thread.start()
    await asyncio.to_thread(thread.join)
    await asyncio.sleep(0)
    await b.drain()
    assert outcomes.bound == ["ns/p"]


async def test_a_raising_callback_does_not_stop_the_binder(fake: FakeApiServer, client: k8s.Client) -> None:
    seen: list[str] = []

    def on_bound(key: str) -> None:
        seen.append(key)
        raise RuntimeError("callback bug")

    b = Binder(client, on_bound=on_bound, on_failed=Outcomes().on_failed, on_uncertain=Outcomes().on_uncertain)
    b.bind(decision("a"))
    b.bind(decision("b"))
    await b.drain()
    assert sorted(seen) == ["ns/a", "ns/b"]


async def test_binds_share_the_client_qps_limit(fake: FakeApiServer) -> None:
    limiter = k8s.RateLimiter(qps=100, burst=2, clock=lambda: 0.0)  # a still clock: no refill while we look
    c = client_for(fake.url, limiter=limiter)
    try:
        outcomes = Outcomes()
        b = make_binder(c, outcomes, max_in_flight=10)
        for i in range(6):
            b.bind(decision(f"p{i}"))
        await b.drain()
    finally:
        await c.close()
    assert len(outcomes.bound) == 6
    assert limiter.waited == 4  # two went on the burst, the other four waited for tokens


@pytest.mark.parametrize(
    ("code", "message", "outcome"),
    [
        (201, "", Outcome.BOUND),
        (200, "", Outcome.BOUND),
        (409, ASSIGNED_ELSEWHERE.format(name="p", node="n"), Outcome.ASSIGNED),
        (409, DELETING.format(name="p"), Outcome.GONE),
        (409, UID_PRECONDITION.format(name="p"), Outcome.GONE),
        (409, "pod p has non-empty .spec.schedulingGates", Outcome.REFUSED),
        (404, "not found", Outcome.GONE),
        (400, WEBHOOK, Outcome.REFUSED),
        (403, "forbidden", Outcome.REFUSED),
        (422, "invalid", Outcome.REFUSED),
        (429, "too many", Outcome.REFUSED),
        (500, "internal", Outcome.UNCERTAIN),
        (503, "unavailable", Outcome.UNCERTAIN),
        (0, "", Outcome.UNCERTAIN),
    ],
)
def test_classify(code: int, message: str, outcome: Outcome) -> None:
    answer = k8s.Answer(status=code, body=status(code, message=message) if code else {}, error="TimeoutError")
    assert binder_mod.classify(answer) is outcome


# --- HAMi's device plugin: the chosen GPUs by UUID ----------------------------------------------------------------

HAMI_UUIDS = tuple(f"GPU-{i}aaaaaaa-0000-0000-0000-000000000000" for i in range(4))


def hami_node(name: str = "gpu-0") -> NodeInfo:
    devices = tuple(hami.Device(uuid=u, index=i, count=10, memory_mib=81920) for i, u in enumerate(HAMI_UUIDS))
    return NodeInfo(name, gpus=4, gpu_memory=81920 * 2**20, hami_devices=devices)


def hami_decision(gpu: GpuRequest, per_container: tuple[int, ...], gpus: tuple[int, ...]) -> Decision:
    pod = PodRequest("ns", "p", uid="uid-p", gpu=gpu, gpu_per_container=per_container)
    return Decision(pod, "gpu-0", gpus)


async def test_on_a_hami_node_the_binding_names_the_chosen_gpus_by_uuid(
    fake: FakeApiServer, client: k8s.Client
) -> None:
    outcomes = Outcomes()
    b = Binder(
        client,
        on_bound=outcomes.on_bound,
        on_failed=outcomes.on_failed,
        on_uncertain=outcomes.on_uncertain,
        nodes={"gpu-0": hami_node()},
    )
    b.bind(hami_decision(GpuRequest(count=2, milli=1000), (0, 2), (3, 1)))
    await b.drain()
    assert outcomes.bound == ["ns/p"]
    (sent,) = fake.requests("POST", "/pods/p/binding")
    annotations = sent.body["metadata"]["annotations"]
    want = f"{HAMI_UUIDS[3]},NVIDIA,81920,100:{HAMI_UUIDS[1]},NVIDIA,81920,100:;"
    assert annotations[ANNOTATION_GPU_IDS] == "3,1"
    assert annotations[hami.TO_ALLOCATE] == annotations[hami.ALLOCATED] == ";" + want
    assert annotations[hami.ASSIGNED_NODE] == "gpu-0"
    assert annotations[hami.BIND_PHASE] == "allocating"
    assert abs(int(annotations[hami.BIND_TIME]) - time.time()) < 60
    assert annotations[hami.ASSIGNED_TIME] == annotations[hami.BIND_TIME]
    # Still one round trip per pod.
    assert [s.method for s in fake.seen] == ["POST"]


def test_a_shared_gpu_on_a_hami_node_carries_its_share() -> None:
    d = hami_decision(GpuRequest(count=1, milli=300, memory=3000 * 2**20), (1,), (2,))
    body = binder_mod.binding(d, hami_devices=hami_node().hami_devices, now=1716199325.0)
    annotations = body["metadata"]["annotations"]
    assert annotations[hami.ALLOCATED] == f"{HAMI_UUIDS[2]},NVIDIA,3000,30:;"
    assert annotations[hami.BIND_TIME] == "1716199325"


def test_no_hami_annotations_off_hami_nodes_or_for_pods_the_device_plugin_never_sees() -> None:
    whole = hami_decision(GpuRequest(count=1, milli=1000), (1,), (0,))
    assert binder_mod.binding(whole)["metadata"]["annotations"] == {ANNOTATION_GPU_IDS: "0"}
    # A gpu-milli pod without nvidia.com/gpu: the kubelet never calls a device plugin for it.
    milli_only = hami_decision(GpuRequest(count=1, milli=500), (), (0,))
    body = binder_mod.binding(milli_only, hami_devices=hami_node().hami_devices)
    assert body["metadata"]["annotations"] == {ANNOTATION_GPU_IDS: "0"}


def test_gpus_that_cannot_be_dealt_to_containers_bind_without_hami_annotations() -> None:
    # Two GPUs chosen, one asked by the app containers (the other in an init container): HAMi cannot serve it.
    d = hami_decision(GpuRequest(count=2, milli=1000), (1,), (0, 1))
    body = binder_mod.binding(d, hami_devices=hami_node().hami_devices)
    assert body["metadata"]["annotations"] == {ANNOTATION_GPU_IDS: "0,1"}
