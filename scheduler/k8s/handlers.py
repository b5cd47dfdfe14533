"""The kopf side of the operator: PodGroups, Queues and the Topology, and kopf settings that keep it read-only.

Only ``@kopf.index`` and ``@kopf.on.event`` handlers are registered: kopf's create/update/resume handlers keep
their progress and a diff base on the objects (annotations and patches), and finalizers would make the scheduler
a party to every deletion. The settings below make that impossible even by mistake: progress and diff-base
storages that store nothing, no posting of kopf's own log lines as Events, no peering (the Lease in
``scheduler.k8s.leader`` decides who schedules), no CRD scanning (so no cluster-wide CRD read).

Pods and nodes are not here: ``scheduler.k8s.informer`` explains why (kopf's initial listing is quadratic in
the number of objects).

Why index handlers feed the operator: kopf runs them for every object of the initial listing *before* any
other handler, and holds every ``on.event`` handler, of any resource, until all indexed resources are listed
and indexed. So the first ``on.event`` call on Namespaces (which every cluster has) is the moment the
PodGroups and Queues of the first full listing are in: :meth:`Operator.part_listed` marks it. The indexes
themselves hold nothing (the handlers return None). Deletions reach only ``on.event`` handlers (kopf drops
deleted objects from indexes without calling them), so those handle ``DELETED``.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from scheduler.k8s import client as k8s_client
from scheduler.k8s.operator import Operator

GROUP = "scheduling.gpusched.io"


class _NoStorage(kopf.ProgressStorage, kopf.DiffBaseStorage):
    """Keeps nothing on the objects: the scheduler's handlers need neither progress nor a diff base."""

    def fetch(self, **_: Any) -> None:
        return None

    def store(self, **_: Any) -> None:
        return None

    def purge(self, **_: Any) -> None:
        return None

    def touch(self, **_: Any) -> None:
        return None

    def clear(self, *, essence: Any) -> Any:
        return essence


def settings() -> Any:
    """kopf settings for a read-only operator (see the module notes)."""
    s = kopf.OperatorSettings()
    nothing = _NoStorage()
    s.persistence.progress_storage = nothing
    s.persistence.diffbase_storage = nothing
    s.posting.enabled = False
    s.scanning.disabled = True
    s.peering.standalone = True
    # Handlers are async and cheap; kopf would run sync ones in threads, which the cache is not made for.
    s.execution.max_workers = 1
    s.watching.server_timeout = 300
    s.watching.client_timeout = 330
    logging.getLogger("kopf").setLevel(logging.WARNING)
    return s


def registry(operator: Operator, client_settings: k8s_client.ClientSettings) -> Any:
    """A kopf registry with the scheduler's handlers, feeding ``operator``."""
    reg = kopf.OperatorRegistry()

    @kopf.on.login(registry=reg)
    async def login(**_: Any) -> Any:
        return await connection_info(client_settings)

    def feed(resource: tuple[str, ...], method: Any) -> None:
        @kopf.index(*resource, registry=reg, id=f"feed-{resource[-1]}")
        async def index(body: Any, **_: Any) -> None:
            method(body)

        @kopf.on.event(*resource, registry=reg, id=f"deleted-{resource[-1]}")
        async def deleted(type: str, body: Any, **_: Any) -> None:
            if type == "DELETED":
                method(body, deleted=True)

    feed((GROUP, "v1alpha1", "podgroups"), operator.podgroup_event)
    feed((GROUP, "v1alpha1", "queues"), operator.queue_event)
    # Indexed too, so the Topology is in before the first listing ends and no decision uses the built-in levels.
    feed((GROUP, "v1alpha1", "topologies"), operator.topology_event)

    @kopf.on.event("v1", "namespaces", registry=reg)
    async def listed(**_: Any) -> None:
        operator.part_listed("custom resources")

    return reg


async def connection_info(settings: k8s_client.ClientSettings) -> Any:
    """kopf's credentials from the same kubeconfig or in-cluster files the API client uses."""
    conf = await k8s_client.configuration(settings)
    token = conf.api_key.get("authorization") or conf.api_key.get("BearerToken") or ""
    scheme = None
    if token:
        prefix = conf.api_key_prefix.get("authorization", "")
        scheme, _, value = (f"{prefix} {token}" if prefix else token).partition(" ")
        token = value or scheme
        scheme = scheme if value else "Bearer"
    return kopf.ConnectionInfo(
        server=conf.host,
        ca_path=conf.ssl_ca_cert or None,
        insecure=not conf.verify_ssl,
        certificate_path=conf.cert_file or None,
        private_key_path=conf.key_file or None,
        scheme=scheme,
        token=token or None,
        username=conf.username or None,
        password=conf.password or None,
        default_namespace="default",
    )
