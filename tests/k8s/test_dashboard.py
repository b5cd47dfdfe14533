"""The dashboard of ``gpusched run``: the operator's state as pages, their polls, the access checks, a standby."""

from __future__ import annotations

import argparse
import datetime
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.devices import numa as api_numa
from scheduler.dashboard import access, server, view
from scheduler.k8s import status as k8s_status
from scheduler.k8s.operator import Operator
from scheduler.k8s.serve import dashboard, dashboard_options, explain
from tests.api.test_numa import nrt
from tests.k8s.test_operator import flushed, node, pod, podgroup

QUEUE = "gpusched.io/queue"
GROUP = {"gpusched.io/pod-group": "train"}


def shared_pod(name: str, milli: int, node_name: str, queue: str) -> dict[str, Any]:
    body = pod(name, 1, node_name=node_name, labels={QUEUE: queue})
    body["metadata"]["annotations"] = {"gpusched.io/gpu-milli": str(milli), "gpusched.io/gpu-ids": "1"}
    return body


@pytest.fixture
def operator(leader: Operator) -> Operator:
    leader.node_event(node("gpu-a", gpus=4))
    leader.node_event(node("gpu-b", gpus=2))
    leader.queue_event({"metadata": {"name": "ml"}, "spec": {"guaranteed": {"nvidia.com/gpu": "4"}}})
    leader.queue_event({"metadata": {"name": "team-a"}, "spec": {"parent": "ml", "limit": {"nvidia.com/gpu": "3"}}})
    leader.pod_event(pod("big", 3, node_name="gpu-a", labels={QUEUE: "team-a"}))
    leader.pod_event(shared_pod("half", 500, "gpu-b", "team-a"))
    leader.podgroup_event(podgroup("train", 2))
    leader.pod_event(pod("train-0", 4, labels=GROUP))
    leader.pod_event(pod("train-1", 4, labels=GROUP))
    leader.pod_event(pod("solo", 8))
    leader.listed()
    leader.loop.run_until_idle()
    return leader


def test_the_map_shows_every_gpu_by_queue_whole_shared_and_idle(operator: Operator) -> None:
    cluster = dashboard.OperatorSource(operator).cluster_map()
    by_name = {n.name: n for n in cluster.nodes}
    a = [cell.state for cell in by_name["gpu-a"].cells]
    assert sorted(a) == [view.IDLE, view.WHOLE, view.WHOLE, view.WHOLE]
    assert {cell.queue for cell in by_name["gpu-a"].cells if cell.state == view.WHOLE} == {"team-a"}
    assert {cell.pods for cell in by_name["gpu-a"].cells if cell.state == view.WHOLE} == {("default/big",)}
    b = by_name["gpu-b"].cells
    assert (b[1].state, b[1].used_milli, b[1].pods) == (view.SHARED, 500, ("default/half",))
    # Idle but stranded by the FGD measure: half of gpu-b's idle GPU capacity is fragment for the typical pods.
    assert b[0].state == (view.STRANDED if by_name["gpu-b"].fragmentation_milli >= 750 else view.IDLE)


def test_idle_gpus_beside_no_cpu_are_stranded_and_an_empty_node_is_not(operator: Operator) -> None:
    operator.node_event(node("gpu-c", gpus=2))
    operator.node_event(node("gpu-d", gpus=8))
    operator.pod_event(pod("cpu-hog", 0, cpu="64", node_name="gpu-c"))
    by_name = {n.name: n for n in dashboard.OperatorSource(operator).cluster_map().nodes}
    assert [cell.state for cell in by_name["gpu-c"].cells] == [view.STRANDED] * 2
    assert by_name["gpu-c"].fragmentation_milli == 2000
    assert [cell.state for cell in by_name["gpu-d"].cells] == [view.IDLE] * 8
    assert by_name["gpu-d"].fragmentation_milli < 4000  # under half its idle capacity


def test_the_queues_are_their_status_as_kubectl_shows_it(operator: Operator) -> None:
    rows = {row.name: row for row in dashboard.OperatorSource(operator).queues()}
    assert [(rows[n].parent, rows[n].depth) for n in ("ml", "team-a")] == [("", 0), ("ml", 1)]
    statuses = operator.loop.queue_statuses()
    assert rows["team-a"].status == k8s_status.queue_status(statuses["team-a"])
    assert rows["team-a"].status["allocated"]["nvidia.com/gpu"] == "3.5"  # type: ignore[index]
    assert rows["ml"].guarantee == {"nvidia.com/gpu": "4"} and rows["team-a"].limit == {"nvidia.com/gpu": "3"}


def test_a_queues_gpus_are_its_status_numbers_with_what_it_may_lend(operator: Operator) -> None:
    rows = {row.name: row for row in dashboard.OperatorSource(operator).queues()}
    team, ml = rows["team-a"].gpus, rows["ml"].gpus
    assert team is not None and ml is not None
    # team-a holds a pod of 3 GPUs and half a shared GPU under its limit of 3; ml (its parent) guarantees 4.
    assert (team.allocated, team.guarantee, team.limit) == (3.5, 0, 3)
    assert (ml.allocated, ml.guarantee, ml.limit, ml.borrowed, ml.lendable, ml.lent) == (3.5, 4, None, 0, 0.5, 0)


def test_waiting_work_says_the_gpus_each_pod_asks_and_how_long_it_waited(operator: Operator) -> None:
    created = pod("solo", 8)["metadata"]["creationTimestamp"]
    start = datetime.datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
    operator.clock = lambda: start + 720
    by_key = {job.key: job for job in dashboard.OperatorSource(operator).waiting()}
    assert (by_key["pod/default/solo"].gpus, by_key["pod/default/solo"].waited_s) == (8, 720)
    assert (by_key["podgroup/default/train"].gpus, by_key["podgroup/default/train"].waited_s) == (4, 720)


async def test_the_history_keeps_a_sample_a_minute_and_the_map_page_charts_it(
    operator: Operator, http: aiohttp.ClientSession
) -> None:
    now = [1_000_000.0]
    operator.clock = lambda: now[0]
    source = dashboard.OperatorSource(operator)
    assert source.sample() and not source.sample()  # the second within the minute is dropped
    operator.pod_event(pod("more", 1, node_name="gpu-b", labels={QUEUE: "team-a"}))
    now[0] += 60
    assert source.sample()
    kept = source.history()
    assert [(s.at - 1_000_000, s.gpus, s.allocated, s.pods_waiting) for s in kept] == [
        (0, 6, 3.5, 3),
        (60, 6, 4.5, 3),
        (60, 6, 4.5, 3),  # the present, last
    ]
    running = await server.serve(source, port=0, host="127.0.0.1")
    try:
        async with http.get(f"http://127.0.0.1:{running.port}/") as answer:
            text = await answer.text()
        assert '<figure class=trend data-chart="allocated" data-now="4.5" data-points=3>' in text
        assert "4.5 GPUs of 6 (75%)" in text and "the last 1 min" in text
    finally:
        await running.close()


def test_no_sample_before_the_first_listing_is_in(leader: Operator) -> None:
    unlisted = leader
    unlisted.node_event(node("gpu-a", gpus=4))
    source = dashboard.OperatorSource(unlisted)
    assert not source.sample() and source.history()[:-1] == []
    unlisted.listed()
    assert source.sample() and [s.gpus for s in source.history()] == [4, 4]


async def test_the_served_dashboard_samples_until_it_closes(operator: Operator) -> None:
    args = argparse.Namespace(dashboard_port=0, dashboard_auth="none", dashboard_token_file=None)
    running = await dashboard.serve(args, operator, host="127.0.0.1")
    assert running is not None
    sampler = running.tasks[0]
    await running.close()
    assert sampler.cancelled()


def test_waiting_work_in_order_with_its_reason_and_the_gangs_progress(operator: Operator) -> None:
    waiting = dashboard.OperatorSource(operator).waiting()
    by_key = {job.key: job for job in waiting}
    gang = by_key["podgroup/default/train"]
    assert (gang.kind, gang.min_member, gang.placed, gang.exist, gang.queue) == ("podgroup", 2, 0, 2, "default")
    assert gang.reason  # the gang's condition says why
    solo = by_key["pod/default/solo"]
    assert solo.reason == operator.conditions.said["default/solo"] and "8" in solo.reason
    assert [job.key for job in waiting] == [key for key in by_key]  # one row per job


async def test_a_jobs_page_is_explains_answer_with_its_members(operator: Operator) -> None:
    source = dashboard.OperatorSource(operator)
    page = source.job("podgroup", "default", "train")
    assert page is not None
    assert page.explanation == explain.answer(operator, "podgroup/train", "default")
    assert [(m.key, m.node, m.state) for m in page.members] == [
        ("default/train-0", "", "pending"),
        ("default/train-1", "", "pending"),
    ]
    await flushed(operator)  # the Events written
    page = source.job("podgroup", "default", "train")
    assert page is not None and page.events
    # The gang's own Events first, then its members', each line naming its object.
    assert page.events[0].startswith("podgroup default/train: Warning FailedScheduling (x1): Never fits"), page.events
    assert all(line.startswith(("podgroup default/train: ", "pod default/train-")) for line in page.events)
    placed = source.job("pod", "default", "big")
    assert placed is not None and placed.members[0].node == "gpu-a"
    assert source.job("pod", "default", "nobody") is None


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def started(operator: Operator, access_check: access.Access | None = None, **source: Any) -> server.Running:
    return await server.serve(
        dashboard.OperatorSource(operator, **source), port=0, host="127.0.0.1", access=access_check
    )


async def test_a_poll_gets_nothing_until_a_pod_binds_then_the_new_map(
    operator: Operator, http: aiohttp.ClientSession
) -> None:
    running = await started(operator)
    try:
        url = f"http://127.0.0.1:{running.port}/"
        async with http.get(url) as first:
            text = await first.text()
            version = first.headers[server.VERSION_HEADER]
        assert first.status == 200 and 'data-node="gpu-a"' in text and "<script>" in text
        assert re.search(r"data-whole=3 ", text) and "data-shared=1" in text
        async with http.get(url, headers={server.VERSION_HEADER: version}) as same:
            assert same.status == 204
        operator.pod_event(pod("more", 1, node_name="gpu-b", labels={QUEUE: "team-a"}))
        async with http.get(url, headers={server.VERSION_HEADER: version}) as changed:
            fragment = await changed.text()
        assert changed.status == 200 and "<html>" not in fragment and "data-whole=4 " in fragment
        async with http.post(url) as written:
            assert written.status == 405  # read-only
    finally:
        await running.close()


async def test_a_token_opens_it_and_a_link_token_becomes_a_cookie(
    operator: Operator, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    secret = tmp_path / "token"
    secret.write_text("s3cret\n")
    running = await started(operator, access.SharedToken.from_file(str(secret)))
    try:
        base = f"http://127.0.0.1:{running.port}"
        async with http.get(f"{base}/queues") as none:
            assert none.status == 401 and "bearer token" in await none.text()
        async with http.get(f"{base}/queues", headers={"Authorization": "Bearer wrong"}) as wrong:
            assert wrong.status == 401
        async with http.get(f"{base}/queues", headers={"Authorization": "Bearer s3cret"}) as right:
            assert right.status == 200 and 'data-queue="team-a"' in await right.text()
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:  # an IP's cookies
            async with browser.get(f"{base}/waiting?token=s3cret", allow_redirects=False) as link:
                assert link.status == 302 and link.headers["Location"] == "/waiting"
                assert "HttpOnly" in link.headers["Set-Cookie"] and "SameSite=Strict" in link.headers["Set-Cookie"]
            async with browser.get(f"{base}/waiting") as cookie:
                assert cookie.status == 200 and "default/train" in await cookie.text()
    finally:
        await running.close()


async def test_a_standby_sends_viewers_to_the_leader_or_says_who_leads(
    operator: Operator, http: aiohttp.ClientSession
) -> None:
    operator.set_leading(False)
    known = await started(operator, leader=lambda: ("gpusched-1", "http://10.0.0.9:8082"))
    unknown = await started(operator, leader=lambda: ("gpusched-1", ""))
    try:
        async with http.get(f"http://127.0.0.1:{known.port}/queues", allow_redirects=False) as sent:
            assert sent.status == 302 and sent.headers["Location"] == "http://10.0.0.9:8082/queues"
        async with http.get(f"http://127.0.0.1:{unknown.port}/") as told:
            text = await told.text()
        assert "standby" in text and "gpusched-1" in text and 'data-node="gpu-a"' not in text
    finally:
        await known.close()
        await unknown.close()


async def test_a_local_copy_shows_its_own_view_without_leading(operator: Operator, http: aiohttp.ClientSession) -> None:
    operator.set_leading(False)
    running = await started(operator, observer=True)
    try:
        async with http.get(f"http://127.0.0.1:{running.port}/") as page:
            text = await page.text()
        assert 'data-node="gpu-a"' in text and "local copy" in text
    finally:
        await running.close()


async def test_hidden_namespaces_show_no_names(operator: Operator, http: aiohttp.ClientSession) -> None:
    class OnlyOther:
        async def viewer(self, request: aiohttp.web.Request) -> view.Redacted:
            return view.Redacted(namespaces=frozenset({"other"}), user="alice")

    running = await started(operator, OnlyOther())
    try:
        base = f"http://127.0.0.1:{running.port}"
        async with http.get(f"{base}/waiting") as waiting:
            text = await waiting.text()
        assert "default/train" not in text and "in namespaces you may not list" in text and "alice" in text
        async with http.get(f"{base}/") as cluster:
            text = await cluster.text()
        assert "default/big" not in text and "(hidden)" in text
        async with http.get(f"{base}/job/podgroup/default/train") as job:
            assert job.status == 403
    finally:
        await running.close()


def test_arguments_that_do_not_go_together_are_refused_before_anything_starts(tmp_path: Path) -> None:
    def args(**given: Any) -> argparse.Namespace:
        return argparse.Namespace(**{"dashboard_auth": None, "dashboard_token_file": None, **given})

    dashboard_options.check_arguments(args())
    with pytest.raises(InvalidObject, match="needs --dashboard-token-file"):
        dashboard_options.check_arguments(args(dashboard_auth="token"))
    with pytest.raises(InvalidObject, match="is for --dashboard-auth=token, not kubernetes"):
        dashboard_options.check_arguments(args(dashboard_auth="kubernetes", dashboard_token_file="x"))
    with pytest.raises(InvalidObject, match="cannot read"):
        dashboard_options.check_arguments(args(dashboard_token_file=str(tmp_path / "missing")))
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(InvalidObject, match="empty"):
        dashboard_options.check_arguments(args(dashboard_token_file=str(empty)))


def test_a_nodes_numa_zones_show_what_is_left_by_the_schedulers_count_and_the_policy(operator: Operator) -> None:
    operator.node_event(node("numa-a", gpus=8))
    policy = [{"name": "topologyManagerPolicy", "value": "single-numa-node"}]
    operator.cache.numa.upsert(api_numa.parse_node_resource_topology(nrt("numa-a", attributes=policy)))
    # Bound a moment ago: the object still says every GPU is free; the scheduler counts 3 gone from zone 0.
    operator.pod_event(pod("three", 3, node_name="numa-a"))
    by_name = {n.name: n for n in dashboard.OperatorSource(operator).cluster_map().nodes}
    shown = by_name["numa-a"]
    assert shown.numa_policy == "single-numa-node (container scope)"
    assert [(z.name, [(a.resource, a.available, a.allocatable) for a in z.amounts]) for z in shown.zones] == [
        ("node-0", [("cpu", "30", "30"), ("memory", "256Gi", "256Gi"), ("nvidia.com/gpu", "1", "4")]),
        ("node-1", [("cpu", "30", "30"), ("memory", "256Gi", "256Gi"), ("nvidia.com/gpu", "4", "4")]),
    ]
    assert by_name["gpu-a"].zones == ()  # no NodeResourceTopology: no zones shown
