"""What the operator's parts share: the cache, the metrics, the writers of Events and pod conditions, and the
operator's flags and hooks.

One :class:`OperatorContext` is built by :class:`~scheduler.k8s.operator.Operator` and given to the pod feed, the
adapter and the status publisher, so that they agree on one cache and one set of writers, and read leadership
from one place (``leading``, which only the operator sets).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scheduler.cache.state import Cache
from scheduler.k8s import status as k8s_status
from scheduler.k8s.client import Client
from scheduler.k8s.ports.events import EventRecorder
from scheduler.k8s.serve.metrics import Metrics


@dataclass(frozen=True, slots=True, kw_only=True)
class OperatorContext:
    client: Client
    cache: Cache
    metrics: Metrics
    #: Events, written by the leader only (the parts check ``leading`` before they emit).
    recorder: EventRecorder
    #: The ``PodScheduled`` condition of pods waiting for a node.
    conditions: k8s_status.PodConditionWriter
    #: The ``spec.schedulerName`` this operator serves (``gpusched run --scheduler-name``).
    scheduler_name: str
    #: Whether this replica holds the lease now (only then it decides and writes).
    leading: Callable[[], bool]
    #: Wakes the scheduling task: there may be work.
    wake: Callable[[], None]
    #: Runs a coroutine as a task the operator cancels at close.
    spawn: Callable[[Any], None]
    #: Unix seconds (the loop's clock).
    clock: Callable[[], float]
