"""The dashboard's Kubernetes access check (``gpusched run --dashboard-auth=kubernetes``), as kube-rbac-proxy does it.

1. The viewer's bearer token (header, or the cookie a ``?token=`` link set: ``scheduler.dashboard.access``) goes to
   a TokenReview: the API server says who it is (a user, a ServiceAccount, an OIDC identity), or that it is no one.
2. A SubjectAccessReview asks whether that user may ``get`` the non-resource URL ``/dashboard`` (kube-rbac-proxy's
   default check): a ClusterRole with ``nonResourceURLs: ["/dashboard"]``, ``verbs: ["get"]`` opens the dashboard.
3. For every namespace whose names a page would show, a SubjectAccessReview asks whether the user may ``list``
   ``pods`` there; names from a namespace where the answer is no are replaced (``(hidden)``), counted, or refused
   (a job's page: 403). Queue and node names are cluster-wide and shown to everyone the dashboard lets in.

The questions are asked, and their answers kept (:data:`TTL_S` seconds per token, at most :data:`KEPT` tokens), by
``scheduler.k8s.serve.access.Reviewer``, which ``/explain`` shares. The scheduler's ServiceAccount needs ``create`` on
``tokenreviews`` and ``subjectaccessreviews``: the built-in ClusterRole ``system:auth-delegator``, as
kube-rbac-proxy's docs bind it (docs/dashboard.md). When the API server cannot be asked, the request is refused
(503): never shown unchecked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from aiohttp import web

from scheduler.dashboard import access as dashboard_access
from scheduler.dashboard import view
from scheduler.k8s.client import Client
from scheduler.k8s.serve import access
from scheduler.k8s.serve.access import KEPT, TTL_S

__all__ = ["DASHBOARD_URL", "KEPT", "TTL_S", "KubernetesAccess"]

#: The non-resource URL a viewer must be allowed to ``get``.
DASHBOARD_URL = "/dashboard"
#: The SubjectAccessReview that opens the dashboard.
OPEN = {"nonResourceAttributes": {"path": DASHBOARD_URL, "verb": "get"}}


class KubernetesAccess:
    """TokenReview, then SubjectAccessReviews (see the module notes)."""

    def __init__(
        self,
        client: Client,
        *,
        namespaces: Callable[[], Iterable[str]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        #: The namespaces the pages may name (the scheduler's pods' and gangs'), asked about for each viewer.
        self.namespaces = namespaces
        self.reviewer = access.Reviewer(client, clock=clock)

    async def viewer(self, request: web.Request) -> view.Redacted | web.Response:
        token = dashboard_access.token_of(request)
        if not token:
            return dashboard_access.refused(
                401, "the dashboard needs a Kubernetes bearer token (Authorization: Bearer ..., or ?token=...)"
            )
        user = await self.reviewer.check(token, OPEN)
        if isinstance(user, access.Refusal):
            message = user.message
            if user.status == 403:
                message = message.replace(" may not ", " may not open the dashboard (", 1) + ")"
            return dashboard_access.refused(user.status, message)
        seen: set[str] = set()
        for namespace in sorted(set(self.namespaces()) | _asked(request)):
            if await self.reviewer.allowed(user, access.pods_in(namespace, verb="list")):
                seen.add(namespace)
        return view.Redacted(namespaces=frozenset(seen), user=user.name)


def _asked(request: web.Request) -> set[str]:
    """The namespace a job's page names (asked about even when the scheduler knows nothing there)."""
    namespace = request.match_info.get("namespace", "")
    return {namespace} if namespace else set()
