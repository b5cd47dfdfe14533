"""The binder: makes the core's decisions real through ``pods/binding``, many at once, and says how each went.

:meth:`Binder.bind` is the framework's Binder protocol: it returns at once and the binding runs as an asyncio
task, at most ``max_in_flight`` at a time and within the client's QPS, so throughput is not one round trip per
pod. Every outcome comes back through one of the three callbacks given at construction, on the event loop:

=============================================  ==============================================================
the API server answers                          reported
=============================================  ==============================================================
2xx (a ``Status``: never read as a Binding)     ``on_bound(key)``
409 "already assigned to node N"                the pod is read back: ``on_bound(key)`` if it is on our node
                                                with our GPUs (an earlier attempt of ours landed), else
                                                ``on_failed(pod, reason, retry=False, backoff=0)``: someone else
                                                placed it (the reason names node and GPUs) and the watch will
                                                show it there; if the read-back gets no answer,
                                                ``on_uncertain(key)``; if it finds no pod, as the next row
409 "being deleted", 404, UID precondition      ``on_failed(pod, reason, retry=False, backoff=0)``: forget the pod
5xx, no answer (timeout, connection lost)       ``on_uncertain(key)``: keep it assumed; the watch shows the truth
429, any other 4xx (a webhook refusing, RBAC)   ``on_failed(pod, reason, retry=True, backoff=s)``, ``s`` growing
                                                per pod (1, 2, 4... s) so the pod does not win the same GPUs
                                                every cycle
=============================================  ==============================================================

A decision with volume choices (``Decision.volumes``) or ResourceClaims (``Decision.claims``: the allocation is
written into each claim, ``scheduler.k8s.ports.device_claims``) goes through ``prebind`` first
(``scheduler.k8s.ports.volume_binding``: claims bound or provisioning asked, and waited for); if it returns a reason,
the
pod is not bound and the outcome is a refusal with that reason (``on_failed(..., retry=True, ...)``). The wait
holds no binding slot.

The GPU indices go *with* the binding, as ``metadata.annotations`` of the Binding object: the API server copies
a Binding's annotations onto the pod in the same write that sets ``spec.nodeName`` (``BindingREST`` in
kubernetes/pkg/registry/core/pod/storage). A separate PATCH first would cost a second round trip per pod, and
could leave ``gpusched.io/gpu-ids`` on a pod whose binding then failed (and later landed elsewhere); with the
binding, the annotation is on the pod exactly when the pod is on the node, and the kubelet never sees one
without the other. The Binding carries the pod's UID (``metadata.uid``), a precondition: a pod deleted and
created again under the same name is not bound by a decision made for its predecessor.

On a node whose HAMi device plugin registered its devices (``NodeInfo.hami_devices``, from ``nodes``), the binding
also carries HAMi's allocation annotations (``scheduler.api.devices.hami``): the chosen GPUs by UUID per container, the
node,
the bind time and ``hami.io/bind-phase: allocating``, which is how HAMi's device plugin finds the pod in its
``Allocate`` and gives the container exactly those GPUs. A pod whose GPUs cannot be dealt out to its containers
(GPUs asked in init containers) is bound without them, with a warning: HAMi's device plugin will not start it.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.devices import hami as api_hami
from scheduler.api.objects.node import NodeInfo
from scheduler.api.objects.pod import ANNOTATION_GPU_IDS, ANNOTATION_GPU_MILLI, PodRequest
from scheduler.framework.interface import Decision
from scheduler.k8s.client import Answer, Client

log = structlog.get_logger(__name__)


class FailedCallback(Protocol):
    """``on_failed``: the binding did not happen.

    ``retry`` True: the pod is still ours to place (release its reservation and try again after ``backoff``
    seconds). ``retry`` False: release the reservation and do not requeue: the pod is gone or was placed by
    someone else, and the watch will say which.
    """

    def __call__(self, pod: PodRequest, reason: str, retry: bool, backoff: float) -> None: ...


@dataclass(frozen=True, slots=True)
class BinderSettings:
    #: Bindings in progress at once (each holds one connection); the rest wait their turn.
    max_in_flight: int = 16
    #: The first backoff hint after a refusal that may not go away; it doubles per refusal of the same pod.
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    #: Pods whose refusals are remembered (the oldest are forgotten beyond this).
    backoff_pods: int = 10_000


class Outcome(enum.Enum):
    BOUND = "bound"
    #: 409 "already assigned": read the pod to see where.
    ASSIGNED = "assigned"
    #: 404, 409 "being deleted", 409 UID precondition: the pod we decided about is no more.
    GONE = "gone"
    #: 5xx or no answer: the binding may or may not have happened.
    UNCERTAIN = "uncertain"
    #: Refused (429, a webhook, RBAC, validation): not bound; try later.
    REFUSED = "refused"


def classify(answer: Answer) -> Outcome:
    """What a ``pods/binding`` answer means for the pod."""
    if answer.ok:
        return Outcome.BOUND
    status = answer.status
    if status == 0 or status >= 500:
        return Outcome.UNCERTAIN
    if status == 404:
        return Outcome.GONE
    if status == 409:
        message = answer.message
        if "is already assigned to node" in message:
            return Outcome.ASSIGNED
        if "is being deleted" in message or "UID in precondition" in message:
            return Outcome.GONE
    return Outcome.REFUSED


class Binder:
    """Binds decisions concurrently (see the module notes for the outcome table)."""

    def __init__(
        self,
        client: Client,
        *,
        on_bound: Callable[[str], None],
        on_failed: FailedCallback,
        on_uncertain: Callable[[str], None],
        settings: BinderSettings | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        prebind: Callable[[Decision], Awaitable[str]] | None = None,
        unprebind: Callable[[Decision], Awaitable[None]] | None = None,
        nodes: Mapping[str, NodeInfo] | None = None,
    ) -> None:
        self.client = client
        #: The nodes as last seen (the operator's), for the HAMi devices of the node a pod is bound to.
        self._nodes = nodes
        self._prebind = prebind
        #: Undoes what ``prebind`` wrote for a decision's ResourceClaims when the pod was not bound after all.
        self._unprebind = unprebind
        self.settings = settings or BinderSettings()
        self._on_bound = on_bound
        self._on_failed = on_failed
        self._on_uncertain = on_uncertain
        self._loop = loop or asyncio.get_running_loop()
        self._slots = asyncio.Semaphore(self.settings.max_in_flight)
        self._tasks: set[asyncio.Task[None]] = set()
        #: Refusals in a row per pod key, for the backoff hint.
        self._refusals: OrderedDict[str, int] = OrderedDict()
        self.in_flight = 0
        self.stats = {"bound": 0, "failed": 0, "uncertain": 0, "refused": 0}

    # --- the Binder protocol -----------------------------------------------------------------------------------

    def bind(self, decision: Decision) -> None:
        """Start binding and return at once; safe to call from another thread than the event loop's."""
        if _running_loop() is self._loop:
            self._start(decision)
        else:
            self._loop.call_soon_threadsafe(self._start, decision)

    # --- for the operator --------------------------------------------------------------------------------------

    def forget(self, pod_key: str) -> None:
        """The pod is gone: drop what is remembered of its refusals."""
        self._refusals.pop(pod_key, None)

    @property
    def pending(self) -> int:
        """Bindings started and not finished (in flight or waiting for a slot)."""
        return len(self._tasks)

    async def drain(self) -> None:
        """Wait for every binding started so far (at shutdown, in tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # --- the work ----------------------------------------------------------------------------------------------

    def _start(self, decision: Decision) -> None:
        task = self._loop.create_task(self._bind(decision), name=f"bind {decision.pod.key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _bind(self, decision: Decision) -> None:
        pod = decision.pod
        started = time.monotonic()
        try:
            if (decision.volumes or decision.claims) and self._prebind is not None:
                problem = await self._prebind(decision)
                if problem:
                    self._report(decision, Outcome.REFUSED, problem, time.monotonic() - started)
                    return
            async with self._slots:
                self.in_flight += 1
                try:
                    answer = await self.client.call(
                        self.client.core.create_namespaced_pod_binding,
                        name=pod.name,
                        namespace=pod.namespace,
                        body=binding(decision, hami_devices=self._hami_devices(decision.node)),
                    )
                    outcome = classify(answer)
                    if outcome is Outcome.ASSIGNED:
                        outcome, reason = await self._reconcile(decision, answer)
                    else:
                        reason = answer.message
                finally:
                    self.in_flight -= 1
        except Exception as exc:
            # A bug of ours or of the client before or while sending: the pod may not be bound; if it was, the
            # retry meets "already assigned" and the watch sets things right.
            log.exception("bind raised", pod=pod.key, node=decision.node)
            self._report(decision, Outcome.REFUSED, f"{type(exc).__name__}: {exc}", time.monotonic() - started)
            return
        if decision.claims and self._unprebind is not None and outcome in (Outcome.GONE, Outcome.REFUSED):
            # The claims were allocated and reserved for a pod that is not bound: free them before the pod (or the
            # next one) is tried again. ASSIGNED (someone else bound it) and UNCERTAIN keep them: the pod may be
            # running with them.
            await self._unprebind(decision)
        self._report(decision, outcome, reason, time.monotonic() - started)

    async def _reconcile(self, decision: Decision, conflict: Answer) -> tuple[Outcome, str]:
        """409 "already assigned": read the pod; ours if it is on our node with our GPUs."""
        pod = decision.pod
        answer = await self.client.call(self.client.core.read_namespaced_pod, name=pod.name, namespace=pod.namespace)
        if answer.status == 404:
            return Outcome.GONE, "pod deleted"
        if not answer.ok:
            # It is bound somewhere, we cannot tell where: the watch will.
            return Outcome.UNCERTAIN, f"{conflict.message}; reading the pod back failed: {answer.message}"
        metadata = _map(answer.body.get("metadata"))
        uid = metadata.get("uid", "")
        node = _map(answer.body.get("spec")).get("nodeName", "")
        gpu_ids = _map(metadata.get("annotations")).get(ANNOTATION_GPU_IDS, "")
        if pod.uid and uid != pod.uid:
            return Outcome.GONE, f"pod replaced (uid {uid}, decided for {pod.uid})"
        if node == decision.node and gpu_ids == _gpu_ids(decision.gpu_ids):
            return Outcome.BOUND, f"already bound to {node} by an earlier attempt"
        gpus = f" with GPUs {gpu_ids}" if gpu_ids else ""
        return Outcome.ASSIGNED, f"already assigned to node {node}{gpus} by someone else"

    def _hami_devices(self, node: str) -> tuple[api_hami.Device, ...]:
        info = self._nodes.get(node) if self._nodes is not None else None
        return info.hami_devices if info is not None else ()

    def _report(self, decision: Decision, outcome: Outcome, reason: str, seconds: float) -> None:
        pod = decision.pod
        fields = {"pod": pod.key, "node": decision.node, "gpus": _gpu_ids(decision.gpu_ids), "seconds": seconds}
        try:
            if outcome is Outcome.BOUND:
                self.stats["bound"] += 1
                self._refusals.pop(pod.key, None)
                log.info("bound", **fields)
                self._on_bound(pod.key)
            elif outcome is Outcome.UNCERTAIN:
                self.stats["uncertain"] += 1
                log.warning("bind outcome unknown; keeping the pod assumed", reason=reason, **fields)
                self._on_uncertain(pod.key)
            elif outcome is Outcome.REFUSED:
                self.stats["refused"] += 1
                backoff = self._backoff(pod.key)
                log.warning("bind refused", reason=reason, backoff=backoff, **fields)
                self._on_failed(pod, reason, retry=True, backoff=backoff)
            else:
                self.stats["failed"] += 1
                self._refusals.pop(pod.key, None)
                log.info("bind failed; forgetting the pod", reason=reason, outcome=outcome.value, **fields)
                self._on_failed(pod, reason, retry=False, backoff=0.0)
        except Exception:
            log.exception("bind callback raised", outcome=outcome.value, **fields)

    def _backoff(self, key: str) -> float:
        refusals = self._refusals.pop(key, 0) + 1
        self._refusals[key] = refusals
        while len(self._refusals) > self.settings.backoff_pods:
            self._refusals.popitem(last=False)
        s = self.settings
        return float(min(s.backoff_max, s.backoff_initial * 2 ** min(refusals - 1, 30)))


def binding(
    decision: Decision, *, hami_devices: Sequence[api_hami.Device] = (), now: float | None = None
) -> dict[str, Any]:
    """The Binding for a decision, as the JSON sent: the pod's name and UID, the GPU indices as annotations, the node;
    and HAMi's annotations when the node's GPUs are ``hami_devices`` and the pod asks for them through
    ``nvidia.com/gpu`` (without, the kubelet never calls the device plugin for it)."""
    pod = decision.pod
    annotations = {ANNOTATION_GPU_IDS: _gpu_ids(decision.gpu_ids)} if decision.gpu_ids else None
    if annotations and pod.resource_claims and pod.gpu.shared:
        # A MIG device of its claims: the share of the GPU it holds, read back as any shared GPU's (a restart).
        annotations[ANNOTATION_GPU_MILLI] = str(pod.gpu.milli)
    if annotations and hami_devices and pod.gpu_per_container:
        try:
            containers = api_hami.allocation(
                hami_devices, decision.gpu_ids, pod.gpu_per_container, pod.gpu, obj=f"pod {pod.key}"
            )
        except InvalidObject as exc:
            log.warning("no HAMi annotations: the device plugin will not start the pod", pod=pod.key, reason=str(exc))
        else:
            when = time.time() if now is None else now
            annotations.update(api_hami.pod_annotations(decision.node, containers, now=when))
    # A plain dict, as it is sent: a V1Binding model was serialised again for every pod (1% of the scheduler's CPU).
    metadata: dict[str, Any] = {"name": pod.name, "namespace": pod.namespace}
    if pod.uid:
        metadata["uid"] = pod.uid
    if annotations:
        metadata["annotations"] = annotations
    target = {"apiVersion": "v1", "kind": "Node", "name": decision.node}
    return {"apiVersion": "v1", "kind": "Binding", "metadata": metadata, "target": target}


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _gpu_ids(ids: tuple[int, ...]) -> str:
    return ",".join(str(i) for i in ids)


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
