"""Consolidation's evictions through the Eviction API (``policy/v1`` Eviction, the pods' ``eviction`` subresource).

The API server refuses an eviction that would breach a PodDisruptionBudget (``429 Too Many Requests``), and a
deletion does not ask it; so the pods a plan moves are evicted, not deleted. One pod after another, in the plan's
order: the first refusal (a 429, any other error, or no answer) stops the rest, and the loop abandons the plan
(``SchedulingLoop.move_refused``): what it held is released, the job is told why, and the pods not evicted stay
where they are. A pod already gone (404) counts as moved. The API server itself marks an evicted pod with the
``DisruptionTarget`` condition (reason ``EvictionByEvictionAPI``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import structlog

from scheduler.api.objects.pod import PodRequest
from scheduler.k8s.client import Client

log = structlog.get_logger(__name__)


def eviction(pod: PodRequest) -> dict[str, Any]:
    """The Eviction object for ``pod`` (deleting only the pod of that uid, not a namesake made since)."""
    body: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod.name, "namespace": pod.namespace},
    }
    if pod.uid:
        body["deleteOptions"] = {"preconditions": {"uid": pod.uid}}
    return body


async def evict_in_order(
    client: Client, pods: Sequence[PodRequest], reason: str, *, refused: Callable[[str, str], None]
) -> int:
    """Evict ``pods`` one after another; at the first refusal call ``refused(pod key, why)`` and stop. Returns how
    many were evicted (or already gone)."""
    for done, pod in enumerate(pods):
        answer = await client.call(
            client.core.create_namespaced_pod_eviction, name=pod.name, namespace=pod.namespace, body=eviction(pod)
        )
        if answer.ok or answer.status == 404:
            log.info("moved", pod=pod.key, reason=reason)
            continue
        why = f"HTTP {answer.status}: {answer.message}" if answer.answered else answer.message
        log.warning("move refused", pod=pod.key, status=answer.status, error=answer.message)
        refused(pod.key, why)
        return done
    return len(pods)
