"""Leader election on a ``coordination.k8s.io/v1`` Lease, so that one replica schedules and the others wait warm.

The algorithm is client-go's leaderelection, written on the shared :class:`Client`:

- every ``retry_period`` a replica reads the Lease; it takes it if there is none (create), if it is already the
  holder, if the holder field is empty (released), or if the holder has not renewed it for ``lease_duration``
  *as observed locally* (the holder's ``renewTime`` is never compared with our clock: clocks differ); taking or
  renewing is an update with the Lease's ``resourceVersion``, so of two replicas racing only one wins (409);
- a leader whose last successful renewal is ``renew_deadline`` old stops leading, before anyone else may take
  the lease (``renew_deadline < lease_duration``), and a leader that sees another holder stops at once;
- an attempt is bounded by the renew deadline (a leader's by what is left of it), never by ``retry_period``,
  which is only the pause between attempts;
- on a clean shutdown the leader empties ``holderIdentity`` so a standby takes over at its next retry instead
  of waiting out the lease.

``on_change(True|False)`` is called on the event loop whenever leadership starts or stops.

A replica that the API server refuses (the Lease's namespace does not exist, RBAC forbids the Lease, the body is
invalid) would otherwise retry quietly for ever, a standby that never leads. So a refused read, create or update
is logged with the API server's reason (once per new reason, as an error), kept in :attr:`LeaderElector.refusal`
until an attempt succeeds, and the health server's ``/readyz`` answers "not leading and cannot lead: <reason>"
while it is set (``scheduler.k8s.serve.health``). A conflict (409, another replica won the race), a 429 and no answer at
all are not refusals: they are retried and say nothing about whether this replica could lead.

The leader writes where its ``/explain`` answers on the Lease (annotation :data:`EXPLAIN_URL_ANNOTATION`), so
that ``gpusched explain`` finds a leader that runs outside the cluster (``gpusched run`` on a laptop).

:class:`LeaseThread` runs the election on a thread of its own, with its own event loop and its own client (and
so its own QPS budget): however long the scheduling loop holds the main event loop (a batch of cycles, a listing
of 100,000 pods) and however many bindings wait for the main client's rate limiter, the Lease is renewed on time.
A leader that cannot renew stops on that thread at ``renew_deadline``; the operator reads :attr:`LeaseThread.leading`
before every decision, so it stops deciding then, not when the main loop next gets to the news.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import enum
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
from kubernetes_asyncio import client as k8s_client

from scheduler.k8s.client import Answer, Client
from scheduler.k8s.config import LeaderElectionConfig

log = structlog.get_logger(__name__)

#: Seconds a clean shutdown waits for the lease's release (read and update) before it goes on without it.
RELEASE_TIMEOUT_S = 3.0
#: The Lease annotation where the leader says where its health server's ``/explain`` answers (``http://host:port``).
EXPLAIN_URL_ANNOTATION = "gpusched.io/explain-url"
#: The Lease annotation where the leader says where its dashboard answers (``gpusched run --dashboard-port``), so that
#: a standby's dashboard can send its viewers there.
DASHBOARD_URL_ANNOTATION = "gpusched.io/dashboard-url"
#: Answers that are not a refusal: a conflict (another replica won the race) and a rate limit are retried.
_NOT_REFUSALS = (409, 429)


class _Attempt(enum.Enum):
    HELD = "held"  # we hold the lease now
    OTHER = "other"  # another replica holds it, validly
    UNKNOWN = "unknown"  # no answer, a conflict, or a refusal: try again


class LeaderElector:
    def __init__(
        self,
        client: Client,
        *,
        namespace: str,
        name: str,
        identity: str,
        config: LeaderElectionConfig,
        on_change: Callable[[bool], None],
        clock: Callable[[], float] = time.monotonic,
        explain_url: str = "",
        dashboard_url: str = "",
    ) -> None:
        self.client = client
        self.api = k8s_client.CoordinationV1Api(client.api)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.config = config
        self._on_change = on_change
        self._clock = clock
        self.leading = False
        self._renewed = -float("inf")
        #: (holder, renewTime) last seen on the Lease, and when we saw it change (local clock).
        self._observed: tuple[str, str] = ("", "")
        self._observed_at = -float("inf")
        self.transitions = 0
        #: Written on the Lease while this replica holds it (:data:`EXPLAIN_URL_ANNOTATION`); empty: nothing.
        self.explain_url = explain_url
        #: Written on the Lease while this replica holds it (:data:`DASHBOARD_URL_ANNOTATION`); empty: nothing.
        self.dashboard_url = dashboard_url
        #: The holder's dashboard address as last read from the Lease (empty: none published).
        self.holder_dashboard = ""
        #: Why the API server refused this replica's last attempt (empty once an attempt succeeds): it cannot
        #: lead until that changes.
        self.refusal = ""

    @property
    def observed_holder(self) -> str:
        """The Lease's holder as this replica last read it (empty: released, or not read yet)."""
        return self._observed[0]

    async def run(self) -> None:
        """Take and keep the lease until cancelled; then release it if held."""
        try:
            while True:
                outcome = await self._attempt()
                now = self._clock()
                if outcome is _Attempt.HELD:
                    self._renewed = now
                    self._set(True)
                elif outcome is _Attempt.OTHER:
                    self._set(False)
                elif self.leading and now - self._renewed >= self.config.renew_deadline_s:
                    log.warning("lease not renewed within the deadline; stopping", lease=self.name)
                    self._set(False)
                await asyncio.sleep(self.config.retry_period_s)
        finally:
            if self.leading:
                self._set(False)
                # Bounded: an API server that does not answer must not hold up a shutdown; the lease then
                # expires on its own.
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(RELEASE_TIMEOUT_S):
                        await asyncio.shield(self._release())

    def _set(self, leading: bool) -> None:
        if leading == self.leading:
            return
        self.leading = leading
        if leading:
            self.transitions += 1
        log.info("lease", holder=leading, identity=self.identity, lease=f"{self.namespace}/{self.name}")
        self._on_change(leading)

    async def _attempt(self) -> _Attempt:
        # A leader has what is left of its renew deadline; a standby the whole deadline. The retry period says how
        # often to try, not how long the API server may take: bounded by it, a standby whose API server (or
        # machine) answered a read and a create more slowly than that gave up every attempt, so it never heard a
        # refusal nor took a free lease (a test saw it with a 50 ms retry period under load).
        timeout = self.config.renew_deadline_s
        if self.leading:
            timeout = max(0.05, timeout - (self._clock() - self._renewed))
        try:
            async with asyncio.timeout(timeout):
                return await self._try()
        except TimeoutError:
            return _Attempt.UNKNOWN

    async def _try(self) -> _Attempt:
        got = await self.client.call(self.api.read_namespaced_lease, name=self.name, namespace=self.namespace)
        now = _micro_time()
        if got.status == 404:
            body = self._body(now, acquire=now, transitions=0)
            created = await self.client.call(self.api.create_namespaced_lease, namespace=self.namespace, body=body)
            if created.ok:
                self._accepted()
                return _Attempt.HELD
            self._refused("create", created)
            return _Attempt.UNKNOWN
        if not got.ok:
            self._refused("read", got)
            return _Attempt.UNKNOWN
        meta = _map(got.body.get("metadata"))
        spec = _map(got.body.get("spec"))
        holder = str(spec.get("holderIdentity") or "")
        self.holder_dashboard = str(_map(meta.get("annotations")).get(DASHBOARD_URL_ANNOTATION) or "") if holder else ""
        observed = (holder, str(spec.get("renewTime") or ""))
        if observed != self._observed:
            self._observed = observed
            self._observed_at = self._clock()
        mine = holder == self.identity
        expired = self._clock() - self._observed_at >= float(spec.get("leaseDurationSeconds") or 0)
        if holder and not mine and not expired:
            self._accepted()
            return _Attempt.OTHER
        transitions = int(spec.get("leaseTransitions") or 0)
        acquire = str(spec.get("acquireTime") or now) if mine else now
        body = self._body(now, acquire=acquire, transitions=transitions if mine else transitions + 1)
        body["metadata"]["resourceVersion"] = meta.get("resourceVersion")
        updated = await self.client.call(
            self.api.replace_namespaced_lease, name=self.name, namespace=self.namespace, body=body
        )
        if updated.ok:
            self._observed = (self.identity, now)
            self._observed_at = self._clock()
            self._accepted()
            return _Attempt.HELD
        self._refused("update", updated)
        return _Attempt.UNKNOWN

    def _refused(self, what: str, answer: Answer) -> None:
        """The API server did not take this attempt: remember and log why if it refused (see the module notes)."""
        lease = f"{self.namespace}/{self.name}"
        if not answer.answered or answer.status in _NOT_REFUSALS or answer.status >= 500:
            # Retried; a server that does not answer or is unavailable says nothing about this replica.
            log.warning("lease " + what + " failed; retrying", lease=lease, status=answer.status, error=answer.message)
            return
        refusal = f"the API server refused to {what} Lease {lease}: {answer.message} ({answer.status})"
        if answer.status == 404 and _names_kind(answer, "namespaces"):
            refusal = (
                f"namespace {self.namespace} does not exist, so Lease {lease} cannot be created: create it "
                f"(kubectl create namespace {self.namespace}) or pass --namespace ({answer.message})"
            )
        if refusal != self.refusal:
            log.error("cannot lead", reason=refusal, lease=lease, identity=self.identity)
        self.refusal = refusal

    def _accepted(self) -> None:
        """An attempt went through: whatever was refused before is not in the way any more."""
        if self.refusal:
            log.info("the lease can be taken again", lease=f"{self.namespace}/{self.name}", was=self.refusal)
        self.refusal = ""

    async def _release(self) -> None:
        got = await self.client.call(self.api.read_namespaced_lease, name=self.name, namespace=self.namespace)
        spec = _map(got.body.get("spec"))
        if not got.ok or spec.get("holderIdentity") != self.identity:
            return
        body = dict(got.body)
        body["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": _micro_time()}
        answer = await self.client.call(
            self.api.replace_namespaced_lease, name=self.name, namespace=self.namespace, body=body
        )
        log.info("lease released", ok=answer.ok, lease=f"{self.namespace}/{self.name}")

    def _body(self, now: str, *, acquire: str, transitions: int) -> dict[str, Any]:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "annotations": {
                    key: value
                    for key, value in (
                        (EXPLAIN_URL_ANNOTATION, self.explain_url),
                        (DASHBOARD_URL_ANNOTATION, self.dashboard_url),
                    )
                    if value
                },
            },
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self.config.lease_duration_s)),
                "acquireTime": acquire,
                "renewTime": now,
                "leaseTransitions": transitions,
            },
        }


class LeaseThread:
    """A :class:`LeaderElector` on its own thread, event loop and client (see the module notes).

    ``connect`` opens the thread's client (on the thread's loop); ``on_change`` is called on ``loop`` (the main
    one) whenever leadership starts or stops, as :class:`LeaderElector`'s is; :attr:`leading` is the thread's own
    flag, safe to read from any thread at any time.
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[Client]],
        *,
        namespace: str,
        name: str,
        identity: str,
        config: LeaderElectionConfig,
        on_change: Callable[[bool], None],
        loop: asyncio.AbstractEventLoop,
        explain_url: str = "",
        dashboard_url: str = "",
    ) -> None:
        self._connect = connect
        self._kwargs: dict[str, Any] = {
            "namespace": namespace,
            "name": name,
            "identity": identity,
            "config": config,
            "explain_url": explain_url,
            "dashboard_url": dashboard_url,
        }
        self._on_change = on_change
        self._main = loop
        self.leading = False
        self.elector: LeaderElector | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="gpusched lease", daemon=True)

    @property
    def refusal(self) -> str:
        """Why the API server refuses this replica the lease (empty: nothing refused); safe from any thread."""
        elector = self.elector
        return elector.refusal if elector is not None else ""

    @property
    def holder(self) -> tuple[str, str]:
        """(the Lease's holder as last read, the dashboard address it published); safe from any thread."""
        elector = self.elector
        if elector is None:
            return "", ""
        return elector.observed_holder, elector.holder_dashboard

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    async def wait(self) -> None:
        """Return when the thread ends (after :meth:`stop`, or on its own); raise what ended it, if anything."""
        await asyncio.to_thread(self._thread.join)
        if self._error is not None:
            raise self._error

    async def stop(self, timeout: float) -> None:
        """Stop electing: a leader releases the lease (bounded by ``RELEASE_TIMEOUT_S``); wait up to ``timeout``."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the thread is ending anyway
                loop.call_soon_threadsafe(stop.set)
        await asyncio.to_thread(self._thread.join, timeout)

    def _run(self) -> None:
        try:
            asyncio.run(self._elect())
        except BaseException as exc:  # reported by wait(), on the main loop
            self._error = exc
            self._started.set()
        finally:
            self._changed(False)

    async def _elect(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._started.set()
        client = await self._connect()
        try:
            self.elector = LeaderElector(client, on_change=self._changed, **self._kwargs)
            task = asyncio.create_task(self.elector.run(), name="gpusched lease")
            stopping = asyncio.create_task(self._stop.wait())
            await asyncio.wait([task, stopping], return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                stopping.cancel()
                task.result()  # it never ends on its own: an error
                raise RuntimeError("the lease election ended on its own")
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        finally:
            await client.close()

    def _changed(self, leading: bool) -> None:
        if leading == self.leading:
            return
        self.leading = leading
        with contextlib.suppress(RuntimeError):  # the main loop is closed: nobody to tell
            self._main.call_soon_threadsafe(self._on_change, leading)


def _micro_time() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _names_kind(answer: Answer, kind: str) -> bool:
    """Whether a Status answer is about an object of ``kind`` (its ``details.kind``)."""
    details = _map(answer.body.get("details"))
    return details.get("kind") == kind
