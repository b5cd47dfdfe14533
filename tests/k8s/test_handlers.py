"""kopf is set up so that it never writes to the objects it watches: no change handlers, no finalizers, no
progress or diff-base annotations, no Events of its own."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import kopf
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from scheduler.k8s import client as k8s
from scheduler.k8s import config as k8s_config
from scheduler.k8s.feeds import handlers
from scheduler.k8s.operator import LISTINGS, Operator
from tests.k8s.fakeapi import client_for, eventually
from tests.k8s.test_operator import podgroup


async def test_only_index_and_event_handlers_are_registered(client: k8s.Client) -> None:
    operator = Operator(client, k8s_config.parse({}), identity="test")
    reg = handlers.registry(operator, k8s.ClientSettings())
    watched = {h.selector.any_name for h in reg._watching.get_all_handlers() if h.selector is not None}
    indexed = {h.selector.any_name for h in reg._indexing.get_all_handlers() if h.selector is not None}
    # PodGroups have their own informer (handlers.podgroup_informer).
    assert watched == {"queues", "topologies", "reservations", "namespaces"}
    assert indexed == {"queues", "topologies", "reservations", "namespaces"}
    # Change handlers (create/update/delete/resume) would persist progress and may add finalizers; daemons
    # and timers would too.
    assert list(reg._changing.get_all_handlers()) == []
    assert list(reg._spawning.get_all_handlers()) == []


def test_kopf_stores_nothing_on_objects_and_posts_no_events() -> None:
    settings = handlers.settings()
    patch = kopf.Patch()
    body = kopf.Body({"metadata": {"name": "x", "annotations": {}}})
    settings.persistence.progress_storage.store(key="h", record={"started": "now"}, body=body, patch=patch)
    settings.persistence.progress_storage.touch(body=body, patch=patch, value="x")
    settings.persistence.diffbase_storage.store(body=body, patch=patch, essence={"spec": {}})
    assert dict(patch) == {}
    assert settings.persistence.progress_storage.fetch(key="h", body=body) is None
    assert not settings.posting.enabled
    assert settings.peering.standalone


class Discovery:
    """An API server's discovery of the CRDs' group, which a test changes: not served (404), then served."""

    def __init__(self) -> None:
        self.served: list[str] | None = None
        self.asked = 0
        #: The PodGroups listed (their watch never sends anything), and the listings asked for.
        self.podgroups: list[dict[str, Any]] = []
        self.listings = 0
        app = web.Application()
        app.router.add_get(f"/apis/{handlers.GROUP}/{handlers.VERSION}", self._resources)
        app.router.add_get(f"/apis/{handlers.GROUP}/{handlers.VERSION}/podgroups", self._podgroups)
        self.server = TestServer(app)

    async def _podgroups(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") in ("true", "1", "True"):
            await asyncio.sleep(3600)
        self.listings += 1
        listing = {"kind": "PodGroupList", "items": self.podgroups, "metadata": {"resourceVersion": "7"}}
        return web.json_response(listing)

    async def _resources(self, _: web.Request) -> web.Response:
        self.asked += 1
        if self.served is None:
            return web.json_response({"kind": "Status", "code": 404, "reason": "NotFound"}, status=404)
        resources = [{"name": name, "namespaced": name == "podgroups", "kind": name.title()} for name in self.served]
        resources += [{"name": f"{name}/status"} for name in self.served]
        return web.json_response({"kind": "APIResourceList", "resources": resources})


@pytest.fixture
async def discovery() -> AsyncIterator[tuple[Discovery, k8s.Client]]:
    d = Discovery()
    await d.server.start_server()
    c = client_for(f"http://{d.server.host}:{d.server.port}", timeout=2.0)
    yield d, c
    await c.close()
    await d.server.close()


async def test_watches_start_only_once_every_crd_is_served(
    discovery: tuple[Discovery, k8s.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A replica started while the API server comes up: kopf, which looks for resources once, must not look
    # before the CRDs are served (it would never serve them, and the replica would be ready with no queues).
    d, client = discovery
    spawned: list[dict[str, Any]] = []

    async def spawn_tasks(**kwargs: Any) -> list[asyncio.Task[Any]]:
        spawned.append(kwargs)
        return []

    async def run_tasks(tasks: Any, **_: Any) -> None:
        return None

    monkeypatch.setattr(kopf, "spawn_tasks", spawn_tasks)
    monkeypatch.setattr(kopf, "run_tasks", run_tasks)
    monkeypatch.setattr(handlers, "SERVED_RETRY_S", 0.01)
    operator = Operator(client, k8s_config.parse({}), identity="test")
    restored: list[bool] = []
    watching = asyncio.create_task(
        handlers.watch(
            operator, client, k8s.ClientSettings(), stop_flag=asyncio.Event(), started=lambda: restored.append(True)
        )
    )
    await eventually(lambda: d.asked >= 3)
    assert await handlers.not_served(client) == handlers.CRDS
    d.served = ["podgroups", "queues", "reservations"]  # the Topology CRD is not established yet
    asked = d.asked
    await eventually(lambda: d.asked >= asked + 3)
    assert await handlers.not_served(client) == {"topologies"}
    assert spawned == [] and not watching.done() and not operator.ready
    d.served = ["podgroups", "queues", "topologies", "reservations"]
    await asyncio.wait_for(watching, timeout=2)
    assert len(spawned) == 1 and restored == [True]
    indexed = {h.selector.any_name for h in spawned[0]["registry"]._indexing.get_all_handlers() if h.selector}
    # So the first Namespace event (readiness) waits for them all; PodGroups have their own informer, below.
    assert indexed == (handlers.CRDS - {handlers.PODGROUPS}) | {"namespaces"}


async def test_podgroups_are_listed_once_every_crd_is_served_and_their_listing_is_a_part_of_readiness(
    discovery: tuple[Discovery, k8s.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    d, client = discovery
    monkeypatch.setattr(handlers, "SERVED_RETRY_S", 0.01)
    operator = Operator(client, k8s_config.parse({}), identity="test")
    parts: list[str] = []
    operator.part_listed = parts.append
    d.podgroups = [podgroup("train", 2)]
    podgroups = handlers.podgroup_informer(client, operator)
    task = asyncio.create_task(podgroups.run())
    try:
        await eventually(lambda: d.asked >= 3)
        d.served = ["podgroups", "queues", "reservations"]  # the Topology CRD is not established yet
        asked = d.asked
        await eventually(lambda: d.asked >= asked + 3)
        assert d.listings == 0 and parts == []
        d.served = sorted(handlers.CRDS)
        await eventually(lambda: podgroups.listed.is_set())
        assert parts == [handlers.PODGROUPS] and handlers.PODGROUPS in LISTINGS
        assert operator.podgroup_keys() == ["default/train"] and d.listings == 1
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_stop_while_waiting_for_the_crds_ends_the_watches(
    discovery: tuple[Discovery, k8s.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    d, client = discovery

    async def spawn_tasks(**kwargs: Any) -> list[asyncio.Task[Any]]:
        raise AssertionError("kopf must not start: the CRDs are not served")

    monkeypatch.setattr(kopf, "spawn_tasks", spawn_tasks)
    operator = Operator(client, k8s_config.parse({}), identity="test")
    stop = asyncio.Event()
    watching = asyncio.create_task(handlers.watch(operator, client, k8s.ClientSettings(), stop_flag=stop))
    await eventually(lambda: d.asked >= 1)
    stop.set()
    await asyncio.wait_for(watching, timeout=1)


async def test_the_watch_and_the_informer_share_one_wait_for_the_crds(
    client: k8s.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # kopf's watch and the PodGroups' informer both wait for the CRDs; one discovery request a retry serves both, and
    # one of them cancelled leaves the other waiting. When the last leaves, nobody asks any more.
    looks: list[int] = []
    serving = False

    async def not_served(_: k8s.Client) -> frozenset[str]:
        looks.append(len(looks))
        return frozenset() if serving else handlers.CRDS

    monkeypatch.setattr(handlers, "not_served", not_served)
    monkeypatch.setattr(handlers, "SERVED_RETRY_S", 0.01)
    first = asyncio.create_task(handlers.served(client))
    second = asyncio.create_task(handlers.served(client))
    await eventually(lambda: len(looks) >= 5)
    assert len(handlers._SHARED) == 1 and handlers._SHARED[id(client)].waiting == 2
    first.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await first
    seen = len(looks)
    await eventually(lambda: len(looks) >= seen + 3)  # still looking, for the second
    assert not second.done()
    serving = True
    await asyncio.wait_for(second, timeout=2)
    assert handlers._SHARED == {}
    # Two waiters, both cancelled: the wait ends with them.
    serving = False
    waiters = [asyncio.create_task(handlers.served(client)) for _ in range(2)]
    await eventually(lambda: len(looks) >= seen + 6)
    poll = handlers._SHARED[id(client)].task
    for waiter in waiters:
        waiter.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    await asyncio.sleep(0)
    assert poll.cancelled() and handlers._SHARED == {}
    stopped_at = len(looks)
    await asyncio.sleep(0.05)
    assert len(looks) == stopped_at
