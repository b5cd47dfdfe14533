"""On a cluster without an optional API (resource.k8s.io/v1 before Kubernetes 1.34) `gpusched run` looks once, says so
once, does not list it, becomes ready, schedules the other pods, and tells a pod with ResourceClaims why it waits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog
from aiohttp import web
from aiohttp.test_utils import TestServer

from scheduler.k8s import client as k8s
from scheduler.k8s import run
from scheduler.k8s.feeds import discovery, handlers
from scheduler.k8s.operator import Operator
from tests.k8s.fakeapi import client_for, eventually
from tests.k8s.fakeapi import status as api_status
from tests.k8s.test_dra import dra_pod
from tests.k8s.test_operator import bound, node, pod
from tests.k8s.test_run import QuietFakeApi, Started, arguments, config

DRA_PATH = "/apis/resource.k8s.io/v1"


class Cluster(QuietFakeApi):
    """Every kind `gpusched run` lists (empty unless a test puts objects in), each watch staying open: a replica on it
    becomes ready, and then sends no request but its lease's."""

    def __init__(self) -> None:
        super().__init__()
        for plural in ("services", "persistentvolumeclaims", "persistentvolumes"):
            self._server.app.router.add_get(f"/api/v1/{plural}", self._list_core)

    async def _list_core(self, request: web.Request) -> web.StreamResponse:
        return await self._listing(request, [])

    async def _list_custom(self, request: web.Request) -> web.StreamResponse:  # type: ignore[override]  # a stream
        self.reads.append(request.path)
        missing = self._unserved(request)
        if missing is not None:
            return missing
        return await self._listing(request, self.custom.get(request.match_info["plural"], []))

    async def _listing(self, request: web.Request, items: list[dict[str, Any]]) -> web.StreamResponse:
        if request.query.get("watch") not in ("true", "1", "True"):
            return web.json_response({"items": items, "metadata": {"resourceVersion": "1"}})
        response = web.StreamResponse()
        await response.prepare(request)
        await self._release.wait()
        return response


@pytest.fixture
async def cluster() -> Any:
    server = Cluster()
    await server.start()
    yield server
    await server.close()


def without_kopf(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's watches (tested in tests/k8s/test_handlers.py) replaced by their outcome on a cluster with no PodGroup,
    Queue or Topology: the custom resources are listed at once; the CRDs are served, so the PodGroups' informer lists
    (none) at once."""

    async def watch(operator: Operator, *_: Any, stop_flag: asyncio.Event, started: Any = None, **__: Any) -> None:
        if started is not None:
            started()
        operator.part_listed("custom resources")
        await stop_flag.wait()

    async def served(*_: Any, **__: Any) -> None:
        return None

    monkeypatch.setattr(handlers, "watch", watch)
    monkeypatch.setattr(handlers, "wait_until_served", served)


def scheduling_condition(cluster: Cluster, name: str) -> dict[str, Any] | None:
    """The PodScheduled condition last written on the pod, if any."""
    for seen in reversed(cluster.requests("PATCH", f"/pods/{name}/status")):
        for condition in (seen.body.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "PodScheduled":
                return dict(condition)
    return None


async def test_without_the_dra_api_the_replica_is_ready_lists_no_devices_and_the_claiming_pod_is_told_why(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster.unserved.add("resource.k8s.io/v1")
    cluster.nodes = [node("gpu-0")]
    cluster.pods = {"default/plain": pod("plain", 1), "default/p": dra_pod("p", "p-gpus", shared=True)}
    without_kopf(monkeypatch)
    started = Started(monkeypatch, cluster.url)
    stop = asyncio.Event()
    with structlog.testing.capture_logs() as logs:
        serving = asyncio.create_task(run.serve(arguments(), config(), stop=stop))
        await eventually(lambda: bool(started.operators) and started.operators[0].ready, timeout=10)
        (operator,) = started.operators
        # The device-plugin pod is placed; the pod with a ResourceClaim is not placed without its devices, and is
        # told why.
        await eventually(lambda: "plain" in bound(cluster), timeout=10)
        await eventually(lambda: "does not serve" in str((scheduling_condition(cluster, "p") or {}).get("message")), 10)
        # A few seconds more: an informer whose listing fails tries again every second.
        await asyncio.sleep(2.5)
        stop.set()
        assert await asyncio.wait_for(serving, timeout=15) == 0
    assert "p" not in bound(cluster)
    condition = scheduling_condition(cluster, "p")
    assert condition is not None and condition["status"] == "False"
    assert "the cluster does not serve resource.k8s.io/v1 (Kubernetes 1.34+)" in condition["message"]
    # Asked once; nothing of the API listed or watched.
    assert [path for path in cluster.reads if path.startswith(DRA_PATH)] == [DRA_PATH]
    said = [entry for entry in logs if entry.get("group_version") == "resource.k8s.io/v1"]
    assert [(entry["log_level"], entry["event"]) for entry in said] == [("warning", "API not served; feature off")]
    assert said[0]["off"] == "dynamic resource allocation (ResourceClaims)"
    exposed = operator.metrics.exposition().decode()
    assert 'gpusched_api_available{group_version="resource.k8s.io/v1"} 0.0' in exposed


async def test_with_the_dra_api_its_kinds_are_listed_and_it_says_so(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_kopf(monkeypatch)
    started = Started(monkeypatch, cluster.url)
    stop = asyncio.Event()
    serving = asyncio.create_task(run.serve(arguments(), config(), stop=stop))
    await eventually(lambda: bool(started.operators) and started.operators[0].cache.devices.listed, timeout=10)
    (operator,) = started.operators
    stop.set()
    assert await asyncio.wait_for(serving, timeout=15) == 0
    assert operator.cache.devices.unavailable == ""
    listed = {path.rsplit("/", 1)[-1] for path in cluster.reads if path.startswith(f"{DRA_PATH}/")}
    assert listed == {"deviceclasses", "resourceslices", "resourceclaims"}
    exposed = operator.metrics.exposition().decode()
    assert 'gpusched_api_available{group_version="resource.k8s.io/v1"} 1.0' in exposed


class Discovery:
    """A group version's discovery answering, in order, what a test queues (then 404)."""

    def __init__(self, *answers: tuple[int, dict[str, Any]]) -> None:
        self.answers = list(answers)
        self.asked = 0
        app = web.Application()
        app.router.add_get(DRA_PATH, self._answer)
        self.server = TestServer(app)

    async def _answer(self, _: web.Request) -> web.Response:
        self.asked += 1
        code, body = self.answers.pop(0) if self.answers else (404, api_status(404, "NotFound"))
        return web.json_response(body, status=code)


def resources(*names: str) -> dict[str, Any]:
    return {"kind": "APIResourceList", "resources": [{"name": name} for name in names]}


@pytest.mark.parametrize(
    ("answers", "served", "asked"),
    [
        # An API server coming up (no answer, 503) is asked again until it says.
        ([(503, api_status(503)), (503, api_status(503)), (200, resources(*discovery.DRA.resources))], True, 3),
        ([(503, api_status(503))], False, 2),
        # A group version without one of the kinds the feature reads does not do.
        ([(200, resources("deviceclasses", "resourceclaims"))], False, 1),
        # Discovery refused says nothing about the API: the feature stays on, as it was before the look.
        ([(403, api_status(403, "Forbidden"))], True, 1),
    ],
)
async def test_only_a_definite_answer_decides(
    answers: list[tuple[int, dict[str, Any]]], served: bool, asked: int
) -> None:
    server = Discovery(*answers)
    await server.server.start_server()
    client: k8s.Client = client_for(f"http://{server.server.host}:{server.server.port}", timeout=2.0)
    try:
        assert await discovery.served(client, discovery.DRA, retry_s=0.01) is served
    finally:
        await client.close()
        await server.server.close()
    assert server.asked == asked
