"""The reasons a node cannot take a pod, in the words kube-scheduler uses (which tools, autoscalers and Kubernetes'
own e2e tests read): the text each filter declares for its codes (``scheduler.core.registry.REASONS``), a taint
named per node."""

from __future__ import annotations

from collections import Counter

import numpy as np
import numpy.typing as npt

from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import Snapshot
from scheduler.core import registry


def reason_text(code: int, columns: list[str]) -> str:
    """The text of ``code`` whatever the node (a taint's names no taint); ``columns``: the snapshot's resources."""
    return registry.REASONS.text(code, columns)


def count(snapshot: Snapshot, pod: PodRequest, code: int, slots: npt.NDArray[np.int64]) -> Counter[str]:
    """The nodes ``slots`` (each refused with ``code``), counted by the text each says."""
    reason = registry.REASONS.get(code)
    if reason is not None:
        return reason.count(snapshot, pod, slots)
    return Counter({reason_text(code, snapshot.columns): int(slots.shape[0])}) if slots.shape[0] else Counter()


def node_text(snapshot: Snapshot, pod: PodRequest, code: int, slot: int) -> str:
    """The reason one node (``slot``) cannot take ``pod``, refused with ``code``."""
    return next(iter(count(snapshot, pod, code, np.array([slot], dtype=np.int64))))
