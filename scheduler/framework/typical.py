"""Typical pods: the pod shapes a cluster sees most, with their frequencies (FGD's target workload).

A shape is (CPU milli, GPU milli per device, GPU count, allowed models). The typical set is taken from the
most frequent shape down until it covers ``coverage`` of the pods, and the frequencies are renormalised over
the shapes taken. Ties in frequency go to the larger CPU, then GPU milli, GPU count, then models, so the set
does not depend on input order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from scheduler.api.basics import fields
from scheduler.api.basics.errors import InvalidObject


@dataclass(frozen=True, slots=True)
class Shape:
    cpu: float
    milli: float
    gpus: int
    models: tuple[str, ...] = ()
    weight: float = 1.0


def typical_shapes(pods: Iterable[tuple[float, float, int, tuple[str, ...]]], coverage: float = 0.95) -> list[Shape]:
    """The typical shapes among ``(cpu, milli per GPU, gpus, models)`` tuples, weights summing to 1."""
    counts = Counter(pods)
    total = sum(counts.values())
    if total == 0:
        return []
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], -kv[0][0], -kv[0][1], -kv[0][2], tuple(sorted(kv[0][3]))))
    taken: list[tuple[tuple[float, float, int, tuple[str, ...]], int]] = []
    covered = 0
    for shape, count in ordered:
        taken.append((shape, count))
        covered += count
        if covered >= coverage * total:
            break
    return [Shape(cpu, milli, gpus, models, count / covered) for (cpu, milli, gpus, models), count in taken]


#: Used until a cluster has enough pods to learn from: CPU-only, shared, whole and multi-GPU pods.
GENERIC = (
    Shape(4000, 0, 0, (), 0.2),
    Shape(4000, 250, 1, (), 0.15),
    Shape(8000, 500, 1, (), 0.15),
    Shape(8000, 1000, 1, (), 0.25),
    Shape(16000, 1000, 2, (), 0.1),
    Shape(32000, 1000, 4, (), 0.1),
    Shape(64000, 1000, 8, (), 0.05),
)


def parse_shapes(raw: object, *, obj: str, field: str) -> list[Shape]:
    """Shapes from configuration: ``[{cpu: 4000, milli: 500, gpus: 1, models: "A100|H100", weight: 0.2}]``."""
    if not isinstance(raw, Sequence) or isinstance(raw, str) or not raw:
        raise InvalidObject("must be a non-empty list of pod shapes", obj=obj, field=field)
    shapes = []
    not_map = "must be a map with cpu, milli, gpus, models, weight"
    for where, item in fields.maps(list(raw), obj=obj, field=field, not_map=not_map):
        values = {}
        for key in ("cpu", "milli", "gpus", "weight"):
            v = item.get(key, 1.0 if key == "weight" else 0)
            if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
                raise InvalidObject(f"{v!r} is not a non-negative number", obj=obj, field=f"{where}.{key}")
            values[key] = v
        if values["gpus"] > 1 and values["milli"] != 1000:
            raise InvalidObject("a multi-GPU shape takes whole GPUs (milli 1000)", obj=obj, field=f"{where}.milli")
        if values["gpus"] and not 0 < values["milli"] <= 1000:
            raise InvalidObject("a GPU shape needs milli in 1..1000", obj=obj, field=f"{where}.milli")
        models = item.get("models", "")
        if not isinstance(models, str):
            raise InvalidObject("must be a string like 'A100|H100'", obj=obj, field=f"{where}.models")
        shapes.append(
            Shape(
                float(values["cpu"]),
                float(values["milli"]),
                int(values["gpus"]),
                tuple(m for m in models.split("|") if m),
                float(values["weight"]),
            )
        )
    total = sum(s.weight for s in shapes)
    if total <= 0:
        raise InvalidObject("weights must not all be zero", obj=obj, field=field)
    return [Shape(s.cpu, s.milli, s.gpus, s.models, s.weight / total) for s in shapes]
