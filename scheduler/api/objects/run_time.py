"""How long a pod runs once started, as it declares it (docs/pods.md): the shortest of its declarations.

``spec.activeDeadlineSeconds`` (hard: the kubelet ends the pod that long after it started), Kueue's
``kueue.x-k8s.io/max-exec-time-seconds`` label (hard: Kueue evicts the workload after that long) and the
``gpusched.io/expected-runtime`` annotation (soft: the user's estimate, which the pod may overrun). A malformed one
refuses a pending pod of ours naming the field; a bound pod's is left out and reported
(``scheduler.api.objects.pod.parse_bound_pod``), and another scheduler's pending pod is read without it. A Job's
``activeDeadlineSeconds`` is not read: it lives on the Job, which the pod feed does not watch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.api.basics.errors import InvalidObject

#: The user's estimate of how long the pod runs once started: a duration (``2h30m``, ``90m``, ``45s``) or seconds.
ANNOTATION_EXPECTED_RUNTIME = "gpusched.io/expected-runtime"
#: Kueue's bound on a workload's run time, in seconds (Kueue evicts the workload once it has run that long).
LABEL_KUEUE_MAX_EXEC_TIME = "kueue.x-k8s.io/max-exec-time-seconds"


@dataclass(frozen=True, slots=True)
class RunTime:
    """How long a pod runs once started, as it declares it (the shortest of its declarations, see the module notes)."""

    seconds: float
    #: A deadline (the pod is ended by then: ``spec.activeDeadlineSeconds``, Kueue's label), not an estimate.
    hard: bool
    #: The field it was read from, for messages.
    field: str


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([hms])")
_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0}


def active_deadline(seconds: int) -> RunTime:
    """The run time a pod's ``spec.activeDeadlineSeconds: seconds`` declares (what the simulator's pods declare)."""
    return RunTime(float(seconds), True, "spec.activeDeadlineSeconds")


def parse_duration(raw: str, *, obj: str, field: str) -> float:
    """A duration as Go and kubectl write it, in hours, minutes and seconds (``2h30m``, ``90m``, ``1.5h``, ``45s``), or
    a number of seconds (``3600``); > 0."""
    text = raw.strip()
    seconds: float | None = None
    try:
        seconds = float(text)
    except ValueError:
        parts = _DURATION.findall(text)
        if parts and "".join(n + u for n, u in parts) == text:
            seconds = sum(float(n) * _SECONDS[u] for n, u in parts)
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        raise InvalidObject(
            f"{raw!r} is not a duration > 0 like '2h30m', '90m', '45s' or a number of seconds", obj=obj, field=field
        )
    return seconds


def read(
    spec: Mapping[str, object], labels: Mapping[str, str], annotations: Mapping[str, str], *, obj: str
) -> tuple[RunTime | None, tuple[InvalidObject, ...]]:
    """The pod's declared run time (the shortest declaration; a deadline before an estimate of the same length), and
    a problem for each declaration that cannot be read (left out)."""
    found: list[RunTime] = []
    problems: list[InvalidObject] = []
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None:
        if isinstance(deadline, bool) or not isinstance(deadline, int) or deadline < 1:
            problems.append(
                InvalidObject(
                    f"{deadline!r} is not a number of seconds >= 1", obj=obj, field="spec.activeDeadlineSeconds"
                )
            )
        else:
            found.append(active_deadline(deadline))
    kueue = labels.get(LABEL_KUEUE_MAX_EXEC_TIME)
    if kueue is not None:
        where = f"metadata.labels[{LABEL_KUEUE_MAX_EXEC_TIME}]"
        if not kueue.strip().isdigit() or int(kueue) < 1:
            problems.append(InvalidObject(f"{kueue!r} is not a number of seconds >= 1", obj=obj, field=where))
        else:
            found.append(RunTime(float(int(kueue)), True, where))
    estimate = annotations.get(ANNOTATION_EXPECTED_RUNTIME)
    if estimate is not None:
        where = f"metadata.annotations[{ANNOTATION_EXPECTED_RUNTIME}]"
        try:
            found.append(RunTime(parse_duration(estimate, obj=obj, field=where), False, where))
        except InvalidObject as exc:
            problems.append(exc)
    best = min(found, key=lambda r: (r.seconds, not r.hard), default=None)
    return best, tuple(problems)


def declares(spec: Mapping[str, object], labels: Mapping[str, str], annotations: Mapping[str, str]) -> bool:
    """Whether a pod of these declares a run time at all (most do not: they skip reading it)."""
    return (
        "activeDeadlineSeconds" in spec
        or LABEL_KUEUE_MAX_EXEC_TIME in labels
        or ANNOTATION_EXPECTED_RUNTIME in annotations
    )
