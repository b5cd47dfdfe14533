"""Which optional APIs the cluster serves, asked once at start, so that a feature whose API is missing is switched off
instead of its watches failing forever.

Before this, the ``resource.k8s.io/v1`` informers always started: on a cluster without that API (Kubernetes before
1.34, or one that turned it off) each listing got 404 and was tried again every second, for as long as the process
ran, and a pod with ResourceClaims was retried as "not listed yet" with no word of why. Now the task that would run
an API's watches (:func:`watch_if_served`) first asks the API's discovery (``GET /apis/<group>/<version>``, which
every authenticated client may read), once: where the cluster does not serve it, the watches are not started, the
feature is switched off (:data:`DRA`: a pod with ResourceClaims waits, told why, instead of being placed without its
devices), one log line names what is off and why, and the gauge ``gpusched_api_available{group_version}`` says 0 (1
where served). The other watches start meanwhile: an API server that does not answer holds up only this look, and
readiness waits for no optional kind but the NUMA zones, which it waits for until they are listed or discovery
says they are not served (a pod placed before them would be placed blind to them: ``scheduler.k8s.feeds.feed``).

Invariants:

- Asked once: an API installed after the start (a CRD, an upgraded API server) is used after the replica's next
  restart. A definite answer is needed to switch a feature off: 404 is "not served", a listing is "served" when it
  names every resource the feature reads; no answer, 429 or 5xx are asked again (the API server is coming up, and
  the informers could not list anything either). An answer that says neither (401, 403: discovery refused) keeps the
  feature on, as before, with a warning.
- The APIs every supported Kubernetes has (``v1``, ``policy/v1``, ``storage.k8s.io/v1``, ``coordination.k8s.io/v1``)
  are not asked about. The scheduler's own CRDs are waited for (``scheduler.k8s.feeds.handlers``: no queue, no start),
  and
  scheduler-plugins' PodGroups are looked up there once too (``handlers.compat_served``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import structlog

from scheduler.api.devices import numa as api_numa
from scheduler.k8s.client import Client
from scheduler.k8s.feeds import numa_zones
from scheduler.k8s.feeds.informer import Informer
from scheduler.k8s.ports import device_claims
from scheduler.k8s.serve.metrics import Metrics

log = structlog.get_logger(__name__)

#: Seconds between two looks at a group version's discovery that got no definite answer.
RETRY_S = 1.0


@dataclass(frozen=True, slots=True)
class OptionalApi:
    """A group version the scheduler uses when the cluster serves it, and what is off without it."""

    group: str
    version: str
    #: The resources (plural names) the feature reads; all must be served.
    resources: frozenset[str]
    #: What is switched off without it, in the log line.
    feature: str
    #: The first Kubernetes minor that serves it by default.
    since: str
    #: What serves it when Kubernetes itself does not (a CRD another project installs); "" for Kubernetes' own.
    installed_by: str = ""

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def missing(self) -> str:
        """Why the feature is off, as pods that need it are told."""
        return f"the cluster does not serve {self.group_version} ({self.needs}), so {self.feature} is off"

    @property
    def needs(self) -> str:
        """What makes the cluster serve it."""
        return self.installed_by or f"Kubernetes {self.since}+"


#: Dynamic Resource Allocation: DeviceClasses, ResourceSlices and ResourceClaims
# (``scheduler.k8s.ports.device_claims``).
DRA = OptionalApi(
    group="resource.k8s.io",
    version="v1",
    resources=frozenset(device_claims.KINDS),
    feature="dynamic resource allocation (ResourceClaims)",
    since="1.34",
)

#: NUMA zones: NodeResourceTopology objects (``scheduler.k8s.feeds.numa_zones``), a CRD of the node-feature-discovery
#: project: without it no node has a NUMA rule (the ``numa`` filter refuses nothing).
NUMA = OptionalApi(
    group=api_numa.GROUP,
    version=api_numa.VERSION,
    resources=frozenset(numa_zones.KINDS),
    feature="NUMA placement (the numa filter)",
    since="",
    installed_by="NFD's topology-updater or the resource-topology-exporter installs it",
)


async def served(client: Client, api: OptionalApi, *, retry_s: float = RETRY_S) -> bool:
    """Whether the cluster serves ``api``, asked until the API server gives a definite answer (see the module notes)."""
    told = False
    while True:
        answer = await client.call(client.custom.get_api_resources, api.group, api.version)
        if answer.ok:
            resources = answer.body.get("resources")
            names = (
                {str(r.get("name")) for r in resources if isinstance(r, dict)} if isinstance(resources, list) else set()
            )
            return api.resources <= names
        if answer.status == 404:
            return False
        if answer.status in (401, 403):
            log.warning(
                "API discovery refused; the feature stays on",
                group_version=api.group_version,
                status=answer.status,
                error=answer.message,
            )
            return True
        if not told:
            told = True
            log.info("API discovery not answered; asking again", group_version=api.group_version, error=answer.message)
        await asyncio.sleep(max(retry_s, answer.retry_after))


async def watch_if_served(
    client: Client,
    api: OptionalApi,
    informers: Callable[[], Mapping[str, Informer]],
    *,
    off: Callable[[str], None],
    metrics: Metrics | None = None,
) -> None:
    """Ask once whether the cluster serves ``api``; then run ``informers()`` until cancelled, or, when it does not,
    call ``off(why)``, say so in one log line and wait until cancelled (a task of ``gpusched run`` that ends stops
    the process). The gauge says which. The other watches do not wait for this look; readiness waits for it only for
    the NUMA zones."""
    available = await served(client, api)
    if metrics is not None:
        metrics.api_available.labels(group_version=api.group_version).set(1.0 if available else 0.0)
    if not available:
        off(api.missing)
        log.warning(
            "API not served; feature off",
            group_version=api.group_version,
            off=api.feature,
            needs=api.needs,
            note="looked up once at start: restart gpusched once the cluster serves it",
        )
        await asyncio.Event().wait()
    # One fails, all stop (and the task with them); cancelled, all are cancelled.
    async with asyncio.TaskGroup() as group:
        for kind, informer in informers().items():
            group.create_task(informer.run(), name=f"gpusched {kind}")
