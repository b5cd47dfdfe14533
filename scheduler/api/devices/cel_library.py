"""The functions Kubernetes adds to CEL for DRA selectors, as the v1.36 API server declares them.

The CEL implementation (``common-expression-language``) evaluates the language and its standard functions
(``size``, ``contains``, ``startsWith``, ``matches``, the macros ``has``, ``all``, ``exists``, ``map``,
``filter``); Kubernetes' DRA environment (``k8s.io/dynamic-resource-allocation/cel`` on the apiserver's base
environment) adds libraries that it does not have, which live here as plain Python functions registered by name:

- cel-go's strings extension, version 2: ``charAt``, ``indexOf``, ``lastIndexOf``, ``lowerAscii``,
  ``upperAscii``, ``replace``, ``split``, ``substring``, ``trim``, ``join``, ``strings.quote``, ``format``;
- Kubernetes' lists library: ``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``, ``lastIndexOf``;
  cel-go's lists extension, version 3: ``lists.range``, ``slice``, ``flatten``, ``distinct``, ``reverse``,
  ``sort``;
- Kubernetes' regex library: ``find``, ``findAll``;
- cel-go's sets extension: ``sets.contains``, ``sets.equivalent``, ``sets.intersects``;
- Kubernetes' quantity library (``quantity``, ``isQuantity``, ``compareTo``, ``isGreaterThan``, ``isLessThan``,
  ``add``, ``sub``, ``sign``, ``asInteger``, ``isInteger``, ``asApproximateFloat``) and semver library
  (``semver``, ``isSemver``, ``major``, ``minor``, ``patch`` and the comparisons).

Inside CEL a quantity is a string that carries its exact value in milli-units (:func:`quantity_value`) and a
semantic version a string ``"semver:1.2.3"``, so that ``==`` keeps working between two of them as Kubernetes
defines it; the functions read them back (``<`` is not defined on either in Kubernetes: the API server refuses
it). Namespaced functions (``sets.contains``) are functions called on a variable named after the namespace
(:data:`NAMESPACES`).

Every function is checked against Kubernetes' own evaluator in ``tests/api/test_cel_reference.py``. What is
still missing (two-variable comprehensions, ``cel.bind``, ``optional`` results of ``first``/``last``, the URL,
IP, CIDR and format libraries) is listed in docs/devices.md.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from scheduler.api.basics import quantity as api_quantity
from scheduler.api.basics.errors import InvalidObject

SEMVER = "semver:"
QUANTITY = "\x00quantity:"
#: Variables standing for namespaces, so that ``sets.contains(a, b)`` reaches the function ``contains`` with the
#: namespace as its first argument.
NAMESPACES = {"sets": "\x00sets", "lists": "\x00lists", "strings": "\x00strings"}
_SETS, _LISTS, _STRINGS = NAMESPACES["sets"], NAMESPACES["lists"], NAMESPACES["strings"]

#: What Go's unicode.IsSpace counts as white space (strings.trim), which Python's str.strip does not match exactly.
_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029"
    "\u202f\u205f\u3000"
)


# --- quantities and versions ------------------------------------------------------------------------------------


def quantity_value(milli: int) -> str:
    """A quantity of ``milli`` milli-units as a CEL value."""
    return f"{QUANTITY}{milli}"


def _milli(value: Any) -> int:
    if not (isinstance(value, str) and value.startswith(QUANTITY)):
        raise ValueError(f"no such overload: {value!r} is not a quantity")
    return int(value[len(QUANTITY) :])


def quantity(text: str) -> str:
    # A scheduler's requests and capacities are never negative, but CEL's quantity() may be (quantity('-3')).
    negative = text.strip().startswith("-")
    try:
        milli = api_quantity.to_milli(api_quantity.parse_quantity(text.strip().removeprefix("-"), field="quantity()"))
        return quantity_value(-milli if negative else milli)
    except InvalidObject as exc:
        raise ValueError(f"quantity({text!r}): {exc.reason}") from exc


def _is_quantity(text: str) -> bool:
    try:
        quantity(text)
    except ValueError:
        return False
    return True


def semver_key(text: str) -> tuple[int, int, int, tuple[tuple[int, int | str], ...]]:
    core, _, pre = text.partition("+")[0].partition("-")
    parts = core.split(".")
    if len(parts) != 3 or not all(p.isdigit() and (p == "0" or not p.startswith("0")) for p in parts):
        raise ValueError(f"{text!r} is not a semantic version (MAJOR.MINOR.PATCH)")
    # A pre-release sorts before its release: (1, ()) for the release, (0, identifiers) before it.
    ids: tuple[tuple[int, int | str], ...] = (
        tuple((0, int(p)) if p.isdigit() else (1, p) for p in pre.split(".")) if pre else ((2, 0),)
    )
    return int(parts[0]), int(parts[1]), int(parts[2]), ids


def _normalize(text: str) -> str:
    """What ``semver(text, true)`` reads: a leading ``v`` dropped, missing minor and patch as 0, and leading zeros
    of the three numbers dropped."""
    text = text.removeprefix("v")
    core, sep, rest = _split_core(text)
    parts = core.split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return text
    parts = [str(int(p)) for p in parts] + ["0"] * (3 - len(parts))
    return ".".join(parts) + sep + rest


def _split_core(text: str) -> tuple[str, str, str]:
    for i, char in enumerate(text):
        if char in "-+":
            return text[:i], char, text[i + 1 :]
    return text, "", ""


def semver(text: str, normalize: bool = False) -> str:
    if normalize:
        text = _normalize(text)
    semver_key(text)  # raises on a bad version
    return f"{SEMVER}{text}"


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        semver(text, normalize)
    except ValueError:
        return False
    return True


def _ordered(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(SEMVER):
        return semver_key(value[len(SEMVER) :])
    if isinstance(value, str) and value.startswith(QUANTITY):
        return _milli(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{value!r} is neither a quantity nor a semantic version")
    return value


def _compare(a: Any, b: Any) -> int:
    if _kind(a) != _kind(b) or _kind(a) == "number":
        raise ValueError("no such overload: compareTo takes two quantities or two semantic versions")
    x, y = _ordered(a), _ordered(b)
    return int((x > y) - (x < y))


def _kind(value: Any) -> str:
    if isinstance(value, str) and value.startswith(SEMVER):
        return "semver"
    if isinstance(value, str) and value.startswith(QUANTITY):
        return "quantity"
    return "number"


def _add(a: Any, b: Any, sign: int = 1) -> str:
    # quantity.add(int) adds whole units (the quantity_add_int overload), quantity.add(quantity) the quantity.
    other = b * 1000 if isinstance(b, int) and not isinstance(b, bool) else _milli(b)
    return quantity_value(_milli(a) + sign * other)


def _version_part(index: int) -> Callable[[Any], int]:
    def part(value: Any) -> int:
        if not (isinstance(value, str) and value.startswith(SEMVER)):
            raise ValueError(f"{value!r} is not a semantic version")
        major, minor, patch, _pre = semver_key(value[len(SEMVER) :])
        return (major, minor, patch)[index]

    return part


def _as_integer(value: Any) -> int:
    milli = _milli(value)
    if milli % 1000:
        raise ValueError(f"quantity {milli / 1000} is not an integer")
    return milli // 1000


# --- strings (cel-go ext.Strings, version 2) --------------------------------------------------------------------


def _char_at(text: str, index: int) -> str:
    if not 0 <= index <= len(text):
        raise ValueError(f"index out of range: {index}")
    return text[index : index + 1]


def _index_of(target: Any, item: Any, offset: int | None = None) -> int:
    if isinstance(target, list):
        if offset is not None:
            raise ValueError("indexOf on a list takes one argument")
        return next((i for i, value in enumerate(target) if _equal(value, item)), -1)
    start = 0 if offset is None else offset
    if not 0 <= start <= len(target):
        raise ValueError(f"index out of range: {start}")
    return int(target.find(item, start))


def _last_index_of(target: Any, item: Any, offset: int | None = None) -> int:
    if isinstance(target, list):
        if offset is not None:
            raise ValueError("lastIndexOf on a list takes one argument")
        return next((i for i in range(len(target) - 1, -1, -1) if _equal(target[i], item)), -1)
    end = len(target) if offset is None else offset
    if not 0 <= end <= len(target):
        raise ValueError(f"index out of range: {end}")
    return int(target.rfind(item, 0, end + len(item)))


def _ascii(text: str, upper: bool) -> str:
    table = _UPPER if upper else _LOWER
    return text.translate(table)


_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _replace(text: str, old: str, new: str, count: int = -1) -> str:
    return text.replace(old, new, count if count >= 0 else -1)


def _split(text: str, separator: str, count: int = -1) -> list[str]:
    if count == 0:
        return []
    if separator == "":
        chars = list(text)
        if 0 < count < len(chars):
            return [*chars[: count - 1], "".join(chars[count - 1 :])]
        return chars
    return text.split(separator, count - 1 if count > 0 else -1)


def _substring(text: str, start: int, end: int | None = None) -> str:
    stop = len(text) if end is None else end
    if not 0 <= start <= len(text) or not 0 <= stop <= len(text):
        raise ValueError(f"index out of range: {start if not 0 <= start <= len(text) else stop}")
    if start > stop:
        raise ValueError(f"invalid substring range. start: {start}, end: {stop}")
    return text[start:stop]


def _join(items: Sequence[Any], separator: str = "") -> str:
    if not all(isinstance(item, str) for item in items):
        raise ValueError("join needs a list of strings")
    return separator.join(items)


def _quote(namespace: str, text: str) -> str:
    if namespace != _STRINGS:
        raise ValueError("quote is strings.quote")
    escapes = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
    escapes.update({"\\": "\\\\", '"': '\\"'})
    return '"' + "".join(escapes.get(char, char) for char in text) + '"'


_VERB = re.compile(r"%(\.[0-9]+)?([sdfeEbxXo%])")


def _format(template: str, args: Sequence[Any]) -> str:
    """``"%s has %d GPUs".format([name, count])``: the verbs of cel-go's strings.format."""
    out: list[str] = []
    position = 0
    used = 0
    for match in _VERB.finditer(template):
        out.append(template[position : match.start()])
        position = match.end()
        precision, verb = match.group(1), match.group(2)
        if verb == "%":
            out.append("%")
            continue
        if used >= len(args):
            raise ValueError(f"index {used} out of range")
        value = args[used]
        used += 1
        out.append(_format_one(value, verb, int(precision[1:]) if precision else None))
    out.append(template[position:])
    return "".join(out)


def _format_one(value: Any, verb: str, precision: int | None) -> str:
    if verb == "s":
        return _to_string(value)
    if verb == "d":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"decimal clause can only be used on integers, was given {type(value).__name__}")
        return str(value)
    if verb in "fe" or verb == "E":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"fixed-point clause can only be used on doubles, was given {type(value).__name__}")
        digits = 6 if precision is None else precision
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return f"{value:.{digits}{verb}}"
    if verb == "b":
        return format(int(value), "b")
    if verb in "xX":
        text = value.encode().hex() if isinstance(value, str) else format(int(value), "x")
        return text.upper() if verb == "X" else text
    return format(int(value), "o")


def _to_string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "[" + ", ".join(_to_string(v) for v in value) + "]"
    if value is None:
        return "null"
    return str(value)


# --- lists (Kubernetes' library.Lists and cel-go's ext.Lists, version 3) ----------------------------------------


def _equal(a: Any, b: Any) -> bool:
    return (type(a) is type(b) and bool(a == b)) or (_numeric(a) and _numeric(b) and a == b)


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _comparable(items: Sequence[Any]) -> list[Any]:
    # Plain strings compare as they are; numbers, quantities and versions by their order (_ordered checks them).
    keys = [item if isinstance(item, str) and _kind(item) == "number" else _ordered(item) for item in items]
    kinds = {type(key) if not _numeric(key) else float for key in keys}
    if len(kinds) > 1:
        raise ValueError("no such overload: the list mixes types")
    return keys


def _is_sorted(items: Sequence[Any]) -> bool:
    keys = _comparable(items)
    return all(a <= b for a, b in itertools.pairwise(keys))


def _sum(items: Sequence[Any]) -> Any:
    if any(isinstance(item, bool) or not isinstance(item, int | float) for item in items):
        raise ValueError("sum needs a list of numbers")
    return sum(items) if items else 0


def _extreme(args: tuple[Any, ...], name: str) -> Any:
    items = args[0] if len(args) == 1 and isinstance(args[0], list) else list(args)
    if not items:
        raise ValueError(f"{name} called on empty list")
    keys = _comparable(items)
    pick = min if name == "min" else max
    return items[pick(range(len(items)), key=keys.__getitem__)]


def _range(namespace: str, count: int) -> list[int]:
    if namespace != _LISTS:
        raise ValueError("range is lists.range")
    return list(range(count))


def _slice(items: Sequence[Any], start: int, end: int) -> list[Any]:
    if start < 0 or end < 0:
        raise ValueError(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise ValueError(f"cannot slice({start}, {end}), start index must be less than or equal to end index")
    if end > len(items):
        raise ValueError(f"cannot slice({start}, {end}), list is length {len(items)}")
    return list(items[start:end])


def _flatten(items: Sequence[Any], depth: int = 1) -> list[Any]:
    if depth < 0:
        raise ValueError("level must be non-negative")
    out: list[Any] = []
    for item in items:
        if isinstance(item, list) and depth > 0:
            out.extend(_flatten(item, depth - 1))
        else:
            out.append(item)
    return out


def _distinct(items: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if not any(_equal(item, seen) for seen in out):
            out.append(item)
    return out


def _sort(items: Sequence[Any]) -> list[Any]:
    keys = _comparable(items)
    return [item for _key, _i, item in sorted(zip(keys, range(len(items)), items, strict=True))]


# --- regex (Kubernetes' library.Regex) and sets (cel-go's ext.Sets) ---------------------------------------------


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regex {pattern!r}: {exc}") from exc


def _find(text: str, pattern: str) -> str:
    match = _regex(pattern).search(text)
    return match.group(0) if match else ""


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    found = [match.group(0) for match in _regex(pattern).finditer(text)]
    return found if limit < 0 else found[:limit]


def _contains(target: Any, *args: Any) -> bool:
    if target == _SETS:
        whole, part = args
        return all(any(_equal(item, have) for have in whole) for item in part)
    # ``contains`` on strings is CEL's own; it lands here only through the namespace.
    raise ValueError("contains: no such overload")


def _equivalent(namespace: str, a: Sequence[Any], b: Sequence[Any]) -> bool:
    if namespace != _SETS:
        raise ValueError("equivalent is sets.equivalent")
    return _contains(_SETS, a, b) and _contains(_SETS, b, a)


def _intersects(namespace: str, a: Sequence[Any], b: Sequence[Any]) -> bool:
    if namespace != _SETS:
        raise ValueError("intersects is sets.intersects")
    return any(any(_equal(x, y) for y in b) for x in a)


def _reverse(items: Sequence[Any]) -> list[Any]:
    if not isinstance(items, list):
        raise ValueError("reverse: no such overload (strings.reverse is not in the API server's strings version)")
    return list(reversed(items))


def _trim(text: str) -> str:
    return text.strip(_SPACE)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    # quantities and versions
    "quantity": quantity,
    "isQuantity": _is_quantity,
    "semver": semver,
    "isSemver": _is_semver,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: _compare(a, b) > 0,
    "isLessThan": lambda a, b: _compare(a, b) < 0,
    "sign": lambda a: (_milli(a) > 0) - (_milli(a) < 0),
    "asInteger": _as_integer,
    "isInteger": lambda a: _milli(a) % 1000 == 0,
    "asApproximateFloat": lambda a: _milli(a) / 1000.0,
    "add": _add,
    "sub": lambda a, b: _add(a, b, -1),
    "major": _version_part(0),
    "minor": _version_part(1),
    "patch": _version_part(2),
    # strings
    "charAt": _char_at,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "lowerAscii": lambda text: _ascii(text, upper=False),
    "upperAscii": lambda text: _ascii(text, upper=True),
    "replace": _replace,
    "split": _split,
    "substring": _substring,
    "trim": _trim,
    "join": _join,
    "quote": _quote,
    "format": _format,
    # lists
    "isSorted": _is_sorted,
    "sum": _sum,
    "min": lambda *args: _extreme(args, "min"),
    "max": lambda *args: _extreme(args, "max"),
    "range": _range,
    "slice": _slice,
    "flatten": _flatten,
    "distinct": _distinct,
    "reverse": _reverse,
    "sort": _sort,
    # regex and sets
    "find": _find,
    "findAll": _find_all,
    "contains": _contains,
    "equivalent": _equivalent,
    "intersects": _intersects,
}
