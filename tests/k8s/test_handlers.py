"""kopf is set up so that it never writes to the objects it watches: no change handlers, no finalizers, no
progress or diff-base annotations, no Events of its own."""

from __future__ import annotations

import kopf

from scheduler.k8s import client as k8s
from scheduler.k8s import config as k8s_config
from scheduler.k8s import handlers
from scheduler.k8s.operator import Operator


async def test_only_index_and_event_handlers_are_registered(client: k8s.Client) -> None:
    operator = Operator(client, k8s_config.parse({}), identity="test")
    reg = handlers.registry(operator, k8s.ClientSettings())
    watched = {h.selector.any_name for h in reg._watching.get_all_handlers() if h.selector is not None}
    indexed = {h.selector.any_name for h in reg._indexing.get_all_handlers() if h.selector is not None}
    assert watched == {"podgroups", "queues", "topologies", "namespaces"}
    assert indexed == {"podgroups", "queues", "topologies"}
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
