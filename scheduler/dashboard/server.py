"""The dashboard's HTTP server (aiohttp, as the health and metrics servers): read-only pages and their polls.

Routes, all GET: ``/`` the cluster map (``?label=`` filter, ``?within=`` one aggregated row), ``/queues``,
``/waiting``, ``/job/pod/NAMESPACE/NAME`` and ``/job/podgroup/NAMESPACE/NAME``. A page's script polls its own URL
with the ``X-Dashboard-Version`` it shows: the answer is 204 while the view has not changed, else the new
``<main>`` only. Anything but GET and HEAD is refused (405) by the router: nothing here writes.

Every request goes through the :class:`~scheduler.dashboard.access.Access` first. A standby (a replica that does not
schedule) redirects a page to the leader's dashboard when the leader published its address, and otherwise says
who leads; ``gpusched dashboard``'s local copy shows its own view (``Leadership.observer``).

The records a page shows are built once per view version and kept (:class:`_Memo`), so viewers and polls that
come while nothing changed cost a comparison, not a rendering of the cluster.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from scheduler.dashboard import access as dashboard_access
from scheduler.dashboard import pages, view

VERSION_HEADER = "X-Dashboard-Version"


@dataclass
class Running:
    runner: web.AppRunner
    port: int
    #: Tasks that live as long as the pages (the history's sampler), cancelled when they close.
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.runner.cleanup()


class _Memo:
    """The last record of each kind (the map, the queues, the waiting work, the last job pages asked for), with the
    version it was built at."""

    #: Records kept at most (the job pages of a busy cluster would otherwise pile up).
    KEPT = 64

    def __init__(self) -> None:
        self._kept: OrderedDict[str, tuple[str, Any]] = OrderedDict()

    def get(self, what: str, version: str, build: Callable[[], Any]) -> Any:
        kept = self._kept.get(what)
        if kept is not None and kept[0] == version:
            self._kept.move_to_end(what)
            return kept[1]
        value = build()
        self._kept[what] = (version, value)
        self._kept.move_to_end(what)
        while len(self._kept) > self.KEPT:
            self._kept.popitem(last=False)
        return value


def app(source: view.Source, access: dashboard_access.Access | None = None) -> web.Application:
    """The dashboard as an aiohttp application (``access`` None: no check, see :class:`~.access.Open`)."""
    checker = access if access is not None else dashboard_access.Open()
    memo = _Memo()

    async def page(request: web.Request) -> web.StreamResponse:
        given = request.query.get("token")
        if given:  # a token in a link: keep it in a cookie, and take it out of the address bar
            query = {k: v for k, v in request.query.items() if k != "token"}
            target = request.path + (f"?{urllib.parse.urlencode(query)}" if query else "")
            response = web.Response(status=302, headers={"Location": target})
            response.set_cookie(dashboard_access.COOKIE, given, httponly=True, samesite="Strict", secure=request.secure)
            return response
        viewer = await checker.viewer(request)
        if isinstance(viewer, web.StreamResponse):
            return viewer
        leadership = source.leadership()
        polled = VERSION_HEADER in request.headers
        if not leadership.leading and not leadership.observer:
            if leadership.leader_url and not polled:
                raise web.HTTPFound(leadership.leader_url.rstrip("/") + str(request.rel_url))
            return _answer(request, pages.standby(leadership), "standby", viewer, leadership, title="standby")
        version = source.version()
        if polled and request.headers[VERSION_HEADER] == version:
            return web.Response(status=204, headers={VERSION_HEADER: version})
        path = request.match_info.route.resource.canonical if request.match_info.route.resource else request.path
        if path == "/":
            cluster = memo.get("map", version, source.cluster_map)
            body = pages.cluster_map(
                cluster,
                viewer,
                label=request.query.get("label", ""),
                within=request.query.get("within", ""),
                samples=memo.get("history", version, source.history),
            )
            title = "cluster map"
        elif path == "/queues":
            body = pages.queues(memo.get("queues", version, source.queues))
            title = "queues"
        elif path == "/waiting":
            body = pages.waiting(memo.get("waiting", version, source.waiting), viewer)
            title = "waiting work"
        else:
            kind, namespace, name = (request.match_info[k] for k in ("kind", "namespace", "name"))
            if kind not in ("pod", "podgroup"):
                raise web.HTTPNotFound(text=f"no such page: a job is pod/NAMESPACE/NAME or podgroup/...; not {kind}")
            if not viewer.may_see(namespace):
                return dashboard_access.refused(403, f"you may not list pods in namespace {namespace}")
            found = memo.get(f"job/{kind}/{namespace}/{name}", version, lambda: source.job(kind, namespace, name))
            if found is None:
                raise web.HTTPNotFound(text=f"{kind} {namespace}/{name}: the scheduler does not know it")
            body = pages.job(found)
            title = f"{kind} {namespace}/{name}"
        return _answer(request, body, version, viewer, leadership, title=title, path=path)

    application = web.Application()
    for route in ("/", "/queues", "/waiting", "/job/{kind}/{namespace}/{name}"):
        application.router.add_get(route, page)
    return application


def _answer(
    request: web.Request,
    body: str,
    version: str,
    viewer: view.Redacted,
    leadership: view.Leadership,
    *,
    title: str,
    path: str = "",
) -> web.Response:
    headers = {VERSION_HEADER: version, "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
    if VERSION_HEADER in request.headers:
        return web.Response(text=body, content_type="text/html", headers=headers)
    text = pages.document(title=title, path=path, body=body, version=version, viewer=viewer, leadership=leadership)
    return web.Response(text=text, content_type="text/html", headers=headers)


async def serve(
    source: view.Source, *, port: int, host: str = "0.0.0.0", access: dashboard_access.Access | None = None
) -> Running:
    """Serve the dashboard on ``host:port`` (0: a free port; the chosen one is in the result)."""
    runner = web.AppRunner(app(source, access), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    sockets = getattr(site._server, "sockets", None) or []
    return Running(runner, int(sockets[0].getsockname()[1]) if sockets else port)
