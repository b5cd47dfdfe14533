"""A pod's parse, kept for its next version: a pod scheduled and started comes again and again with nothing changed
that scheduling reads.

After its binding, a pod's watch events are the kubelet's record of it (its phase, start time, conditions, its
containers' states): each was parsed whole, 5 to 6% of the scheduler's CPU under a backlog of pods
(docs/performance.md). :class:`PodParses` keeps the last parse of each pod with a digest of every part a parse reads
but those that move as it is scheduled and starts (``scheduler.api.objects.pod_versions.parts_read``: its node,
phase, reason, start time, and the GPU indices its binding wrote); a version with the same digest is the kept pod
with those read afresh (``pod_versions.moved``), and any other is parsed whole.

What it keeps is bounded (:data:`KEPT`, the pods changed last): a pod scheduled and started sends its versions within
moments. The pods of the first listing are not kept unless they wait for a node, so that a start among thousands of
running pods computes no digest for them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.objects import pod as api_pod
from scheduler.api.objects import pod_versions
from scheduler.api.objects.pod import PodRequest

#: How many pods' parses are kept, the pods seen last.
KEPT = 8192

#: A kept parse: the parts' digest, the pod, and its problems (None: parsed while it waited for a node).
_Kept = tuple[bytes, PodRequest, tuple[InvalidObject, ...] | None]


class PodParses:
    """The last parse of each pod seen lately; see the module's notes."""

    def __init__(self, *, kept: int = KEPT) -> None:
        self._kept: dict[str, _Kept] = {}
        self._bound = kept
        #: Versions read from a kept parse, and parsed whole.
        self.reused = 0
        self.parsed = 0

    def bound(
        self, key: str, raw: Mapping[str, Any], *, keep: bool = True
    ) -> tuple[PodRequest, tuple[InvalidObject, ...]]:
        """A pod on a node, as ``pod.parse_bound_pod`` reads it (which raises as it does); ``keep``: keep this
        parse for the pod's next version."""
        last = self._kept.pop(key, None)
        digest = _digest(raw) if keep or last is not None else None
        # A parse that left problems out kept the pod's annotations without them: only a whole parse reads them again.
        pod = pod_versions.moved(last[1], raw) if last is not None and last[0] == digest and not last[2] else None
        if pod is not None:
            assert last is not None
            problems = last[2] if last[2] is not None else api_pod.run_time_problems(raw, pod)
            self.reused += 1
        else:
            pod, problems = api_pod.parse_bound_pod(raw)
            self.parsed += 1
        if digest is not None:
            self._keep(key, (digest, pod, problems))
        return pod, problems

    def pending(self, key: str, raw: Mapping[str, Any], *, scheduler_name: str) -> PodRequest:
        """A pod waiting for a node, as ``pod.parse_pod`` reads it (which raises as it does); always kept."""
        last = self._kept.pop(key, None)
        digest = _digest(raw)
        moved = pod_versions.moved(last[1], raw) if last is not None and last[0] == digest and last[2] is None else None
        if moved is not None:
            pod = moved
            self.reused += 1
        else:
            pod = api_pod.parse_pod(raw, scheduler_name=scheduler_name)
            self.parsed += 1
        if digest is not None:
            self._keep(key, (digest, pod, None))
        return pod

    def forget(self, key: str) -> None:
        self._kept.pop(key, None)

    def __len__(self) -> int:
        return len(self._kept)

    def _keep(self, key: str, kept: _Kept) -> None:
        self._kept[key] = kept
        if len(self._kept) > self._bound:
            del self._kept[next(iter(self._kept))]  # the pod seen longest ago


def _digest(raw: Mapping[str, Any]) -> bytes | None:
    """A digest of what a parse reads of ``raw`` but what moves; None for what cannot be written as JSON."""
    try:
        data = orjson.dumps(pod_versions.parts_read(raw))
    except TypeError:
        return None
    return hashlib.blake2b(data, digest_size=16).digest()
