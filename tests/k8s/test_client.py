"""The client: configuration from a kubeconfig, the shared token bucket, answers instead of exceptions."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio import client as kc

from scheduler.api.basics.errors import InvalidObject
from scheduler.k8s import client as k8s
from tests.k8s.fakeapi import client_for


def test_rate_limiter_reserves_in_order() -> None:
    now = [0.0]
    limiter = k8s.RateLimiter(qps=10, burst=3, clock=lambda: now[0])
    waits = [limiter.reserve() for _ in range(5)]
    assert waits == pytest.approx([0, 0, 0, 0.1, 0.2])
    now[0] = 1.0  # a second later the debt is paid and the bucket refilled up to the burst
    assert [limiter.reserve() for _ in range(4)] == pytest.approx([0, 0, 0, 0.1])
    limiter.cancel()  # a waiter that gave up returns its token
    assert limiter.reserve() == pytest.approx(0.1)
    assert k8s.RateLimiter(qps=0, burst=1).reserve() == 0


async def test_configuration_from_a_kubeconfig_context(tmp_path: Path) -> None:
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "a", "cluster": {"server": "https://a.example:6443"}},
            {"name": "b", "cluster": {"server": "https://b.example:6443"}},
        ],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [
            {"name": "ctx-a", "context": {"cluster": "a", "user": "u"}},
            {"name": "ctx-b", "context": {"cluster": "b", "user": "u"}},
        ],
        "current-context": "ctx-a",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(kubeconfig))
    default = await k8s.configuration(k8s.ClientSettings(kubeconfig=str(path)))
    chosen = await k8s.configuration(k8s.ClientSettings(kubeconfig=str(path), context="ctx-b", connections=7))
    assert default.host == "https://a.example:6443"
    assert chosen.host == "https://b.example:6443"
    assert chosen.connection_pool_maxsize == 7 + k8s.WATCH_CONNECTIONS  # the requests' and the watches'


async def test_a_kubeconfig_that_cannot_be_used_is_named_with_what_is_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def error(kubeconfig: str | None, context: str | None = None) -> str:
        with pytest.raises(InvalidObject) as caught:
            await k8s.configuration(k8s.ClientSettings(kubeconfig=kubeconfig, context=context))
        return str(caught.value)

    missing = tmp_path / "missing"
    # The loader itself said "Invalid kube-config file. Expected key current-context" about a file it never found.
    assert await error(str(missing)) == f"kubeconfig {missing}: no such file"
    assert await error(str(tmp_path)) == f"kubeconfig {tmp_path}: is a directory, not a kubeconfig file"
    empty = tmp_path / "empty"
    empty.write_text("")
    assert (await error(str(empty))).startswith(f"kubeconfig {empty}: not a kubeconfig")
    broken = tmp_path / "broken"
    broken.write_text("clusters: [")
    assert (await error(str(broken))).startswith(f"kubeconfig {broken}: not valid YAML")
    one = tmp_path / "one"
    one.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "clusters": [], "contexts": [], "users": []}))
    assert (await error(str(one), context="nope")).startswith(f"kubeconfig {one}: ")
    # Nothing given: $KUBECONFIG, else ~/.kube/config, and the message says how to give one.
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(missing))
    assert await error(None) == f"kubeconfig {missing}: no such file"
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert "pass --kubeconfig, set $KUBECONFIG, or run in a pod" in await error(None)


@contextlib.asynccontextmanager
async def served_at(path: str, handler: Callable[[web.Request], Awaitable[web.Response]]) -> AsyncIterator[k8s.Client]:
    """A client of a server that answers GET ``path`` with ``handler`` (and 404 elsewhere)."""
    app = web.Application()
    app.router.add_get(path, handler)
    server = TestServer(app)
    await server.start_server()
    c = client_for(f"http://{server.host}:{server.port}", timeout=2.0)
    try:
        yield c
    finally:
        await c.close()
        await server.close()


async def test_answers_not_exceptions() -> None:
    async def text(request: web.Request) -> web.Response:
        return web.Response(status=502, text="<html>bad gateway</html>", headers={"Retry-After": "3"})

    async with served_at("/api/v1/namespaces/ns/pods/p", text) as c:
        answer = await c.call(c.core.read_namespaced_pod, name="p", namespace="ns")
        missing = await c.call(c.core.read_namespaced_pod, name="q", namespace="ns")
    assert (answer.status, answer.ok, answer.answered, answer.retry_after) == (502, False, True, 3.0)
    assert answer.message == "<html>bad gateway</html>"
    assert missing.status == 404 and not missing.ok


async def test_an_answer_is_read_as_the_json_the_server_sent() -> None:
    # The decoder (orjson) reads what the API server writes as the standard library's did: text beyond ASCII,
    # escapes, 64-bit counts, decimals, nulls; an answer that is a list comes as its items.
    status = {
        "kind": "Status",
        "message": 'pod "p\u00e9" is forbidden: \u2264 1 \\ "x"',
        "details": {"retryAfterSeconds": 2**62, "ratio": 0.25, "causes": None},
    }

    async def answer(request: web.Request) -> web.Response:
        if request.match_info["name"] == "list":
            return web.Response(status=200, body=json.dumps([1, "two"]).encode(), content_type="application/json")
        return web.Response(status=403, body=json.dumps(status).encode(), content_type="application/json")

    async with served_at("/api/v1/namespaces/ns/pods/{name}", answer) as c:
        refused = await c.call(c.core.read_namespaced_pod, name="p", namespace="ns")
        listed = await c.call(c.core.read_namespaced_pod, name="list", namespace="ns")
    assert refused.status == 403 and refused.body == status
    assert refused.message == 'pod "p\u00e9" is forbidden: \u2264 1 \\ "x"'
    assert listed.ok and listed.body == {"items": [1, "two"]}


async def test_a_direct_write_sends_what_its_generated_method_sends() -> None:
    # A binding and an Event go out through the client's DIRECT path; the generated methods they name would send the
    # same request: verb, path (names quoted), headers (credentials, User-Agent, content type) and JSON body.
    seen: list[tuple[str, str, dict[str, str], object]] = []

    async def record(request: web.Request) -> web.Response:
        keep = ("Accept", "Content-Type", "User-Agent", "Authorization")
        seen.append(
            (request.method, request.raw_path, {h: request.headers.get(h, "") for h in keep}, await request.json())
        )
        return web.json_response({"kind": "Status", "code": 201}, status=201)

    app = web.Application()
    app.router.add_post("/api/v1/namespaces/{ns}/pods/{name}/binding", record)
    app.router.add_post("/api/v1/namespaces/{ns}/events", record)
    app.router.add_patch("/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}", record)
    app.router.add_patch("/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}/status", record)
    server = TestServer(app)
    await server.start_server()
    conf = kc.Configuration(host=f"http://{server.host}:{server.port}", api_key={"BearerToken": "t0ken"})
    conf.api_key_prefix = {"BearerToken": "Bearer"}
    api = kc.ApiClient(configuration=conf)
    api.user_agent = "gpusched-test"
    c = k8s.Client(api, timeout=2.0)
    target = kc.V1ObjectReference(api_version="v1", kind="Node", name="gpu-0")
    binding = kc.V1Binding(metadata=kc.V1ObjectMeta(name="p:1", namespace="ns", uid="u1"), target=target)
    event = {"metadata": {"name": "p.1", "namespace": "ns"}, "reason": "Scheduled", "message": "on gpu-0 \u2713"}
    # A DRA claim's finalizer and its allocation, the merge patches the claim writer sends before the binding.
    finalizer = {"metadata": {"resourceVersion": "7", "finalizers": ["resource.kubernetes.io/delete-protection"]}}
    status = {"metadata": {"resourceVersion": "8"}, "status": {"reservedFor": [{"resource": "pods", "name": "p"}]}}
    resource = kc.ResourceV1Api(api)
    sent_direct: list[str] = []
    send = c._send

    async def direct_send(verb: str, path: str, **kwargs: Any) -> tuple[int, bytes, float]:
        sent_direct.append(f"{verb} {path}")
        return await send(verb, path, **kwargs)

    c._send = direct_send  # type: ignore[method-assign]
    try:
        direct = [
            await c.call(c.core.create_namespaced_pod_binding, name="p:1", namespace="ns", body=binding),
            await c.call(c.core.create_namespaced_event, namespace="ns", body=event),
            await c.patch(resource.patch_namespaced_resource_claim, name="c 1", namespace="ns", body=finalizer),
            await c.patch(resource.patch_namespaced_resource_claim_status, name="c1", namespace="ns", body=status),
        ]
        merge = "application/merge-patch+json"
        for response in (
            await c.core.create_namespaced_pod_binding("p:1", "ns", binding, _preload_content=False),
            await c.core.create_namespaced_event("ns", event, _preload_content=False),
            await resource.patch_namespaced_resource_claim(
                "c 1", "ns", finalizer, _content_type=merge, _preload_content=False
            ),
            await resource.patch_namespaced_resource_claim_status(
                "c1", "ns", status, _content_type=merge, _preload_content=False
            ),
        ):
            response.release()
        # An argument the direct path does not send goes through the generated method, which does.
        dry = await c.call(c.core.create_namespaced_event, namespace="ns", body=event, dry_run="All")
    finally:
        await c.close()
        await server.close()
    assert [a.status for a in (*direct, dry)] == [201] * 5
    assert [verb_path.split()[0] for verb_path in sent_direct] == ["POST", "POST", "PATCH", "PATCH"]
    assert seen[:4] == seen[4:8]
    assert seen[2][:2] == ("PATCH", "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c%201")
    assert seen[3][2]["Content-Type"] == "application/merge-patch+json" and seen[3][3] == status
    assert seen[8][1] == "/api/v1/namespaces/ns/events?dryRun=All"
    assert seen[0][:2] == ("POST", "/api/v1/namespaces/ns/pods/p:1/binding")
    assert seen[0][2]["Authorization"] == "Bearer t0ken" and seen[0][2]["User-Agent"] == "gpusched-test"
    assert seen[0][3] == {
        "metadata": {"name": "p:1", "namespace": "ns", "uid": "u1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-0"},
    }
    assert seen[1][3] == event


async def test_a_request_waiting_for_its_turn_is_not_timed_out_meanwhile() -> None:
    # Five requests at once, one in flight at a time, each answered in 0.3 s, with a timeout of 0.5 s: the last
    # waits 1.2 s for its turn and is still answered. Timing the wait for a connection made requests that were never
    # sent count as unanswered when many writers wrote at once (evictions, status, Events behind the binds).
    busy = 0
    most = 0

    async def slow(request: web.Request) -> web.Response:
        nonlocal busy, most
        busy += 1
        most = max(most, busy)
        await asyncio.sleep(0.3)
        busy -= 1
        return web.json_response({"kind": "Pod", "metadata": {"name": request.match_info["name"]}})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/ns/pods/{name}", slow)
    server = TestServer(app)
    await server.start_server()
    c = client_for(f"http://{server.host}:{server.port}", timeout=0.5, in_flight=1)
    try:
        answers = await asyncio.gather(
            *(c.call(c.core.read_namespaced_pod, name=f"p{i}", namespace="ns") for i in range(5))
        )
    finally:
        await c.close()
        await server.close()
    assert [a.status for a in answers] == [200] * 5
    assert most == 1


#: A kubeconfig of one server that nothing listens on (the client is made, never used).
KUBECONFIG_ONE = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
    "users": [{"name": "u", "user": {"token": "t"}}],
    "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
    "current-context": "ctx",
}


@pytest.mark.parametrize(("variable", "honoured"), [(None, False), ("HTTPS_PROXY", True), ("no_proxy", True)])
async def test_proxy_variables_are_honoured_only_when_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str | None, honoured: bool
) -> None:
    # The generated client looks proxies and ~/.netrc up on every request; that is skipped only when nothing in
    # the environment could be found (a proxy set for the API server must still be used).
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in k8s._ENV_LOOKUPS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    if variable is not None:
        monkeypatch.setenv(variable, "http://proxy.invalid:3128")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(KUBECONFIG_ONE))
    client = await k8s.connect(k8s.ClientSettings(kubeconfig=str(kubeconfig)))
    try:
        assert client.api.rest_client.pool_manager.trust_env is honoured
    finally:
        await client.close()
