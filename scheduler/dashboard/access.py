"""Who may open the dashboard, and which namespaces' names they may see.

An :class:`Access` turns a request into a :class:`~scheduler.dashboard.view.Redacted` viewer, or refuses it with
an HTTP answer. Two are here, needing no cluster: :class:`Open` (no check: the dashboard bound to a port nobody else
reaches, or ``gpusched dashboard`` on a laptop) and :class:`SharedToken` (one bearer token from a file). The
Kubernetes check (TokenReview, then SubjectAccessReview per namespace, as kube-rbac-proxy does) is
``scheduler.k8s.serve.dashboard_access``: it needs the API server.

A browser cannot add an ``Authorization`` header to a link, so a token may also come once as ``?token=`` in the
URL: the server answers with an HttpOnly, SameSite=Strict cookie holding it and a redirect to the same page
without it (:func:`token_of` reads the header first, then the cookie).
"""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Protocol

from aiohttp import web

from scheduler.api.basics.errors import InvalidObject
from scheduler.dashboard import view

COOKIE = "gpusched-dashboard-token"


class Access(Protocol):
    async def viewer(self, request: web.Request) -> view.Redacted | web.Response:
        """The viewer, or the answer that refuses the request (401 no or bad token, 403 not allowed)."""
        ...


def token_of(request: web.Request) -> str:
    """The bearer token of ``request``: its ``Authorization: Bearer`` header, else the dashboard's cookie."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.cookies.get(COOKIE, "")


def refused(status: int, message: str) -> web.Response:
    headers = {"WWW-Authenticate": 'Bearer realm="gpusched dashboard"'} if status == 401 else None
    return web.Response(status=status, text=message + "\n", headers=headers)


class Open:
    """Everyone sees everything (the default: the dashboard is off unless a port is given, see docs/dashboard.md)."""

    async def viewer(self, request: web.Request) -> view.Redacted | web.Response:
        return view.Redacted()


class SharedToken:
    """One token, read from a file, that every viewer presents; a viewer with it sees everything."""

    def __init__(self, token: str) -> None:
        if not token:
            raise InvalidObject("the token file is empty", obj="dashboard", field="--dashboard-token-file")
        self.token = token

    @classmethod
    def from_file(cls, path: str) -> SharedToken:
        try:
            text = Path(path).read_text().strip()
        except OSError as exc:
            raise InvalidObject(
                f"cannot read {path}: {exc.strerror}", obj="dashboard", field="--dashboard-token-file"
            ) from None
        return cls(text)

    async def viewer(self, request: web.Request) -> view.Redacted | web.Response:
        given = token_of(request)
        if not given:
            return refused(401, "the dashboard needs a bearer token (Authorization: Bearer ..., or ?token=...)")
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return refused(401, "this token does not open the dashboard")
        return view.Redacted()
