"""The hot writes' own connections: whole answers, one request at a time, nothing read by the wrong request."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from kubernetes_asyncio import client as kc

from benchmarks import write_cost
from scheduler.k8s import client as k8s
from scheduler.k8s import http1

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def serving(handler: Handler, *, tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    """A server answering every POST below / with ``handler``; yields its URL."""
    app = web.Application()
    app.router.add_post("/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_answers_come_whole_on_one_reused_connection() -> None:
    seen: list[tuple[str, str, str, bytes]] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        seen.append((request.method, request.raw_path, request.headers.get("Authorization", ""), body))
        if request.raw_path.endswith("/chunked"):
            # An answer of unknown length, in chunks (as the API server streams large ones).
            response = web.StreamResponse(status=200, headers={"Retry-After": "7"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            for part in (b'{"items": [', b"1, 2", b"]}"):
                await response.write(part)
            await response.write_eof()
            return response
        return web.json_response({"echo": body.decode()}, status=201)

    async with serving(answer) as url:
        pool = http1.Pool(url + "/prefix/")
        try:
            first = await pool.request("POST", "/a%3Ab", headers={"Authorization": "Bearer t"}, body=b"one")
            chunked = await pool.request("POST", "/chunked", headers={}, body=b"")
            together = await asyncio.gather(
                *(pool.request("POST", f"/n{i}", headers={}, body=str(i).encode()) for i in range(5))
            )
        finally:
            pool.close()
    assert (first.status, first.body, first.retry_after) == (201, b'{"echo": "one"}', "")
    assert (chunked.status, chunked.body, chunked.retry_after) == (200, b'{"items": [1, 2]}', "7")
    # Each request read its own answer, five at once on five connections; one at a time, one connection served.
    assert [r.body for r in together] == [f'{{"echo": "{i}"}}'.encode() for i in range(5)]
    assert seen[0] == ("POST", "/prefix/a%3Ab", "Bearer t", b"one")
    assert pool.opened == 5


async def test_a_request_given_up_never_leaves_its_answer_to_the_next() -> None:
    # The first request times out while the server still works on it; its connection is closed, so the answer that
    # comes later cannot be read as the answer to the second request.
    async def answer(request: web.Request) -> web.Response:
        if request.raw_path == "/slow":
            await asyncio.sleep(0.5)
        return web.Response(body=request.raw_path.encode())

    async with serving(answer) as url:
        pool = http1.Pool(url)
        try:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):
                    await pool.request("POST", "/slow", headers={}, body=b"")
            given_up = pool.connections
            after = await pool.request("POST", "/fast", headers={}, body=b"")
            await asyncio.sleep(0.6)  # the slow answer would have come by now
            again = await pool.request("POST", "/again", headers={}, body=b"")
        finally:
            pool.close()
    assert (after.body, again.body) == (b"/fast", b"/again")
    assert given_up == 0 and pool.opened == 2


async def test_a_closed_connection_is_not_reused_and_a_lost_answer_is_an_error() -> None:
    calls = 0

    async def answer(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        if request.raw_path == "/close":
            return web.Response(body=b"last", headers={"Connection": "close"})
        if request.raw_path == "/drop":
            assert request.transport is not None
            request.transport.close()  # no answer at all
            await asyncio.sleep(0.1)
        return web.Response(body=b"ok")

    async with serving(answer) as url:
        pool = http1.Pool(url)
        try:
            last = await pool.request("POST", "/close", headers={}, body=b"")
            next_one = await pool.request("POST", "/ok", headers={}, body=b"")
            with pytest.raises(http1.ConnectionLost):
                await pool.request("POST", "/drop", headers={}, body=b"")
            after = await pool.request("POST", "/ok", headers={}, body=b"")
        finally:
            pool.close()
    assert (last.body, next_one.body, after.body) == (b"last", b"ok", b"ok")
    assert pool.opened == 3 and calls == 4


async def test_an_idle_connection_past_its_keep_alive_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=b"ok")

    async with serving(answer) as url:
        pool = http1.Pool(url)
        try:
            await pool.request("POST", "/", headers={}, body=b"")
            await pool.request("POST", "/", headers={}, body=b"")
            assert pool.opened == 1
            monkeypatch.setattr(http1, "KEEPALIVE_S", 0.0)
            await pool.request("POST", "/", headers={}, body=b"")
        finally:
            pool.close()
    assert pool.opened == 2


async def test_a_header_that_would_break_the_request_is_refused() -> None:
    pool = http1.Pool("http://127.0.0.1:1")
    with pytest.raises(ValueError, match="Authorization"):
        await pool.request("POST", "/", headers={"Authorization": "Bearer t\r\nX-Evil: 1"}, body=b"")
    assert pool.opened == 0
    with pytest.raises(ValueError, match="not an http or https URL"):
        http1.Pool("unix:///var/run/api.sock")


async def test_tls_is_verified_with_the_configurations_ca(tmp_path: Path) -> None:
    cert, key = write_cost.certificate(tmp_path, "server")
    other, _ = write_cost.certificate(tmp_path, "other")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)

    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"kind": "Status", "code": 201}, status=201)

    def client(url: str, ca: Path | None, *, verify: bool = True) -> k8s.Client:
        conf = kc.Configuration(host=url)
        conf.ssl_ca_cert = str(ca) if ca else None
        conf.verify_ssl = verify
        api = kc.ApiClient(configuration=conf)
        k8s._skip_env_lookups(api)
        return k8s.Client(api, timeout=5.0)

    event = {"metadata": {"name": "p.1", "namespace": "ns"}, "reason": "Scheduled"}
    answers = []
    async with serving(answer, tls=tls) as url:
        for ca, verify in ((cert, True), (other, True), (other, False)):
            c = client(url, ca, verify=verify)
            try:
                answers.append(await c.call(c.core.create_namespaced_event, namespace="ns", body=event))
            finally:
                await c.close()
            assert isinstance(c._pool, http1.Pool)
    trusted, untrusted, unverified = answers
    assert trusted.status == 201 and unverified.status == 201
    assert untrusted.status == 0 and "certificate verify failed" in untrusted.error


async def test_a_proxy_keeps_the_writes_on_aiohttp() -> None:
    # The pool speaks to the server directly: where a proxy is set, the writes go through aiohttp and its proxy.
    seen: list[str] = []

    async def proxy(request: web.Request) -> web.Response:
        seen.append(str(request.url))
        return web.json_response({"kind": "Status", "code": 201}, status=201)

    async with serving(proxy) as url:
        conf = kc.Configuration(host="http://api.invalid:6443")
        conf.proxy = url
        api = kc.ApiClient(configuration=conf)
        k8s._skip_env_lookups(api)
        c = k8s.Client(api, timeout=5.0)
        try:
            answer = await c.call(c.core.create_namespaced_event, namespace="ns", body={"reason": "Scheduled"})
        finally:
            await c.close()
    assert answer.status == 201 and c._pool is False
    assert seen == ["http://api.invalid:6443/api/v1/namespaces/ns/events"]
