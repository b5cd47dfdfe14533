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
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.devices import cel_library


class CelError(ValueError):
    """An expression failed to evaluate for a device (a missing attribute, a type mismatch, a non-bool result)."""


@dataclass(frozen=True, slots=True)
class Version:
    """A semantic version attribute (``version`` in a ResourceSlice)."""

    text: str

    def key(self) -> tuple[int, int, int, tuple[tuple[int, int | str], ...]]:
        return cel_library.semver_key(self.text)


AttributeValue = bool | int | str | Version


@dataclass(frozen=True, slots=True)
class Expression:
    """A compiled selector expression; ``where`` names the object and field it came from, for messages."""

    source: str
    program: Any
    where: str = ""
    #: The attribute and capacity domains the expression names literally: Kubernetes reads a domain a device does
    #: not have as an empty map (so ``has(device.attributes["other.com"].x)`` is false, not an error).
    domains: tuple[str, ...] = ()


@cache
def _cel() -> Any:
    # Imported at the first expression, not with the scheduler: the package's __init__ also loads its
    # command-line interface (prompt_toolkit), 75 ms of a start-up that clusters without DRA never use.
    module = importlib.import_module("cel")
    # The binding logs a warning for every function that raises; a device that cannot be evaluated is reported
    # once by the caller (scheduler.cache.device_store), with the object and field.
    logging.getLogger("cel").setLevel(logging.ERROR)
    return module


def compile_expression(source: str, *, obj: str, field: str) -> Expression:
    """Compile a selector expression; a syntax error raises :class:`InvalidObject` naming ``obj`` and ``field``."""
    if not source.strip():
        raise InvalidObject("an empty CEL expression", obj=obj, field=field)
    try:
        program = _cel().compile(source)
    except Exception as exc:
        raise InvalidObject(f"not a valid CEL expression: {exc}", obj=obj, field=field) from exc
    return Expression(source, program, f"{obj} field {field}", tuple(sorted(set(_DOMAIN.findall(source)))))


_DOMAIN = re.compile(r"""\.(?:attributes|capacity)\s*\[\s*['"]([^'"\\]+)['"]\s*\]""")


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
        caps.setdefault(domain or driver, {})[ident] = cel_library.quantity_value(int(amount))
    attrs.setdefault(driver, {})
    caps.setdefault(driver, {})
    return {"driver": driver, "attributes": attrs, "capacity": caps}


def matches(expression: Expression, device: Mapping[str, Any]) -> bool:
    """Whether ``device`` (from :func:`device_variable`) satisfies ``expression``; :class:`CelError` if it cannot
    be evaluated for it."""
    try:
        result = expression.program.execute(_context(device, expression.domains))
    except Exception as exc:
        raise CelError(f"{expression.where}: {exc}") from exc
    if not isinstance(result, bool):
        raise CelError(f"{expression.where}: the expression gives {type(result).__name__}, not a bool")
    return result


# --- the Kubernetes additions --------------------------------------------------------------------------------


def _to_cel(value: AttributeValue) -> Any:
    return f"{cel_library.SEMVER}{value.text}" if isinstance(value, Version) else value


def _context(device: Mapping[str, Any], domains: tuple[str, ...]) -> Any:
    if domains:
        device = {
            **device,
            "attributes": {**{domain: {} for domain in domains}, **device["attributes"]},
            "capacity": {**{domain: {} for domain in domains}, **device["capacity"]},
        }
    context = _base_context()
    context.add_variable("device", dict(device))
    return context


@cache
def _base_context() -> Any:
    # One context with Kubernetes' functions, its device replaced at every evaluation: registering the ~45
    # functions was two thirds of an evaluation's cost (19 -> 7 us). Evaluations run one at a time, on the
    # scheduler's event loop.
    context = _cel().Context()
    for name, function in cel_library.FUNCTIONS.items():
        context.add_function(name, function)
    for name, value in cel_library.NAMESPACES.items():
        context.add_variable(name, value)
    return context
