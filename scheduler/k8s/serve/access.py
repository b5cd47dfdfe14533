"""Who is asking, and may they: the API server's TokenReview and SubjectAccessReview, asked as kube-rbac-proxy asks.

The dashboard (``scheduler.k8s.serve.dashboard_access``) and ``/explain`` on the health port
(``scheduler.k8s.serve.health``)
both read what the scheduler holds about other people's work, so both ask the same two questions through one
:class:`Reviewer` (``/explain``'s question is :func:`to_get`, its token comes by :func:`token_of`, and
:func:`refused` is its answer when the user may not):

1. a bearer token goes to a TokenReview: the API server says who it is (a user, a ServiceAccount, an OIDC
   identity), or that it is no one (:class:`Refusal` 401);
2. a SubjectAccessReview asks whether that user may do one thing (``get`` pods in a namespace, ``get`` a Queue,
   ``get`` the non-resource URL ``/dashboard``): the cluster's RBAC (or whatever authorizer it runs) answers.

Answers are kept for :data:`TTL_S` seconds per token (a dashboard polled every second, or a user running
``gpusched explain`` in a loop, asks nothing new), at most :data:`KEPT` tokens; a SubjectAccessReview's "no" is
kept too, so a user refused costs the API server nothing more until it expires. Tokens are kept only as their
SHA-256. When the API server cannot be asked, the answer is a :class:`Refusal` 503 (or ``None`` from
:meth:`Reviewer.allowed`): never shown unchecked.

The reviews go through the scheduler's one client, whose QPS budget the bindings share
(``scheduler.k8s.client``): anyone who reaches ``/explain`` could spend it with made-up tokens, each one a new
TokenReview. So a reviewer may be given a budget of its own (``qps``, ``burst``) on top: past it, a request that
needs a new review is refused at once (429 ``too many reviews``) instead of waiting, and the bindings keep theirs.

The scheduler's ServiceAccount needs ``create`` on ``tokenreviews.authentication.k8s.io`` and
``subjectaccessreviews.authorization.k8s.io``: the built-in ClusterRole ``system:auth-delegator``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client import AuthenticationV1Api, AuthorizationV1Api

from scheduler.k8s import status as k8s_status
from scheduler.k8s.client import Client, RateLimiter

#: Seconds a TokenReview's or SubjectAccessReview's answer is kept.
TTL_S = 30.0
#: Tokens whose answers are kept.
KEPT = 256
#: The header that carries the caller's token through the API server's pod proxy, which removes ``Authorization``
#: once it has authenticated the caller (k8s.io/apiserver's authentication filter): ``Bearer TOKEN``, as
#: ``Authorization`` (which a direct request, ``gpusched explain --url`` or the Lease's address, sends).
TOKEN_HEADER = "Gpusched-Authorization"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is not answered: 401 (no token, or one the API server does not know), 403 (no right), 503 (the
    API server could not be asked)."""

    status: int
    message: str


@dataclass
class User:
    """Who a token is, as the TokenReview said (the fields a SubjectAccessReview asks about)."""

    name: str
    uid: str = ""
    groups: list[str] = field(default_factory=list)
    extra: dict[str, list[str]] = field(default_factory=dict)
    #: When the TokenReview answered (the reviewer's clock).
    at: float = 0.0
    #: The SubjectAccessReviews' answers: attributes (as JSON) -> (allowed, when asked).
    answers: dict[str, tuple[bool, float]] = field(default_factory=dict)


def pods_in(namespace: str, *, verb: str = "get", name: str = "") -> dict[str, Any]:
    """The attributes of ``verb`` on pods in ``namespace`` (one pod when ``name`` is given)."""
    attributes = {"namespace": namespace, "verb": verb, "resource": "pods"}
    return {"resourceAttributes": {**attributes, "name": name} if name else attributes}


def to_get(kind: str, *, namespace: str, name: str) -> dict[str, Any]:
    """The attributes of ``get`` on one object, as ``kubectl get`` needs: a ``pod`` or a ``podgroup`` in
    ``namespace``, or a (cluster-wide) ``queue``."""
    if kind == "pod":
        return pods_in(namespace, name=name)
    crd = k8s_status.PODGROUPS if kind == "podgroup" else k8s_status.QUEUES
    attributes = {"verb": "get", "group": crd.group, "resource": crd.plural, "name": name}
    if crd.namespaced:
        attributes["namespace"] = namespace
    return {"resourceAttributes": attributes}


def token_of(headers: Mapping[str, str]) -> str:
    """The caller's bearer token: ``Authorization: Bearer``, else :data:`TOKEN_HEADER` (what came through the API
    server's pod proxy, which drops ``Authorization`` once it has authenticated the caller)."""
    for name in ("Authorization", TOKEN_HEADER):
        scheme, _, token = headers.get(name, "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return ""


async def refused(
    reviewer: Reviewer, token: str, attributes: Mapping[str, Any], *, asking: str
) -> tuple[int, dict[str, Any]] | None:
    """None when the user of ``token`` may do what ``attributes`` say; else the HTTP status and the JSON body that
    say why, ``missing`` naming what was missing: ``token`` (401: none, or one the API server does not know) or
    the right (403). ``asking``: what is asked for, as the 401 without a token names it."""
    if not token:
        return 401, {
            "message": f"{asking} needs a Kubernetes bearer token (Authorization: Bearer ..., or {TOKEN_HEADER}:"
            " Bearer ... through the API server's pod proxy)",
            "missing": "token",
        }
    checked = await reviewer.check(token, attributes)
    if not isinstance(checked, Refusal):
        return None
    body: dict[str, Any] = {"message": checked.message}
    if checked.status == 401:
        body["missing"] = "token"
    elif checked.status == 403:
        body["missing"] = dict(attributes)
    return checked.status, body


def describe(attributes: Mapping[str, Any]) -> str:
    """The right ``attributes`` ask for, in words: ``get pods "train-0" in namespace team-a``."""
    if "nonResourceAttributes" in attributes:
        url = attributes["nonResourceAttributes"]
        return f"{url.get('verb', '')} on the non-resource URL {url.get('path', '')}"
    asked = attributes.get("resourceAttributes") or {}
    resource = str(asked.get("resource", ""))
    if asked.get("group"):
        resource += f".{asked['group']}"
    text = f"{asked.get('verb', '')} {resource}"
    if asked.get("name"):
        text += f' "{asked["name"]}"'
    if asked.get("namespace"):
        text += f" in namespace {asked['namespace']}"
    return text


class Reviewer:
    """TokenReview, then SubjectAccessReviews, with their answers kept (see the module notes)."""

    def __init__(
        self,
        client: Client,
        *,
        clock: Callable[[], float] = time.monotonic,
        qps: float = 0.0,
        burst: int = 1,
    ) -> None:
        """``qps`` above 0: at most that many reviews a second (``burst`` at once) asked for this reviewer."""
        self.client = client
        self.clock = clock
        self._budget = RateLimiter(qps, burst, clock=clock)
        self._users: OrderedDict[str, User] = OrderedDict()
        self._authn = AuthenticationV1Api(client.api)
        self._authz = AuthorizationV1Api(client.api)

    async def user(self, token: str) -> User | Refusal:
        """Who ``token`` is: the kept answer while it is :data:`TTL_S` old at most, else a new TokenReview."""
        if not token:
            return Refusal(401, "a Kubernetes bearer token is needed (Authorization: Bearer ...)")
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        kept = self._users.get(key)
        if kept is not None and now - kept.at <= TTL_S:
            return kept
        found = await self._review(token, now)
        if isinstance(found, User):
            self._users[key] = found
            self._users.move_to_end(key)
            while len(self._users) > KEPT:
                self._users.popitem(last=False)
        return found

    async def allowed(self, user: User, attributes: Mapping[str, Any]) -> bool | None:
        """Whether ``user`` may do what ``attributes`` (a SubjectAccessReview's ``resourceAttributes`` or
        ``nonResourceAttributes``) say; None when there is no answer (the API server gave none, or the budget is
        spent; not kept: asked again next time)."""
        found = await self._allowed(user, attributes)
        return found if isinstance(found, bool) else None

    async def check(self, token: str, attributes: Mapping[str, Any]) -> User | Refusal:
        """The user of ``token`` if it may do what ``attributes`` say, else why not (401, 403 naming the right,
        429, 503)."""
        user = await self.user(token)
        if isinstance(user, Refusal):
            return user
        found = await self._allowed(user, attributes)
        if isinstance(found, Refusal):
            return found
        if not found:
            return Refusal(403, f"{user.name} may not {describe(attributes)}")
        return user

    async def _allowed(self, user: User, attributes: Mapping[str, Any]) -> bool | Refusal:
        key = json.dumps(attributes, sort_keys=True)
        now = self.clock()
        kept = user.answers.get(key)
        if kept is not None and now - kept[1] <= TTL_S:
            return kept[0]
        if not self._spend():
            return Refusal(429, "too many reviews: ask again in a second")
        answer = await self.client.call(
            self._authz.create_subject_access_review,
            body={
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {"user": user.name, "uid": user.uid, "groups": user.groups, "extra": user.extra, **attributes},
            },
        )
        if not answer.ok:
            return Refusal(503, f"cannot ask the API server whether {user.name} may {describe(attributes)}")
        allowed = bool((answer.body.get("status") or {}).get("allowed"))
        user.answers[key] = (allowed, now)
        return allowed

    def _spend(self) -> bool:
        """Take one review from the budget; False when it is spent (nothing taken)."""
        if self._budget.reserve() > 0:
            self._budget.cancel()
            return False
        return True

    async def _review(self, token: str, now: float) -> User | Refusal:
        if not self._spend():
            return Refusal(429, "too many token reviews: ask again in a second")
        answer = await self.client.call(
            self._authn.create_token_review,
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
        )
        if not answer.ok:
            return Refusal(503, f"cannot review the token: {answer.message}")
        status = answer.body.get("status") or {}
        if not status.get("authenticated"):
            return Refusal(401, f"the API server does not know this token: {status.get('error', '')}".rstrip(": "))
        user = status.get("user") or {}
        return User(
            name=str(user.get("username") or ""),
            uid=str(user.get("uid") or ""),
            groups=[str(g) for g in user.get("groups") or []],
            extra={str(k): [str(x) for x in v] for k, v in (user.get("extra") or {}).items()},
            at=now,
        )
