"""Reading the fields of raw Kubernetes dicts: a map, a list, a string, or an :class:`InvalidObject` naming the
object and the field. Shared by the parsers of objects the scheduler watches by kind (volumes, DRA)."""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple, TypeGuard

from scheduler.api.basics.errors import InvalidObject


class ObjectParts(NamedTuple):
    """An object's top-level maps, its namespace ("" when cluster-scoped), name, and the words naming it in errors
    (``pod ns/name``, ``node name``)."""

    meta: Mapping[str, Any]
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    namespace: str
    name: str
    obj: str


def is_map(raw: object) -> TypeGuard[Mapping[str, Any]]:
    """Whether ``raw`` is a map: a decoded object's are dicts, told apart without the ABC's slower check."""
    return type(raw) is dict or isinstance(raw, Mapping)


def object_parts(
    raw: Mapping[str, object], *, word: str, kind: str, namespaced: bool, with_status: bool = True
) -> ObjectParts:
    """The metadata, spec and (``with_status``) status of an object, each a map (None: an empty one), and its
    name, which it must have (the namespace defaults to ``default``). ``word`` names the object in errors
    (``pod``), ``kind`` in the error of a missing name ("a PodGroup needs a name")."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = (raw.get("status") or {}) if with_status else {}
    if not (is_map(meta) and is_map(spec) and is_map(status)):
        maps = "metadata, spec and status" if with_status else "metadata and spec"
        raise InvalidObject(f"{maps} must be maps", obj=word)
    namespace = str(meta.get("namespace") or "default") if namespaced else ""
    name = str(meta.get("name") or "")
    obj = f"{word} {namespace}/{name}" if namespaced else f"{word} {name}"
    if not name:
        raise InvalidObject(f"a {kind} needs a name", obj=obj, field="metadata.name")
    return ObjectParts(meta, spec, status, namespace, name, obj)


def mapping(raw: object, *, obj: str, field: str) -> Mapping[str, object]:
    """``raw`` as a map (None: an empty one)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InvalidObject("expected a map", obj=obj, field=field)
    return raw


def sequence(raw: object, *, obj: str, field: str) -> list[object]:
    """``raw`` as a list (None: an empty one)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidObject("expected a list", obj=obj, field=field)
    return raw


def maps(
    raw: object, *, obj: str, field: str, not_list: str = "expected a list", not_map: str = "expected a map"
) -> Iterator[tuple[str, Mapping[str, object]]]:
    """The maps of the list ``raw`` (None: none), each with its field (``field[i]``). ``raw`` not a list raises
    :class:`InvalidObject` with the reason ``not_list``, an entry not a map with ``not_map``."""
    if raw is None:
        return
    if not isinstance(raw, list):
        raise InvalidObject(not_list, obj=obj, field=field)
    for i, item in enumerate(raw):
        where = f"{field}[{i}]"
        if not isinstance(item, Mapping):
            raise InvalidObject(not_map, obj=obj, field=where)
        yield where, item


def string(raw: object, *, obj: str, field: str, required: bool = False) -> str:
    """``raw`` as a string (None: ""; with ``required``, an empty one is an error)."""
    if raw is None or raw == "":
        if required:
            raise InvalidObject("required", obj=obj, field=field)
        return ""
    if not isinstance(raw, str):
        raise InvalidObject(f"{raw!r} is not a string", obj=obj, field=field)
    return raw


def unix_time(value: object) -> float:
    """An RFC 3339 time the API server wrote (``creationTimestamp``, ``status.startTime``) as Unix seconds; 0 when
    absent or unreadable."""
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
