"""Quantities are parsed exactly as Kubernetes writes them, and bad ones are refused naming the field."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.basics import quantity, resources
from scheduler.api.basics.errors import InvalidObject

MULTIPLIERS = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        ("16Gi", Fraction(16 * 2**30)),
        ("100Ki", Fraction(102400)),
        ("1e3", Fraction(1000)),
        ("2E-3", Fraction(2, 1000)),
        ("1E", Fraction(10**18)),  # a bare E is the exa suffix, not an exponent
        ("0.1", Fraction(1, 10)),
        (".5", Fraction(1, 2)),
        ("+3", Fraction(3)),
        ("0", Fraction(0)),
        (4, Fraction(4)),
        (0.25, Fraction(1, 4)),
    ],
)
def test_quantities_are_parsed_exactly(text: object, value: Fraction) -> None:
    assert quantity.parse_quantity(text) == value


def test_decimal_fractions_add_up_exactly() -> None:
    assert quantity.parse_quantity("0.1") + quantity.parse_quantity("0.2") == quantity.parse_quantity("0.3")


def test_conversions_round_up_so_a_request_is_never_under_counted() -> None:
    assert quantity.to_milli(quantity.parse_quantity("0.0001")) == 1
    assert quantity.to_milli(quantity.parse_quantity("1.5")) == 1500
    assert quantity.to_units(quantity.parse_quantity("1500m")) == 2
    assert quantity.to_units(quantity.parse_quantity("1Gi")) == 2**30


@pytest.mark.parametrize("bad", ["1.2.3", "-1", "5x", "", "Gi", "1 Gi", "1e", "1e99", "--1", True, None, [1], -2])
def test_bad_quantities_raise_naming_the_field(bad: object) -> None:
    with pytest.raises(InvalidObject) as err:
        quantity.parse_quantity(bad, obj="pod default/p", field="spec.containers[0].resources.requests.cpu")
    assert err.value.field == "spec.containers[0].resources.requests.cpu"
    assert "spec.containers[0].resources.requests.cpu" in str(err.value)
    assert "pod default/p" in str(err.value)


def test_resource_lists_count_cpu_in_milli_and_the_rest_in_units() -> None:
    parsed = resources.parse_resource_list({"cpu": "250m", "memory": "1Mi", "example.com/foo": "2"})
    assert parsed == {"cpu": 250, "memory": 2**20, "example.com/foo": 2}


def test_a_bad_entry_in_a_resource_list_names_its_resource() -> None:
    with pytest.raises(InvalidObject) as err:
        resources.parse_resource_list({"memory": "lots"}, obj="node n", field="status.allocatable")
    assert err.value.field == "status.allocatable.memory"


@settings(max_examples=200, deadline=None)
@given(mantissa=st.integers(min_value=0, max_value=10**12), suffix=st.sampled_from(sorted(MULTIPLIERS)))
def test_parse_equals_the_arithmetic_value(mantissa: int, suffix: str) -> None:
    value = mantissa * MULTIPLIERS[suffix]
    parsed = quantity.parse_quantity(f"{mantissa}{suffix}")
    assert parsed == value
    assert quantity.to_milli(parsed) == math.ceil(value * 1000)
    assert quantity.to_milli(parsed) >= value * 1000 > quantity.to_milli(parsed) - 1


@settings(max_examples=100, deadline=None)
@given(
    whole=st.integers(min_value=0, max_value=10**6),
    digits=st.text(alphabet="0123456789", min_size=1, max_size=9),
    exponent=st.integers(min_value=-9, max_value=9),
)
def test_decimals_with_exponents_are_exact(whole: int, digits: str, exponent: int) -> None:
    value = (whole + Fraction(int(digits), 10 ** len(digits))) * Fraction(10) ** exponent
    assert quantity.parse_quantity(f"{whole}.{digits}e{exponent}") == value


def test_a_resource_list_read_again_is_counted_alike_and_a_bad_entry_is_refused_every_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Entries are remembered by (name, text): the same text counts in milli-cores for cpu and in units for the rest.
    monkeypatch.setattr(resources, "_UNITS", {})
    monkeypatch.setattr(resources, "_UNITS_LIMIT", 3)
    entries = {"cpu": "1500m", "memory": "1500m", "nvidia.com/gpu": "2"}
    for _ in range(2):
        assert resources.parse_resource_list(entries) == {"cpu": 1500, "memory": 2, "nvidia.com/gpu": 2}
    assert resources.parse_resource_list({"cpu": "1500m", "example.com/nic": "1"}) == {
        "cpu": 1500,
        "example.com/nic": 1,
    }
    assert len(resources._UNITS) <= 3  # full: emptied before the next one
    for _ in range(2):
        with pytest.raises(InvalidObject) as err:
            resources.parse_resource_list({"cpu": "lots"}, obj="pod default/a", field="requests")
        assert err.value.field == "requests.cpu"
    assert resources.amount("cpu", 2) == 2000  # numbers, not texts: parsed, never remembered
    assert ("cpu", 2) not in resources._UNITS
