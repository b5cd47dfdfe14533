"""The pod grouper: reads a pod's owners from the API server and makes one PodGroup per workload.

``scheduler.api.objects.workloads`` decides, from a pod and its owner chain, which gang the pod joins; this module is
its
I/O. :meth:`Grouper.group` answers at once from what it has read, or (an owner not read yet) starts the reads and
answers None; when they are done it calls ``resolved`` with the keys of the pods that waited, and the operator
feeds those pods again. Invariants:

- each owner is read once (kept by namespace, kind and name, checked against the uid the pod names, so a workload
  deleted and made again under the same name is read again); at most :data:`MAX_OWNERS` are kept;
- an owner that cannot be read now (no answer, 429, 5xx) is read again after :data:`RETRY_S`; one the scheduler
  may not read (403) or that is gone (404) ends the walk there (the pod is grouped by what was read below it),
  with a warning naming the permission;
- only the leader writes (``may_write``): a PodGroup is created once (``POST``; ``409 AlreadyExists`` counts as
  done: create-or-get), so replicas and restarts never write twice, and a standby that becomes the leader creates
  the gangs it has seen that no PodGroup exists for yet (:meth:`Grouper.leading`);
- the PodGroup is owned by the workload (``controller: true``), so the garbage collector deletes it with it.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import structlog

from scheduler.api.crds import podgroup as api_podgroup
from scheduler.api.objects import workloads
from scheduler.api.objects.workloads import Gang, Grouping, Obj
from scheduler.k8s.client import REASON_ALREADY_EXISTS, Answer, Client

log = structlog.get_logger(__name__)

#: Owner objects kept (least recently used dropped first).
MAX_OWNERS = 10_000
#: Seconds before an owner read or a PodGroup create that got no answer is tried again.
RETRY_S = 2.0

#: (namespace, API group, kind, name)
OwnerKey = tuple[str, str, str, str]


class Grouper:
    """Owner reads, the namespace default queues and PodGroup creation; see the module notes."""

    def __init__(
        self,
        client: Client,
        *,
        may_write: Callable[[], bool],
        resolved: Callable[[set[str]], None],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
        retry_s: float = RETRY_S,
        max_owners: int = MAX_OWNERS,
    ) -> None:
        self.client = client
        self.may_write = may_write
        self.resolved = resolved
        self.spawn = spawn
        self.retry_s = retry_s
        self.max_owners = max_owners
        #: Owners read: the object, or None (gone, or not readable by the scheduler).
        self._owners: OrderedDict[OwnerKey, Obj | None] = OrderedDict()
        #: Owners being read -> keys of the pods waiting for them.
        self._reading: dict[OwnerKey, set[str]] = {}
        #: Namespace -> its default queue (only namespaces that name one).
        self.namespace_queues: dict[str, str] = {}
        #: Gangs derived so far that no PodGroup is known to exist for, by key.
        self._wanted: dict[str, Gang] = {}
        #: Keys of the PodGroups known to exist (seen by the watch, or created here).
        self._existing: set[str] = set()
        self._creating: set[str] = set()
        self._warned: set[str] = set()

    # --- inputs ------------------------------------------------------------------------------------------------

    def namespace_event(self, body: Mapping[str, Any], *, deleted: bool = False) -> bool:
        """A Namespace's default queue; returns whether it changed."""
        name = str(workloads.as_map(body.get("metadata")).get("name") or "")
        queue = "" if deleted else workloads.namespace_queue(body)
        if self.namespace_queues.get(name, "") == queue:
            return False
        if queue:
            self.namespace_queues[name] = queue
        else:
            self.namespace_queues.pop(name, None)
        return True

    def podgroup_seen(self, key: str, *, deleted: bool = False) -> None:
        """The watch shows a (gpusched) PodGroup, or its deletion."""
        if deleted:
            self._existing.discard(key)
            self._wanted.pop(key, None)
        else:
            self._existing.add(key)
            self._wanted.pop(key, None)

    def leading(self) -> None:
        """This replica now writes: create the PodGroups seen wanted while it could not."""
        for gang in list(self._wanted.values()):
            self._ensure(gang)

    # --- grouping ----------------------------------------------------------------------------------------------

    def group(self, pod: Mapping[str, Any]) -> Grouping | None:
        """How ``pod`` (ours, without a PodGroup label) is grouped, or None while its owners are being read."""
        meta = workloads.as_map(pod.get("metadata"))
        namespace = str(meta.get("namespace") or "default")
        pod_key = f"{namespace}/{meta.get('name') or ''}"
        chain: list[Obj] = []
        obj: Obj = pod
        while (ref := workloads.controller_of(obj)) is not None:
            where = workloads.readable(ref)
            if where is None:
                break
            key: OwnerKey = (namespace, ref.group, ref.kind, ref.name)
            if key in self._owners:
                owner = self._owners[key]
                self._owners.move_to_end(key)
                if owner is not None and ref.uid and workloads.as_map(owner.get("metadata")).get("uid") != ref.uid:
                    del self._owners[key]  # an older object of that name: read the one the pod names
                else:
                    if owner is None:
                        break
                    chain.append(owner)
                    obj = owner
                    continue
            self._read(key, where, pod_key)
            return None
        grouping = workloads.group_pod(pod, chain, namespace_queue=self.namespace_queues.get(namespace, ""))
        if grouping.gang is not None and grouping.gang.key not in self._existing:
            self._wanted[grouping.gang.key] = grouping.gang
            self._ensure(grouping.gang)
        return grouping

    def _read(self, key: OwnerKey, where: workloads.Readable, pod_key: str) -> None:
        waiting = self._reading.get(key)
        if waiting is not None:
            waiting.add(pod_key)
            return
        self._reading[key] = {pod_key}
        self.spawn(self._fetch(key, where))

    async def _fetch(self, key: OwnerKey, where: workloads.Readable) -> None:
        namespace, _, kind, name = key
        while True:
            if where.group:
                answer = await self.client.call(
                    self.client.custom.get_namespaced_custom_object,
                    where.group,
                    where.version,
                    namespace,
                    where.plural,
                    name,
                )
            else:
                answer = await self.client.call(self.client.core.read_namespaced_pod, name=name, namespace=namespace)
            if answer.ok or not _transient(answer):
                break
            await asyncio.sleep(max(self.retry_s, answer.retry_after))
        owner: Obj | None = answer.body if answer.ok else None
        if owner is not None and not owner.get("apiVersion"):
            owner = {**owner, "apiVersion": f"{where.group}/{where.version}" if where.group else where.version}
        if owner is not None and not owner.get("kind"):
            owner = {**owner, "kind": kind}
        if not answer.ok and answer.status != 404:
            self._warn(
                f"read {kind}",
                f"cannot read {kind} {namespace}/{name} ({answer.message}); its pods are grouped without it: "
                f"the scheduler needs get on {where.plural}.{where.group or 'core'}",
            )
        self._owners[key] = owner
        while len(self._owners) > self.max_owners:
            self._owners.popitem(last=False)
        self.resolved(self._reading.pop(key, set()))

    # --- writing PodGroups -------------------------------------------------------------------------------------

    def _ensure(self, gang: Gang) -> None:
        if not self.may_write() or gang.key in self._existing or gang.key in self._creating:
            return
        self._creating.add(gang.key)
        self.spawn(self._create(gang))

    async def _create(self, gang: Gang) -> None:
        try:
            answer = await self.client.call(
                self.client.custom.create_namespaced_custom_object,
                api_podgroup.GROUP,
                api_podgroup.VERSION,
                gang.namespace,
                api_podgroup.PLURAL,
                workloads.podgroup_manifest(gang),
            )
        finally:
            self._creating.discard(gang.key)
        if answer.ok or answer.reason == REASON_ALREADY_EXISTS or answer.status == 409:
            if answer.ok:
                log.info("podgroup created", podgroup=gang.key, min_member=gang.min_member, owner=gang.owner.kind)
            self._existing.add(gang.key)
            self._wanted.pop(gang.key, None)
            return
        if _transient(answer):
            await asyncio.sleep(max(self.retry_s, answer.retry_after))
            if gang.key in self._wanted:
                self._ensure(gang)
            return
        self._warn(
            f"create {gang.key}",
            f"cannot create PodGroup {gang.key} for {gang.owner.kind} {gang.owner.name} ({answer.message}); "
            "its pods wait for it",
        )

    def _warn(self, what: str, message: str) -> None:
        if what in self._warned:
            return
        self._warned.add(what)
        log.warning(message)


def _transient(answer: Answer) -> bool:
    return not answer.answered or answer.status == 429 or answer.status >= 500
