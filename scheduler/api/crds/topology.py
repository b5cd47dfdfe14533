"""Topology: how the cluster's nodes nest (``scheduling.gpusched.io/v1alpha1``, cluster-scoped, one object).

A :class:`TopologySpec` names, from the widest domain to the narrowest, the node labels whose values are a node's
domain at each level: for example a block, a rack, an NVLink clique, a host. The cluster has at most one Topology,
named ``default``; without it the scheduler uses :data:`DEFAULT_TOPOLOGY` (the levels in :data:`DEFAULT_LEVELS`).
:func:`parse_topology` validates one object and raises :class:`InvalidObject` naming the field.

:func:`domains` turns the levels and the nodes' labels into a :class:`DomainIndex`: for each node and level the
node's domain id, as a numpy array a kernel can use. Invariants of a :class:`DomainIndex`:

- A node without a level's label, or with an empty or malformed value, is outside every domain of that level
  (id -1) and listed by :meth:`DomainIndex.unlabelled`; a malformed value is also reported as a problem.
- Domains nest: a domain's nodes all sit in one domain of the level above (or all outside it). A domain is the
  path of label values from the widest level down, so a label value whose nodes sit in two wider domains (a rack
  ``r1`` in blocks ``b1`` and ``b2``) becomes two domains, and the split is reported as a problem. Nothing raises.
- Domain ids of a level run from 0, ordered by (the id of the wider domain, the label value): the domains inside
  one wider domain have consecutive ids.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from scheduler.api.basics.errors import InvalidObject

GROUP = "scheduling.gpusched.io"
VERSION = "v1alpha1"
PLURAL = "topologies"
#: The name of the one Topology the scheduler reads (the CRD rejects other names).
NAME = "default"
MAX_LEVELS = 8

LABEL_BLOCK = "network.topology.gpusched.io/block"
LABEL_RACK = "network.topology.gpusched.io/rack"
#: Written by NVIDIA's GPU feature discovery on multi-node NVLink systems (GB200 NVL72): ``<cluster uuid>.<clique id>``.
LABEL_CLIQUE = "nvidia.com/gpu.clique"
LABEL_HOSTNAME = "kubernetes.io/hostname"
#: The levels used when the cluster has no Topology: widest first.
DEFAULT_LEVELS = (LABEL_BLOCK, LABEL_RACK, LABEL_CLIQUE, LABEL_HOSTNAME)

I64 = npt.NDArray[np.int64]

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


@dataclass(frozen=True, slots=True)
class TopologySpec:
    name: str
    #: Node labels, widest level first.
    levels: tuple[str, ...]
    #: A short name for each level (for example ``rack``), or empty: the level is then known by its label only.
    level_names: tuple[str, ...] = ()

    def find_level(self, ref: str) -> int | None:
        """The index of the level named ``ref`` or labelled ``ref`` (as PodGroup.spec.topology refers to it)."""
        for i, label in enumerate(self.levels):
            if ref == label or (i < len(self.level_names) and ref == self.level_names[i]):
                return i
        return None

    def level_label(self, level: int) -> str:
        """How messages name a level: its short name if it has one, else its node label."""
        if level < len(self.level_names) and self.level_names[level]:
            return self.level_names[level]
        return self.levels[level]


#: What the scheduler uses when the cluster has no Topology.
DEFAULT_TOPOLOGY = TopologySpec(name=NAME, levels=DEFAULT_LEVELS, level_names=("block", "rack", "clique", "host"))


@dataclass(frozen=True, slots=True)
class TopologyConstraint:
    """Where a job's pods must (``required``) or should (``preferred``) share a domain: each a level of the
    Topology, by its ``name`` (``rack``) or its ``nodeLabel``; empty for none. The level is resolved against the
    cluster's Topology when the job is scheduled (:func:`resolve`), since the Topology can change meanwhile."""

    required: str = ""
    preferred: str = ""
    #: Where the two values came from, for error messages (a PodGroup's spec or a pod's annotations).
    required_field: str = field(default="spec.topology.required", compare=False)
    preferred_field: str = field(default="spec.topology.preferred", compare=False)

    def __bool__(self) -> bool:
        return bool(self.required or self.preferred)


#: No constraint.
NO_CONSTRAINT = TopologyConstraint()


def parse_constraint(
    required: object, preferred: object, *, obj: str, required_field: str, preferred_field: str
) -> TopologyConstraint:
    """Check the two level references' syntax (a label key or a level name); whether such a level exists is
    checked against the Topology by :func:`resolve`."""
    values = []
    for value, where in ((required, required_field), (preferred, preferred_field)):
        if value is None:
            value = ""
        if not isinstance(value, str) or (value and not is_label_key(value)):
            raise InvalidObject(f"{value!r} is not a topology level name or node label", obj=obj, field=where)
        values.append(value)
    if values[0] and values[0] == values[1]:
        raise InvalidObject(f"required and preferred both name {values[0]!r}", obj=obj, field=preferred_field)
    return TopologyConstraint(values[0], values[1], required_field, preferred_field)


def resolve(spec: TopologySpec, constraint: TopologyConstraint, *, obj: str) -> tuple[int | None, int | None]:
    """The indices of the required and preferred levels in ``spec`` (None where the constraint names none).

    A name that is no level of the Topology raises :class:`InvalidObject` naming the job and the field.
    """
    found: list[int | None] = []
    for ref, where in (
        (constraint.required, constraint.required_field),
        (constraint.preferred, constraint.preferred_field),
    ):
        if not ref:
            found.append(None)
            continue
        level = spec.find_level(ref)
        if level is None:
            known = ", ".join(spec.level_label(i) for i in range(len(spec.levels)))
            raise InvalidObject(
                f"{ref!r} is not a level of topology {spec.name} (levels: {known})", obj=obj, field=where
            )
        found.append(level)
    return found[0], found[1]


def is_label_key(key: str) -> bool:
    """Whether ``key`` is a valid Kubernetes label key (``[prefix/]name``)."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and not (0 < len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and _LABEL_NAME.fullmatch(name) is not None


def is_label_value(value: str) -> bool:
    """Whether ``value`` is a valid Kubernetes label value (the empty string is one)."""
    return len(value) <= 63 and _LABEL_VALUE.fullmatch(value) is not None


def parse_topology(raw: Mapping[str, object]) -> TopologySpec:
    """Parse a Topology object (a dict as the API server returns it)."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        raise InvalidObject("metadata and spec must be maps", obj="topology")
    name = meta.get("name") or ""
    if not isinstance(name, str) or not name:
        raise InvalidObject("a Topology needs a name", obj="topology", field="metadata.name")
    obj = f"topology {name}"
    if name != NAME:
        raise InvalidObject(
            f"the cluster has one Topology, and it must be named {NAME}", obj=obj, field="metadata.name"
        )
    raw_levels = spec.get("levels")
    if not isinstance(raw_levels, Sequence) or isinstance(raw_levels, str) or not raw_levels:
        raise InvalidObject("must be a list of at least one level", obj=obj, field="spec.levels")
    if len(raw_levels) > MAX_LEVELS:
        raise InvalidObject(f"{len(raw_levels)} levels; at most {MAX_LEVELS}", obj=obj, field="spec.levels")
    labels: list[str] = []
    names: list[str] = []
    for i, level in enumerate(raw_levels):
        where = f"spec.levels[{i}]"
        if not isinstance(level, Mapping):
            raise InvalidObject("must be a map with nodeLabel and optionally name", obj=obj, field=where)
        label = level.get("nodeLabel")
        if label is None or label == "":
            raise InvalidObject("a level needs a nodeLabel", obj=obj, field=f"{where}.nodeLabel")
        if not isinstance(label, str) or not is_label_key(label):
            raise InvalidObject(f"{label!r} is not a label key", obj=obj, field=f"{where}.nodeLabel")
        if label in labels:
            raise InvalidObject(
                f"{label!r} already names level {labels.index(label)}", obj=obj, field=f"{where}.nodeLabel"
            )
        level_name = level.get("name") or ""
        if not isinstance(level_name, str) or (level_name and not _is_dns_label(level_name)):
            raise InvalidObject(f"{level_name!r} is not a DNS label", obj=obj, field=f"{where}.name")
        if level_name and level_name in names:
            raise InvalidObject(
                f"{level_name!r} already names level {names.index(level_name)}", obj=obj, field=f"{where}.name"
            )
        labels.append(label)
        names.append(level_name)
    for i, level_name in enumerate(names):
        if level_name in labels and labels.index(level_name) != i:
            raise InvalidObject(
                f"{level_name!r} is the nodeLabel of level {labels.index(level_name)}",
                obj=obj,
                field=f"spec.levels[{i}].name",
            )
    if LABEL_HOSTNAME in labels[:-1]:
        raise InvalidObject(
            f"{LABEL_HOSTNAME} must be the narrowest (last) level",
            obj=obj,
            field=f"spec.levels[{labels.index(LABEL_HOSTNAME)}].nodeLabel",
        )
    return TopologySpec(name=name, levels=tuple(labels), level_names=tuple(names))


def _is_dns_label(text: str) -> bool:
    return len(text) <= 63 and _DNS_LABEL.fullmatch(text) is not None


@dataclass(frozen=True, slots=True, eq=False)
class DomainIndex:
    """Each node's domain at each level. Build it with :func:`domains`; its arrays are read-only."""

    #: Node labels, widest level first.
    levels: tuple[str, ...]
    #: Node names, in the order of the rows of :attr:`ids`.
    nodes: tuple[str, ...]
    #: nodes x levels: the node's domain id at each level, -1 where the node is outside every domain of it.
    ids: I64
    #: For each level, the label value of each domain (two domains share a value when a nesting split them).
    values: tuple[tuple[str, ...], ...]
    #: For each level, the id of the wider domain each domain sits in (-1 at the widest level, or outside).
    parents: tuple[I64, ...]
    #: Malformed label values and nesting splits, one problem each. Nodes without a label are not problems
    #: (see :meth:`unlabelled`).
    problems: tuple[InvalidObject, ...]
    _unlabelled: tuple[tuple[str, ...], ...]

    def level_index(self, level: str | int) -> int:
        """The index of a level given by its label or its index."""
        if isinstance(level, int):
            if not 0 <= level < len(self.levels):
                raise IndexError(f"level {level} out of range 0..{len(self.levels) - 1}")
            return level
        try:
            return self.levels.index(level)
        except ValueError:
            raise KeyError(f"no level labelled {level!r}") from None

    def domain_count(self, level: str | int) -> int:
        return len(self.values[self.level_index(level)])

    def unlabelled(self, level: str | int) -> tuple[str, ...]:
        """The nodes outside every domain of the level: no label, or an empty or malformed value."""
        return self._unlabelled[self.level_index(level)]


def domains(levels: Sequence[str], nodes: Sequence[tuple[str, Mapping[str, str]]]) -> DomainIndex:
    """Each node's domain at each level, from ``(node name, node labels)`` pairs; see the module's note."""
    levels = tuple(levels)
    if len(set(levels)) != len(levels) or not all(levels):
        raise ValueError(f"levels must be distinct non-empty labels: {levels!r}")
    names = tuple(name for name, _ in nodes)
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidObject("the node is listed twice", obj=f"node {name}")
        seen.add(name)
    ids = np.full((len(nodes), len(levels)), -1, dtype=np.int64)
    values: list[tuple[str, ...]] = []
    parents: list[I64] = []
    unlabelled: list[tuple[str, ...]] = []
    problems: list[InvalidObject] = []
    for i, label in enumerate(levels):
        keys: dict[tuple[int, str], list[int]] = {}
        outside: list[str] = []
        for row, (name, labels) in enumerate(nodes):
            value = labels.get(label, "")
            if not value:
                outside.append(name)
                continue
            if not is_label_value(value):
                outside.append(name)
                problems.append(
                    InvalidObject(
                        f"{value!r} is not a label value; the node is outside every domain of this level",
                        obj=f"node {name}",
                        field=f"metadata.labels[{label}]",
                    )
                )
                continue
            parent = int(ids[row, i - 1]) if i else -1
            keys.setdefault((parent, value), []).append(row)
        ordered = sorted(keys)
        for domain, key in enumerate(ordered):
            ids[keys[key], i] = domain
        values.append(tuple(value for _, value in ordered))
        parents.append(np.array([parent for parent, _ in ordered], dtype=np.int64))
        unlabelled.append(tuple(outside))
        if i:
            problems.extend(_splits(levels, i, ordered, keys, values[i - 1], names))
    ids.setflags(write=False)
    for array in parents:
        array.setflags(write=False)
    return DomainIndex(
        levels=levels,
        nodes=names,
        ids=ids,
        values=tuple(values),
        parents=tuple(parents),
        problems=tuple(problems),
        _unlabelled=tuple(unlabelled),
    )


def _splits(
    levels: tuple[str, ...],
    i: int,
    ordered: list[tuple[int, str]],
    keys: Mapping[tuple[int, str], list[int]],
    wider_values: tuple[str, ...],
    names: tuple[str, ...],
) -> list[InvalidObject]:
    """One problem for each label value of level ``i`` whose nodes sit in more than one wider domain."""
    by_value: dict[str, list[tuple[int, str]]] = {}
    for key in ordered:
        by_value.setdefault(key[1], []).append(key)
    problems = []
    wider = levels[i - 1]
    for value in sorted(by_value):
        parts = by_value[value]
        if len(parts) < 2:
            continue
        where = "; ".join(
            f"{_wider_name(wider, parent, wider_values)} ({_some([names[row] for row in keys[(parent, value)]])})"
            for parent, _ in parts
        )
        problems.append(
            InvalidObject(
                f"its nodes sit in {len(parts)} domains of the wider level {wider}: {where}; "
                f"it is treated as {len(parts)} domains, one in each",
                obj=f"domain {levels[i]}={value}",
            )
        )
    return problems


def _wider_name(wider: str, parent: int, wider_values: tuple[str, ...]) -> str:
    return f"{wider}={wider_values[parent]}" if parent >= 0 else f"no {wider}"


def _some(names: Sequence[str], shown: int = 3) -> str:
    text = ", ".join(names[:shown])
    return f"{text} and {len(names) - shown} more" if len(names) > shown else text


# --- capacity of domains --------------------------------------------------------------------------------------


def holds(free: Sequence[int], needs: Sequence[int]) -> bool:
    """Whether pods needing ``needs`` whole GPUs each fit on nodes with ``free`` whole GPUs free, placed largest
    first, each on the node it fits most tightly (best fit decreasing). A cheap test of a domain before a what-if,
    for GPUs only (CPU and memory are left to the what-if): a yes is always right; a no is exact when the sizes
    divide one another (1, 2, 4, 8 GPUs), and otherwise may miss a packing, as any fast bin-packing test can."""
    left = sorted(int(f) for f in free if f > 0)
    for need in sorted((int(n) for n in needs if n > 0), reverse=True):
        at = bisect.bisect_left(left, need)
        if at == len(left):
            return False
        rest = left.pop(at) - need
        if rest:
            bisect.insort(left, rest)
    return True


def domain_free(column: I64, free: I64) -> I64:
    """The free whole GPUs of each domain of a level: ``column`` gives each node's domain (-1 outside), ``free``
    each node's free whole GPUs (0 on nodes that cannot be used)."""
    inside = column >= 0
    size = int(column.max()) + 1 if inside.any() else 0
    return np.bincount(column[inside], weights=free[inside], minlength=size).astype(np.int64)
