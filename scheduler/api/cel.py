"""Device selectors: the CEL expressions of DeviceClasses and ResourceClaim requests, compiled and evaluated.

The expressions are Kubernetes' DRA CEL (``resource.k8s.io/v1`` ``DeviceSelector.cel.expression``): one variable,
``device``, with ``driver``, ``attributes`` and ``capacity``. Attributes and capacities are maps keyed by domain
(``device.attributes["gpu.nvidia.com"].productName``); an attribute published without a domain belongs to the
device's driver. The language itself is evaluated by a maintained CEL implementation
(``common-expression-language``, the Python binding of the Rust ``cel-interpreter``); this module adds what
Kubernetes adds to the environment:

- ``quantity("40Gi")`` and capacities are quantities, kept as integers in milli-units, so that ``==``, ``<``...
  compare them, and the Kubernetes quantity methods ``compareTo``, ``isGreaterThan``, ``isLessThan``, ``sign``,
  ``asInteger``, ``asApproximateFloat`` and ``isInteger`` work;
- ``semver("1.2.3")`` and version attributes: compared with the same methods, by semantic version.

A version attribute becomes a :class:`Version`-shaped string (``"semver:1.2.3"``) inside CEL so that ``==`` still
works between two versions; the methods above read it back.

As in Kubernetes, an expression must evaluate to a bool, and reading an attribute a device does not have is an
error (guard it with ``has()`` or ``in``): :func:`matches` raises :class:`CelError` then, and the caller decides
(the DRA plugin reports it and the device does not match).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from typing import Any

from scheduler.api import quantity as api_quantity
from scheduler.api.errors import InvalidObject

_SEMVER = "semver:"


class CelError(ValueError):
    """An expression failed to evaluate for a device (a missing attribute, a type mismatch, a non-bool result)."""


@dataclass(frozen=True, slots=True)
class Version:
    """A semantic version attribute (``version`` in a ResourceSlice)."""

    text: str

    def key(self) -> tuple[int, int, int, tuple[tuple[int, int | str], ...]]:
        return _semver_key(self.text)


AttributeValue = bool | int | str | Version


@dataclass(frozen=True, slots=True)
class Expression:
    """A compiled selector expression; ``where`` names the object and field it came from, for messages."""

    source: str
    program: Any
    where: str = ""


@cache
def _cel() -> Any:
    # Imported at the first expression, not with the scheduler: the package's __init__ also loads its
    # command-line interface (prompt_toolkit), 75 ms of a start-up that clusters without DRA never use.
    return importlib.import_module("cel")


def compile_expression(source: str, *, obj: str, field: str) -> Expression:
    """Compile a selector expression; a syntax error raises :class:`InvalidObject` naming ``obj`` and ``field``."""
    if not source.strip():
        raise InvalidObject("an empty CEL expression", obj=obj, field=field)
    try:
        program = _cel().compile(source)
    except Exception as exc:
        raise InvalidObject(f"not a valid CEL expression: {exc}", obj=obj, field=field) from exc
    return Expression(source, program, f"{obj} field {field}")


def device_variable(
    driver: str, attributes: Mapping[str, AttributeValue], capacity: Mapping[str, int]
) -> dict[str, Any]:
    """The ``device`` variable for a device: attributes and capacities (milli-units) grouped by domain.

    Keys are qualified names (``domain/id``); an unqualified key belongs to ``driver``'s domain.
    """
    attrs: dict[str, dict[str, Any]] = {}
    for name, value in attributes.items():
        domain, _, ident = name.rpartition("/")
        attrs.setdefault(domain or driver, {})[ident] = _to_cel(value)
    caps: dict[str, dict[str, Any]] = {}
    for name, amount in capacity.items():
        domain, _, ident = name.rpartition("/")
        caps.setdefault(domain or driver, {})[ident] = int(amount)
    attrs.setdefault(driver, {})
    caps.setdefault(driver, {})
    return {"driver": driver, "attributes": attrs, "capacity": caps}


def matches(expression: Expression, device: Mapping[str, Any]) -> bool:
    """Whether ``device`` (from :func:`device_variable`) satisfies ``expression``; :class:`CelError` if it cannot
    be evaluated for it."""
    try:
        result = expression.program.execute(_context(device))
    except Exception as exc:
        raise CelError(f"{expression.where}: {exc}") from exc
    if not isinstance(result, bool):
        raise CelError(f"{expression.where}: the expression gives {type(result).__name__}, not a bool")
    return result


# --- the Kubernetes additions --------------------------------------------------------------------------------


def _to_cel(value: AttributeValue) -> Any:
    return f"{_SEMVER}{value.text}" if isinstance(value, Version) else value


def _quantity(text: str) -> int:
    try:
        return api_quantity.to_milli(api_quantity.parse_quantity(text, field="quantity()"))
    except InvalidObject as exc:
        raise ValueError(f"quantity({text!r}): {exc.reason}") from exc


def _semver(text: str) -> str:
    _semver_key(text)  # raises on a bad version
    return f"{_SEMVER}{text}"


def _semver_key(text: str) -> tuple[int, int, int, tuple[tuple[int, int | str], ...]]:
    core, _, pre = text.partition("+")[0].partition("-")
    parts = core.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"{text!r} is not a semantic version (MAJOR.MINOR.PATCH)")
    # A pre-release sorts before its release: (1, ()) for the release, (0, identifiers) before it.
    ids: tuple[tuple[int, int | str], ...] = (
        tuple((0, int(p)) if p.isdigit() else (1, p) for p in pre.split(".")) if pre else ((2, 0),)
    )
    return int(parts[0]), int(parts[1]), int(parts[2]), ids


def _ordered(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_SEMVER):
        return _semver_key(value[len(_SEMVER) :])
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{value!r} is neither a quantity nor a semantic version")
    return value


def _compare(a: Any, b: Any) -> int:
    x, y = _ordered(a), _ordered(b)
    if type(x) is not type(y) and not (isinstance(x, int | float) and isinstance(y, int | float)):
        raise ValueError("cannot compare a quantity with a version")
    return int((x > y) - (x < y))


_FUNCTIONS: dict[str, Any] = {
    "quantity": _quantity,
    "semver": _semver,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: _compare(a, b) > 0,
    "isLessThan": lambda a, b: _compare(a, b) < 0,
    "sign": lambda a: (_ordered(a) > 0) - (_ordered(a) < 0),
    "asInteger": lambda a: int(Fraction(int(a), 1000)) if int(a) % 1000 == 0 else _not_integer(a),
    "isInteger": lambda a: int(a) % 1000 == 0,
    "asApproximateFloat": lambda a: int(a) / 1000.0,
    "major": lambda v: _semver_key(str(v)[len(_SEMVER) :])[0],
    "minor": lambda v: _semver_key(str(v)[len(_SEMVER) :])[1],
    "patch": lambda v: _semver_key(str(v)[len(_SEMVER) :])[2],
}


def _not_integer(a: Any) -> Any:
    raise ValueError(f"quantity {int(a) / 1000} is not an integer")


def _context(device: Mapping[str, Any]) -> Any:
    context = _cel().Context()
    for name, function in _FUNCTIONS.items():
        context.add_function(name, function)
    context.add_variable("device", dict(device))
    return context
