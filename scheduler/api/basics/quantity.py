"""Kubernetes resource quantities, parsed exactly.

A quantity is a decimal number with an optional binary suffix (Ki, Mi, Gi, Ti, Pi, Ei), decimal suffix
(n, u, m, k, M, G, T, P, E) or exponent (``1e3``, ``2E-3``), as in k8s.io/apimachinery's resource.Quantity.
Values are kept as :class:`fractions.Fraction` so that "0.1" + "0.2" is exactly "0.3"; conversions to the
integer units the scheduler counts in (milli-CPU, bytes) round up, as Kubernetes' ``MilliValue`` and ``Value``
do, so a request is never under-counted.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

from scheduler.api.basics.errors import InvalidObject

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-])?(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<exp>[eE][+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)


def parse_quantity(value: object, *, field: str = "", obj: str = "") -> Fraction:
    """Parse a quantity such as ``"500m"``, ``"1.5"``, ``"16Gi"``, ``"1e3"`` or a bare number.

    Raises :class:`InvalidObject` naming ``field`` for anything else, including negative values: no request,
    capacity or quota in a scheduler may be negative.
    """
    if isinstance(value, bool):
        raise InvalidObject(f"quantity must be a string or number, not {value!r}", obj=obj, field=field)
    if isinstance(value, int):
        result: Fraction | str = Fraction(value) if value >= 0 else f"quantity {value!r} is negative"
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidObject(f"quantity {value!r} is not finite", obj=obj, field=field)
        result = Fraction(str(value))
        if result < 0:
            result = f"quantity {value!r} is negative"
    elif isinstance(value, str):
        result = _parse_text(value.strip(), repr(value))
    else:
        raise InvalidObject(f"quantity must be a string or number, not {value!r}", obj=obj, field=field)
    if isinstance(result, str):
        raise InvalidObject(result, obj=obj, field=field)
    return result


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str, shown: str) -> Fraction | str:
    """A quantity's text -> its value, or the reason it is not one (``shown`` is how the message quotes it).

    Memoised: a cluster's pods repeat the same few strings ("1", "500m", "16Gi") by the ten thousand, and
    Fraction arithmetic is most of what parsing a pod costs. Fractions are immutable, so sharing them is safe.
    """
    match = _QUANTITY.match(text)
    if match is None:
        return f"{shown} is not a Kubernetes quantity"
    number = Fraction(match["num"] if not match["num"].endswith(".") else match["num"][:-1])
    if match["exp"]:
        exponent = int(match["exp"][1:])
        if abs(exponent) > 30:
            return f"quantity {shown} is out of range"
        number *= Fraction(10) ** exponent
    else:
        suffix = match["suffix"] or ""
        number *= _BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix]
    result = -number if match["sign"] == "-" else number
    if result < 0:
        return f"quantity {shown} is negative"
    return result


@functools.lru_cache(maxsize=4096)
def to_milli(quantity: Fraction) -> int:
    """The quantity in thousandths, rounded up (CPU is counted in milli-cores)."""
    return math.ceil(quantity * 1000)


@functools.lru_cache(maxsize=4096)
def to_units(quantity: Fraction) -> int:
    """The quantity in whole units, rounded up (memory in bytes, extended resources in units)."""
    return math.ceil(quantity)


#: Binary suffixes, largest first: a byte count divisible by one is shown with it (268435456 -> 256Mi).
_SHOWN_BINARY = tuple((suffix, int(size)) for suffix, size in sorted(_BINARY.items(), key=lambda item: -item[1]))
_SHOWN_DECIMAL = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3))


def _is_bytes(name: str) -> bool:
    return name in ("memory", "ephemeral-storage") or name.startswith("hugepages-") or "memory" in name


def text(name: str, amount: float) -> str:
    """One amount of resource ``name`` in the scheduler's units (CPU in milli-cores, memory and storage in bytes,
    GPUs and the rest in units) as a canonical Kubernetes quantity: CPU ``2`` or ``2500m``, memory ``256Gi`` (or
    ``1G``, or plain bytes when no suffix divides it), GPUs ``8`` or ``0.5``. The one formatter of quantities: the
    status publisher's and the messages' (``scheduler.k8s.status``, ``scheduler.core.capacity``)."""
    if name == "cpu":
        milli = round(amount)
        return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"
    if _is_bytes(name):
        count = round(amount)
        for suffixes in (_SHOWN_BINARY, _SHOWN_DECIMAL):
            for suffix, size in suffixes:
                if count and count % size == 0:
                    return f"{count // size}{suffix}"
        return str(count)
    if abs(amount - round(amount)) < 5e-4:
        return str(round(amount))
    return f"{amount:.3f}".rstrip("0")
