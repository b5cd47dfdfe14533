"""Typical pod shapes: the most frequent shapes covering the asked share of pods, in an order that does not depend
on the input's."""

from __future__ import annotations

import pytest

from scheduler.api.basics.errors import InvalidObject
from scheduler.framework import typical


def _pods(
    counts: dict[tuple[float, float, int, tuple[str, ...]], int],
) -> list[tuple[float, float, int, tuple[str, ...]]]:
    return [shape for shape, n in counts.items() for _ in range(n)]


def test_shapes_are_taken_until_coverage_and_reweighted() -> None:
    pods = _pods({(4000, 0, 0, ()): 6, (8000, 1000, 1, ()): 3, (2000, 500, 1, ()): 1})
    shapes = typical.typical_shapes(pods, coverage=0.9)
    assert [(s.cpu, s.milli, s.gpus) for s in shapes] == [(4000, 0, 0), (8000, 1000, 1)]
    assert [s.weight for s in shapes] == pytest.approx([6 / 9, 3 / 9])


def test_full_coverage_takes_every_shape() -> None:
    pods = _pods({(4000, 0, 0, ()): 6, (8000, 1000, 1, ()): 3, (2000, 500, 1, ()): 1})
    shapes = typical.typical_shapes(pods, coverage=1.0)
    assert len(shapes) == 3
    assert sum(s.weight for s in shapes) == pytest.approx(1.0)


def test_ties_go_to_larger_cpu_then_milli_then_count_then_models_whatever_the_input_order() -> None:
    counts = {
        (1000, 500, 1, ("H100",)): 2,
        (1000, 500, 1, ("A100",)): 2,
        (1000, 1000, 2, ()): 2,
        (1000, 1000, 1, ()): 2,
        (2000, 0, 0, ()): 2,
    }
    want = [
        (2000, 0, 0, ()),
        (1000, 1000, 2, ()),
        (1000, 1000, 1, ()),
        (1000, 500, 1, ("A100",)),
        (1000, 500, 1, ("H100",)),
    ]
    forward = typical.typical_shapes(_pods(counts), coverage=1.0)
    backward = typical.typical_shapes(list(reversed(_pods(counts))), coverage=1.0)
    assert [(s.cpu, s.milli, s.gpus, s.models) for s in forward] == want
    assert forward == backward


def test_no_pods_no_shapes() -> None:
    assert typical.typical_shapes([]) == []


def test_configured_shapes_are_normalised() -> None:
    shapes = typical.parse_shapes(
        [{"cpu": 4000, "milli": 500, "gpus": 1, "models": "A100|H100", "weight": 3}, {"cpu": 8000}],
        obj="plugin fgd",
        field="args.typical",
    )
    assert shapes[0] == typical.Shape(4000.0, 500.0, 1, ("A100", "H100"), 0.75)
    assert shapes[1] == typical.Shape(8000.0, 0.0, 0, (), 0.25)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ([], "args.typical"),
        ([{"cpu": -1}], "args.typical[0].cpu"),
        ([{"gpus": 2, "milli": 500}], "args.typical[0].milli"),
        ([{"gpus": 1, "milli": 1500}], "args.typical[0].milli"),
        ([{"models": 3}], "args.typical[0].models"),
        ([{"weight": 0}], "args.typical"),
    ],
)
def test_bad_configured_shapes_name_the_field(raw: object, field: str) -> None:
    with pytest.raises(InvalidObject) as err:
        typical.parse_shapes(raw, obj="plugin fgd", field="args.typical")
    assert err.value.field == field
