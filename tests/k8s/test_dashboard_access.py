"""The dashboard's Kubernetes access check against an API server that answers TokenReviews and
SubjectAccessReviews: who is let in, which namespaces they see, what is kept, and that no answer means no entry."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer, make_mocked_request

from scheduler.dashboard import view
from scheduler.k8s import client as k8s
from scheduler.k8s.serve.dashboard_access import TTL_S, KubernetesAccess
from tests.k8s.fakeapi import client_for

#: token -> user; user -> the namespaces where it may list pods (``*``: the dashboard itself).
USERS = {"alice-token": "alice", "bob-token": "bob"}
RIGHTS = {"alice": {"*", "team-a"}, "bob": {"team-b"}}


class Reviewer:
    def __init__(self) -> None:
        self.reviews: list[dict[str, Any]] = []
        self.broken = False

    async def token_review(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.reviews.append(body)
        if self.broken:
            return web.json_response({"kind": "Status", "message": "etcd is down"}, status=500)
        user = USERS.get(body["spec"]["token"])
        status = {"authenticated": True, "user": {"username": user, "groups": ["team"]}} if user else {"error": "no"}
        return web.json_response({**body, "status": status}, status=201)

    async def access_review(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.reviews.append(body)
        spec = body["spec"]
        rights = RIGHTS.get(spec["user"], set())
        if "nonResourceAttributes" in spec:
            allowed = spec["nonResourceAttributes"] == {"path": "/dashboard", "verb": "get"} and "*" in rights
        else:
            attributes = spec["resourceAttributes"]
            allowed = (attributes["verb"], attributes["resource"]) == ("list", "pods") and attributes[
                "namespace"
            ] in rights
        return web.json_response({**body, "status": {"allowed": allowed}}, status=201)


@pytest.fixture
async def reviewer() -> AsyncIterator[tuple[Reviewer, k8s.Client]]:
    fake = Reviewer()
    app = web.Application()
    app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", fake.token_review)
    app.router.add_post("/apis/authorization.k8s.io/v1/subjectaccessreviews", fake.access_review)
    server = TestServer(app)
    await server.start_server()
    client = client_for(str(server.make_url("")).rstrip("/"), timeout=2.0)
    yield fake, client
    await client.close()
    await server.close()


def request(token: str = "", *, cookie: bool = False) -> web.Request:
    headers = {}
    if token and cookie:
        headers["Cookie"] = f"gpusched-dashboard-token={token}"
    elif token:
        headers["Authorization"] = f"Bearer {token}"
    return make_mocked_request("GET", "/waiting", headers=headers)


async def test_a_viewer_sees_the_namespaces_where_it_may_list_pods(reviewer: tuple[Reviewer, k8s.Client]) -> None:
    fake, client = reviewer
    now = [0.0]
    access = KubernetesAccess(client, namespaces=lambda: {"team-a", "team-b"}, clock=lambda: now[0])
    alice = await access.viewer(request("alice-token"))
    assert isinstance(alice, view.Redacted)
    assert (alice.user, alice.namespaces) == ("alice", frozenset({"team-a"}))
    assert alice.may_see("team-a") and not alice.may_see("team-b")
    asked = len(fake.reviews)
    assert asked == 4  # the token, the dashboard, two namespaces
    again = await access.viewer(request("alice-token", cookie=True))
    assert isinstance(again, view.Redacted) and len(fake.reviews) == asked  # kept: a poll asks nothing
    now[0] += TTL_S + 1
    await access.viewer(request("alice-token"))
    assert len(fake.reviews) == asked + 4  # asked again once the answers are old


async def test_no_token_an_unknown_one_or_no_right_to_the_dashboard_is_refused(
    reviewer: tuple[Reviewer, k8s.Client],
) -> None:
    _, client = reviewer
    access = KubernetesAccess(client, namespaces=lambda: {"team-b"})
    for given, status, says in (
        ("", 401, "needs a Kubernetes bearer token"),
        ("stolen", 401, "does not know this token"),
        ("bob-token", 403, "bob may not open the dashboard"),
    ):
        answer = await access.viewer(request(given))
        assert isinstance(answer, web.Response) and answer.status == status, given
        assert says in str(answer.text)


async def test_a_refusal_is_kept_too(reviewer: tuple[Reviewer, k8s.Client]) -> None:
    fake, client = reviewer
    access = KubernetesAccess(client, namespaces=lambda: {"team-b"})
    for _ in range(3):
        answer = await access.viewer(request("bob-token"))
        assert isinstance(answer, web.Response) and answer.status == 403
    assert len(fake.reviews) == 2  # one TokenReview, one SubjectAccessReview


async def test_an_api_server_that_cannot_answer_lets_nobody_in(reviewer: tuple[Reviewer, k8s.Client]) -> None:
    fake, client = reviewer
    fake.broken = True
    answer = await KubernetesAccess(client, namespaces=lambda: set()).viewer(request("alice-token"))
    assert isinstance(answer, web.Response) and answer.status == 503 and "etcd is down" in str(answer.text)
