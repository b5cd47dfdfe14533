"""Reading the fields of raw Kubernetes dicts: a map, a list, a string, or an :class:`InvalidObject` naming the
object and the field. Shared by the parsers of objects the scheduler watches by kind (volumes, DRA)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from scheduler.api.errors import InvalidObject


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
