"""Workloads' pods become gangs without a hand-written PodGroup: owners read once, one PodGroup per workload written by
the leader only, namespaces' default queues, scheduler-plugins PodGroups read as gangs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from scheduler.k8s import publisher as publisher_module
from scheduler.k8s.operator import Operator
from tests.k8s.fakeapi import FakeApiServer, eventually, status
from tests.k8s.test_operator import bound, flushed, node, pod, settled, waiting_for_gang


class WorkloadApi(FakeApiServer):
    """The fake API server, plus creation of custom objects (kept, and answered 409 when they exist)."""

    def __init__(self) -> None:
        super().__init__()
        #: Reads of custom objects answered 503 before the real answer.
        self.unavailable = 0
        self._server.app.router.add_post("/apis/{group}/{version}/namespaces/{ns}/{plural}", self._create_custom)

    async def _get_custom(self, request: web.Request) -> web.Response:
        await self._record(request)
        if self.unavailable > 0:
            self.unavailable -= 1
            return web.json_response(status(503, "ServiceUnavailable", "try later"), status=503)
        return await super()._get_custom(request)

    async def _create_custom(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        items = self.custom.setdefault(request.match_info["plural"], [])
        if any(i["metadata"]["name"] == body["metadata"]["name"] for i in items):
            return web.json_response(status(409, "AlreadyExists", "already exists"), status=409)
        items.append(body)
        return web.json_response(body, status=201)


@pytest.fixture
async def fake() -> AsyncIterator[FakeApiServer]:
    server = WorkloadApi()
    await server.start()
    yield server
    await server.close()


def job(name: str, parallelism: int, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "annotations": annotations},
        "spec": {"completionMode": "Indexed", "parallelism": parallelism, "completions": parallelism},
    }


def member(job_name: str, i: int, gpus: int = 2, node_name: str = "") -> dict[str, Any]:
    body = pod(f"{job_name}-{i}", gpus, node_name=node_name)
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": f"uid-{job_name}", "controller": True}
    ]
    return body


def created(fake: FakeApiServer) -> list[dict[str, Any]]:
    return [s.body for s in fake.requests("POST", "/podgroups")]


def from_api(fake: FakeApiServer, name: str) -> dict[str, Any]:
    return next(i for i in fake.custom["podgroups"] if i["metadata"]["name"] == name)


async def test_an_indexed_job_becomes_one_gang_created_once_and_lands_whole(
    fake: FakeApiServer, operator: Operator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publisher_module, "MEMBERS_GRACE_S", 0.0)  # short members are told at the first round
    fake.custom["jobs"] = [job("ddp", 3)]
    operator.set_leading(True)
    operator.node_event(node("gpu-0", gpus=4))
    operator.node_event(node("gpu-1", gpus=4))
    operator.listed()
    for i in range(2):
        operator.pod_event(member("ddp", i))
    await eventually(lambda: len(created(fake)) == 1)
    manifest = created(fake)[0]
    assert manifest["metadata"]["name"] == "job-ddp"
    assert manifest["spec"] == {"minMember": 3}
    assert manifest["metadata"]["ownerReferences"][0] == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "ddp",
        "uid": "uid-ddp",
        "controller": True,
    }
    operator.podgroup_event(from_api(fake, "job-ddp"))
    # 2 of 3 members: never placed alone; the members are told they wait for the third.
    operator.publish_status()
    await flushed(operator)
    assert waiting_for_gang(fake) == {"ddp-0", "ddp-1"}
    assert bound(fake) == {} and operator.cache.pod("default/ddp-0") is None
    operator.pod_event(member("ddp", 2))
    await eventually(lambda: len(bound(fake)) == 3)
    assert len(fake.requests("GET", "/jobs/ddp")) == 1  # the owner is read once
    assert len(created(fake)) == 1


async def test_only_the_leader_writes_and_a_new_leader_creates_what_it_saw(
    fake: FakeApiServer, operator: Operator
) -> None:
    fake.custom["jobs"] = [job("ddp", 2)]
    operator.node_event(node("gpu-0"))
    operator.listed()
    for i in range(2):
        operator.pod_event(member("ddp", i))
    await eventually(lambda: "ddp-0" not in operator.feed.ungrouped and "ddp-1" not in operator.feed.ungrouped)
    assert created(fake) == []
    operator.set_leading(True)
    await eventually(lambda: len(created(fake)) == 1)
    # Another replica made it first: 409 is done, nothing is retried.
    fake.custom["podgroups"] = [created(fake)[0]]
    operator.pod_event(member("ddp", 0))
    await settled(operator)  # a creation started would be answered by now
    assert len(created(fake)) == 1


async def test_an_existing_podgroup_is_not_written_again(fake: FakeApiServer, operator: Operator) -> None:
    fake.custom["jobs"] = [job("ddp", 2)]
    existing = {"metadata": {"name": "job-ddp", "namespace": "default", "uid": "uid-pg"}, "spec": {"minMember": 2}}
    fake.custom["podgroups"] = [existing]
    operator.podgroup_event(existing)
    operator.set_leading(True)
    operator.node_event(node("gpu-0"))
    operator.listed()
    for i in range(2):
        operator.pod_event(member("ddp", i))
    await eventually(lambda: len(bound(fake)) == 2)
    assert created(fake) == []


async def test_opt_out_and_bare_pods_are_single_and_take_the_namespace_queue(
    fake: FakeApiServer, operator: Operator
) -> None:
    fake.custom["jobs"] = [job("loose", 4, **{"gpusched.io/gang": "false"})]
    operator.namespace_event({"metadata": {"name": "default", "labels": {"gpusched.io/queue": "team-a"}}})
    operator.queue_event({"metadata": {"name": "team-a", "uid": "uid-q"}, "spec": {}})
    operator.set_leading(True)
    operator.node_event(node("gpu-0"))
    operator.listed()
    operator.pod_event(member("loose", 0))
    operator.pod_event(pod("bare", 1))
    await eventually(lambda: set(bound(fake)) == {"loose-0", "bare"})
    assert created(fake) == []
    assert operator.loop.queue_of(operator.cache.pod("default/bare").pod) == "team-a"  # type: ignore[union-attr]


async def test_the_gang_gets_the_namespace_queue(fake: FakeApiServer, operator: Operator) -> None:
    fake.custom["jobs"] = [job("ddp", 2)]
    operator.namespace_event({"metadata": {"name": "default", "labels": {"gpusched.io/queue": "team-a"}}})
    operator.set_leading(True)
    operator.listed()
    operator.pod_event(member("ddp", 0))
    await eventually(lambda: len(created(fake)) == 1)
    assert created(fake)[0]["spec"] == {"minMember": 2, "queue": "team-a"}


async def test_an_owner_read_that_fails_is_retried_and_the_pod_waits_meanwhile(
    fake: WorkloadApi, operator: Operator
) -> None:
    operator.feed.grouper.retry_s = 0.1
    fake.custom["jobs"] = [job("ddp", 1)]
    fake.unavailable = 3
    operator.set_leading(True)
    operator.node_event(node("gpu-0"))
    operator.listed()
    operator.pod_event(member("ddp", 0))
    # Two reads refused: the pod waits for its owner, never placed as a single pod meanwhile.
    await eventually(lambda: len(fake.requests("GET", "/jobs/ddp")) >= 2)
    assert "default/ddp-0" in operator.feed.ungrouped and operator.loop.job_of("default/ddp-0") is None
    assert bound(fake) == {}
    await eventually(lambda: len(created(fake)) == 1)
    operator.podgroup_event(from_api(fake, "job-ddp"))
    await eventually(lambda: "ddp-0" in bound(fake))
    assert len(fake.requests("GET", "/jobs/ddp")) == 4


async def test_a_scheduler_plugins_podgroup_is_a_gang(
    fake: FakeApiServer, operator: Operator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publisher_module, "MEMBERS_GRACE_S", 0.0)  # short members are told at the first round
    operator.set_leading(True)
    operator.node_event(node("gpu-0", gpus=4))
    operator.node_event(node("gpu-1", gpus=4))
    operator.compat_podgroup_event(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "nginx", "namespace": "default", "uid": "uid-x"},
            "spec": {"minMember": 3, "scheduleTimeoutSeconds": 10, "minResources": {"cpu": "3"}},
        }
    )
    operator.listed()
    labels = {"scheduling.x-k8s.io/pod-group": "nginx"}
    for i in range(2):
        operator.pod_event(pod(f"nginx-{i}", 2, labels=labels))
    operator.publish_status()
    await flushed(operator)
    assert waiting_for_gang(fake) == {"nginx-0", "nginx-1"}
    assert bound(fake) == {} and operator.cache.pod("default/nginx-0") is None
    operator.pod_event(pod("nginx-2", 2, labels=labels))
    await eventually(lambda: len(bound(fake)) == 3)
    gang = operator.loop.gang("default/nginx")
    group = gang.group if gang is not None else None
    assert group is not None
    assert (group.min_member, group.schedule_timeout_s) == (3, 10.0)
    assert created(fake) == []
