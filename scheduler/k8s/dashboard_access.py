"""The dashboard's Kubernetes access check (``gpusched run --dashboard-auth=kubernetes``), as kube-rbac-proxy does it.

1. The viewer's bearer token (header, or the cookie a ``?token=`` link set: ``scheduler.dashboard.access``) goes to
   a TokenReview: the API server says who it is (a user, a ServiceAccount, an OIDC identity), or that it is no one.
2. A SubjectAccessReview asks whether that user may ``get`` the non-resource URL ``/dashboard`` (kube-rbac-proxy's
   default check): a ClusterRole with ``nonResourceURLs: ["/dashboard"]``, ``verbs: ["get"]`` opens the dashboard.
3. For every namespace whose names a page would show, a SubjectAccessReview asks whether the user may ``list``
   ``pods`` there; names from a namespace where the answer is no are replaced (``(hidden)``), counted, or refused
   (a job's page: 403). Queue and node names are cluster-wide and shown to everyone the dashboard lets in.

Answers are kept for :data:`TTL_S` seconds per token (a page polled every second asks nothing new), at most
:data:`KEPT` tokens. The scheduler's ServiceAccount needs ``create`` on ``tokenreviews`` and
``subjectaccessreviews``: the built-in ClusterRole ``system:auth-delegator``, as kube-rbac-proxy's docs bind it
(docs/dashboard.md; the manifests do not, the dashboard being off by default). When the API server cannot be
asked, the request is refused (503): never shown unchecked.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from kubernetes_asyncio.client import AuthenticationV1Api, AuthorizationV1Api

from scheduler.dashboard import access as dashboard_access
from scheduler.dashboard import view
from scheduler.k8s.client import Client

#: Seconds a TokenReview's or SubjectAccessReview's answer is kept.
TTL_S = 30.0
#: Tokens whose answers are kept.
KEPT = 256
#: The non-resource URL a viewer must be allowed to ``get``.
DASHBOARD_URL = "/dashboard"


@dataclass
class _Viewer:
    user: str
    uid: str
    groups: list[str]
    extra: dict[str, list[str]]
    at: float
    #: May open the dashboard (a refusal is kept too, so that a refused token costs the API server nothing more).
    allowed: bool = False
    #: namespace -> (may list pods there, when asked)
    namespaces: dict[str, tuple[bool, float]] = field(default_factory=dict)


class KubernetesAccess:
    """TokenReview, then SubjectAccessReviews (see the module notes)."""

    def __init__(
        self,
        client: Client,
        *,
        namespaces: Callable[[], Iterable[str]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        #: The namespaces the pages may name (the scheduler's pods' and gangs'), asked about for each viewer.
        self.namespaces = namespaces
        self.clock = clock
        self._viewers: OrderedDict[str, _Viewer] = OrderedDict()
        self._authn = AuthenticationV1Api(client.api)
        self._authz = AuthorizationV1Api(client.api)

    async def viewer(self, request: web.Request) -> view.Redacted | web.Response:
        token = dashboard_access.token_of(request)
        if not token:
            return dashboard_access.refused(
                401, "the dashboard needs a Kubernetes bearer token (Authorization: Bearer ..., or ?token=...)"
            )
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        who = self._viewers.get(key)
        if who is None or now - who.at > TTL_S:
            found = await self._review(token, now)
            if isinstance(found, web.Response):
                return found
            who = found
            allowed = await self._allowed(who, {"nonResourceAttributes": {"path": DASHBOARD_URL, "verb": "get"}})
            if allowed is None:
                return dashboard_access.refused(503, "cannot ask the API server whether you may open the dashboard")
            who.allowed = allowed
            self._viewers[key] = who
            self._viewers.move_to_end(key)
            while len(self._viewers) > KEPT:
                self._viewers.popitem(last=False)
        if not who.allowed:
            return dashboard_access.refused(
                403, f"{who.user} may not open the dashboard (get on the non-resource URL {DASHBOARD_URL})"
            )
        seen: set[str] = set()
        for namespace in sorted(set(self.namespaces()) | _asked(request)):
            kept = who.namespaces.get(namespace)
            if kept is None or now - kept[1] > TTL_S:
                allowed = await self._allowed(
                    who, {"resourceAttributes": {"namespace": namespace, "verb": "list", "resource": "pods"}}
                )
                kept = (bool(allowed), now)
                who.namespaces[namespace] = kept
            if kept[0]:
                seen.add(namespace)
        return view.Redacted(namespaces=frozenset(seen), user=who.user)

    async def _review(self, token: str, now: float) -> _Viewer | web.Response:
        answer = await self.client.call(
            self._authn.create_token_review,
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
        )
        if not answer.ok:
            return dashboard_access.refused(503, f"cannot review the token: {answer.message}")
        status = answer.body.get("status") or {}
        if not status.get("authenticated"):
            return dashboard_access.refused(401, f"the API server does not know this token: {status.get('error', '')}")
        user = status.get("user") or {}
        return _Viewer(
            user=str(user.get("username") or ""),
            uid=str(user.get("uid") or ""),
            groups=[str(g) for g in user.get("groups") or []],
            extra={str(k): [str(x) for x in v] for k, v in (user.get("extra") or {}).items()},
            at=now,
        )

    async def _allowed(self, who: _Viewer, attributes: dict[str, Any]) -> bool | None:
        """The SubjectAccessReview's answer; None when the API server did not give one."""
        answer = await self.client.call(
            self._authz.create_subject_access_review,
            body={
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {"user": who.user, "uid": who.uid, "groups": who.groups, "extra": who.extra, **attributes},
            },
        )
        if not answer.ok:
            return None
        return bool((answer.body.get("status") or {}).get("allowed"))


def _asked(request: web.Request) -> set[str]:
    """The namespace a job's page names (asked about even when the scheduler knows nothing there)."""
    namespace = request.match_info.get("namespace", "")
    return {namespace} if namespace else set()
