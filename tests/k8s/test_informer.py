"""The pod informer: a paged listing, then watch events, and a relist that notices what went unseen."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import pytest

from scheduler.k8s import client as k8s
from scheduler.k8s import config as k8s_config
from scheduler.k8s.feeds.informer import Informer, _status_message
from scheduler.k8s.operator import Operator
from tests.k8s.fakeapi import FakeApiServer, eventually
from tests.k8s.test_operator import node, pod


@pytest.fixture
async def fed(client: k8s.Client) -> AsyncIterator[tuple[Operator, Informer]]:
    op = Operator(client, k8s_config.parse({}), identity="test")
    op.node_event(node("gpu-0", gpus=8))
    listed: list[str] = []
    informer = Informer(
        client,
        kind="pods",
        list_method=client.core.list_pod_for_all_namespaces,
        on_event=op.pod_event,
        known=op.held_pods,
        on_listed=listed.append,
        page=2,
        retry_seconds=0.05,
    )
    task = asyncio.create_task(informer.run())
    yield op, informer
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert listed == ["pods"]  # once, however many relists


def gpus_used(op: Operator) -> int:
    return sum(e.pod.gpu.count for e in op.cache.pods())


async def test_list_in_pages_then_watch_then_relist(fake: FakeApiServer, fed: tuple[Operator, Informer]) -> None:
    op, informer = fed
    fake.pods = {
        "default/a": pod("a", 2, node_name="gpu-0"),
        "default/b": pod("b", 3, scheduler="default-scheduler", node_name="gpu-0"),
        "default/c": pod("c", 1),
    }
    await eventually(lambda: informer.listed.is_set())
    assert gpus_used(op) == 5 and set(op.pending) == {"default/c"}
    assert informer.resource_version == "100"

    # Watch: c is bound, a is deleted.
    await fake.pod_watch.put(
        (
            "MODIFIED",
            {**pod("c", 1, node_name="gpu-0"), "metadata": {**pod("c", 1)["metadata"], "resourceVersion": "101"}},
        )
    )
    await fake.pod_watch.put(("DELETED", fake.pods.pop("default/a")))
    await eventually(lambda: gpus_used(op) == 4 and not op.pending)

    # The watch is too old: b goes while nobody watches; the relist notices it is missing.
    del fake.pods["default/b"]
    fake.pods["default/c"] = pod("c", 1, node_name="gpu-0")
    await fake.pod_watch.put(("ERROR", 410))
    await eventually(lambda: informer.stats["lists"] == 2)
    assert op.held_pods() == {"default/c"} and gpus_used(op) == 1


async def test_a_watch_cut_off_resumes_after_the_last_event_it_fed(
    fake: FakeApiServer, fed: tuple[Operator, Informer]
) -> None:
    # An API server killed mid-watch: the next watch starts after the last event fed, not from where the cut
    # watch began (which replayed every event of it, old states of pods included).
    op, informer = fed
    fake.pods = {"default/c": pod("c", 1)}
    await eventually(lambda: informer.listed.is_set())
    bound_c = {**pod("c", 1, node_name="gpu-0"), "metadata": {**pod("c", 1)["metadata"], "resourceVersion": "107"}}
    await fake.pod_watch.put(("MODIFIED", bound_c))
    await eventually(lambda: not op.pending)
    await fake.pod_watch.put(("CUT", None))
    await eventually(lambda: len(fake.watch_versions) == 2)
    assert fake.watch_versions == ["100", "107"]


async def test_events_cut_across_writes_or_sent_together_are_each_fed_once(
    fake: FakeApiServer, fed: tuple[Operator, Informer]
) -> None:
    # The API server's chunks need not follow its lines: one event may come in pieces, several in one piece, and the
    # piece that ends one event may begin the next. Each is fed once, whole, in order.
    op, informer = fed
    fake.pods = {f"default/p{i}": pod(f"p{i}", 1) for i in range(4)}
    await eventually(lambda: informer.listed.is_set())
    lines = [
        json.dumps(
            {
                "type": "MODIFIED",
                "object": {
                    **pod(f"p{i}", 1, node_name="gpu-0"),
                    "metadata": {**pod(f"p{i}", 1)["metadata"], "resourceVersion": str(101 + i)},
                },
            }
        ).encode()
        + b"\n"
        for i in range(4)
    ]
    stream = b"".join(lines)
    first = len(lines[0])
    # p0 in three pieces (the last one also carrying the start of p1), then p1's rest with p2 and p3 whole.
    for piece in (stream[:10], stream[10 : first - 1], stream[first - 1 : first + 5], stream[first + 5 :]):
        await fake.pod_watch.put(("BYTES", piece))
    await eventually(lambda: not op.pending)
    assert gpus_used(op) == 4
    assert informer.stats["events"] == 4 and informer.resource_version == "104"


def test_a_refused_watch_says_the_whole_status_message() -> None:
    # The operator reads which right is missing from the message's end; 200 bytes of the body cut it before the verb.
    message = (
        'noderesourcetopologies.topology.node.k8s.io is forbidden: User "system:serviceaccount:gpusched-system:'
        'gpusched" cannot watch resource "noderesourcetopologies" in API group "topology.node.k8s.io" at the '
        "cluster scope"
    )
    body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": 403})
    assert _status_message(body.encode()) == message
    assert _status_message(b"<html>bad gateway</html>") == "b'<html>bad gateway</html>'"
