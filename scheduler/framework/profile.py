"""Profiles: which plugins run, with which weights and arguments, loaded from YAML with defaults.

A profile file looks like::

    name: gpusched
    tieBreak: first          # first (the first node by name) or random (seeded)
    seed: 0
    plugins:
      - name: fit
      - name: gpu
        args: {device: hint}
      - name: fgd
        weight: 3
      - name: balance
        weight: 1
    actions: [allocate, reclaim, preempt]   # what a job taken from the queue goes through, in this order
    consolidation:                          # the consolidate action's knobs (docs/consolidation.md)
      maxPodsPerPlan: 4
    backfill:                               # the backfill action's knobs (docs/backfill.md)
      holdAfterSeconds: 0

Anything left out takes the packaged default (``default-profile.yaml``). Errors name the file and field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Any

import yaml

from scheduler.api.basics.errors import InvalidObject

TIE_BREAKS = ("first", "random")
#: The actions of a profile that names none. ``consolidate`` (move running pods to make room) is not among them: it
#: evicts running pods that did nothing wrong, so a cluster asks for it (docs/consolidation.md).
DEFAULT_ACTIONS = ("allocate", "reclaim", "preempt")


@dataclass(frozen=True, slots=True)
class ConsolidationConfig:
    """The consolidate action's budgets (``consolidation:`` in a profile; docs/consolidation.md)."""

    #: The most pods one plan moves (the budget per cycle).
    max_pods_per_plan: int = 4
    #: The most pods one plan moves off one node.
    max_pods_per_node: int = 2
    #: The most pods a plan moves to empty most of one node for a member asking more than half of its GPUs (in
    #: place of the two budgets above; 0: no such plan).
    max_pods_per_whole_node: int = 4
    #: A pod placed by a move is not moved again for this long (seconds).
    cooldown_s: float = 600.0
    #: The most nodes a search frees room on (the nodes needing the fewest moves first).
    candidate_nodes: int = 16
    #: Background defragmentation (``scheduler.core.consolidation.defrag``): how often it may empty a node when nothing
    # waits
    #: (seconds; 0: never, the default), and the most pods it moves in any hour.
    defragment_every_s: float = 0.0
    defragment_pods_per_hour: int = 10
    #: What a plan may spend against what it places (:data:`PLAN_COSTS`; ``scheduler.core.consolidation.plan``).
    plan_cost: str = "FewerGPUsAndPods"
    #: A plan's step not done within this long (seconds) abandons the plan: all its evictions and its end for a plan
    #: within the PodDisruptionBudgets at once; for a plan carried out one eviction at a time, each eviction's
    #: replacement Running and the budgets allowing the next, then the plan's end
    # (``scheduler.core.consolidation.moves``).
    step_timeout_s: float = 120.0


@dataclass(frozen=True, slots=True)
class BackfillConfig:
    """The backfill action's knobs (``backfill:`` in a profile; docs/backfill.md)."""

    #: How long the head of a queue's line waits without room before nodes are held for it (seconds; a Queue's
    #: ``spec.backfill.holdAfterSeconds`` sets its own).
    hold_after_s: float = 0.0
    #: How many jobs of one queue hold room at once (1: the head of its line only, EASY backfill).
    held_jobs_per_queue: int = 1


#: ``planCost``: what a plan may spend. The GPU-milli its moved pods hold fewer than the job asks, and its moved
#: pods fewer than the whole GPUs the job asks (``FewerGPUsAndPods``: a job of one GPU or less moves nothing), or
#: than two for a job of one GPU or less (``FewerGPUsAndPodsOrOne``: it may move one pod smaller than itself); the
#: GPU-milli part alone (``FewerGPUs``); or no such rule (``Any``: only the budgets bound a plan).
PLAN_COSTS = ("FewerGPUsAndPods", "FewerGPUsAndPodsOrOne", "FewerGPUs", "Any")

_CONSOLIDATION_KEYS = {
    "maxPodsPerPlan": ("max_pods_per_plan", 1),
    "maxPodsPerNode": ("max_pods_per_node", 1),
    "maxPodsPerWholeNode": ("max_pods_per_whole_node", 0),
    "cooldownSeconds": ("cooldown_s", 0),
    "candidateNodes": ("candidate_nodes", 1),
    "defragmentEverySeconds": ("defragment_every_s", 0),
    "defragmentPodsPerHour": ("defragment_pods_per_hour", 0),
    "stepTimeoutSeconds": ("step_timeout_s", 1),
}


@dataclass(frozen=True, slots=True)
class PluginConfig:
    name: str
    weight: float = 1.0
    args: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProfileConfig:
    """A validated profile: plugin names are checked against the registry when the profile is built."""

    name: str = "gpusched"
    tie_break: str = "first"
    seed: int = 0
    plugins: tuple[PluginConfig, ...] = ()
    #: The session's actions, in order: names the core knows (``scheduler.core.actions.registry``, an open registry
    #: like the plugins': it checks the names and their order when the profile is built).
    actions: tuple[str, ...] = DEFAULT_ACTIONS
    consolidation: ConsolidationConfig = ConsolidationConfig()
    backfill: BackfillConfig = BackfillConfig()


def default_text() -> str:
    return (importlib_resources.files("scheduler.framework") / "default-profile.yaml").read_text()


def parse(raw: object, *, source: str = "profile") -> ProfileConfig:
    """Validate a profile dict (from YAML); unknown keys and bad values are errors naming the field."""
    if not isinstance(raw, Mapping):
        raise InvalidObject("a profile must be a map", obj=source)
    known = {"name", "tieBreak", "seed", "plugins", "actions", "consolidation", "backfill"}
    for key in raw:
        if key not in known:
            raise InvalidObject(f"unknown key (expected one of {sorted(known)})", obj=source, field=str(key))
    name = raw.get("name", "gpusched")
    if not isinstance(name, str) or not name:
        raise InvalidObject("must be a non-empty string", obj=source, field="name")
    tie_break = raw.get("tieBreak", "first")
    if tie_break not in TIE_BREAKS:
        raise InvalidObject(f"{tie_break!r} is not one of {TIE_BREAKS}", obj=source, field="tieBreak")
    seed = raw.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise InvalidObject(f"{seed!r} is not a non-negative integer", obj=source, field="seed")
    plugins_raw = raw.get("plugins")
    if not isinstance(plugins_raw, list) or not plugins_raw:
        raise InvalidObject("must be a non-empty list of plugins", obj=source, field="plugins")
    plugins = []
    seen = set()
    for i, item in enumerate(plugins_raw):
        where = f"plugins[{i}]"
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, Mapping):
            raise InvalidObject("must be a plugin name or a map with name, weight, args", obj=source, field=where)
        for key in item:
            if key not in ("name", "weight", "args"):
                raise InvalidObject("unknown key (expected name, weight, args)", obj=source, field=f"{where}.{key}")
        plugin_name = item.get("name")
        if not isinstance(plugin_name, str) or not plugin_name:
            raise InvalidObject("must be a plugin name", obj=source, field=f"{where}.name")
        if plugin_name in seen:
            raise InvalidObject(f"plugin {plugin_name!r} is listed twice", obj=source, field=f"{where}.name")
        seen.add(plugin_name)
        weight = item.get("weight", 1)
        # NaN would pass "< 0" and silently turn the plugin off; infinity makes every score inf or NaN.
        if not isinstance(weight, int | float) or isinstance(weight, bool) or not 0 <= weight < math.inf:
            raise InvalidObject(f"{weight!r} is not a finite non-negative number", obj=source, field=f"{where}.weight")
        args = item.get("args") or {}
        if not isinstance(args, Mapping):
            raise InvalidObject("must be a map", obj=source, field=f"{where}.args")
        plugins.append(PluginConfig(plugin_name, float(weight), dict(args)))
    actions = _actions(raw.get("actions", list(DEFAULT_ACTIONS)), source)
    return ProfileConfig(
        name=name,
        tie_break=tie_break,
        seed=seed,
        plugins=tuple(plugins),
        actions=actions,
        consolidation=consolidation(raw.get("consolidation") or {}, source),
        backfill=backfill(raw.get("backfill") or {}, source),
    )


def consolidation(raw: object, source: str) -> ConsolidationConfig:
    """``consolidation:`` (``source``: where it came from, for errors): whole numbers, each at least its low bound,
    and ``planCost`` one of :data:`PLAN_COSTS`; unknown keys are errors."""
    keys = [*_CONSOLIDATION_KEYS, "planCost"]
    if not isinstance(raw, Mapping):
        raise InvalidObject(f"must be a map with {', '.join(keys)}", obj=source, field="consolidation")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "planCost":
            if value not in PLAN_COSTS:
                raise InvalidObject(
                    f"{value!r} is not one of {', '.join(PLAN_COSTS)}", obj=source, field="consolidation.planCost"
                )
            values["plan_cost"] = value
            continue
        if key not in _CONSOLIDATION_KEYS:
            raise InvalidObject(
                f"unknown key (expected one of {sorted(keys)})", obj=source, field=f"consolidation.{key}"
            )
        attribute, low = _CONSOLIDATION_KEYS[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise InvalidObject(f"{value!r} is not a whole number >= {low}", obj=source, field=f"consolidation.{key}")
        values[attribute] = value
    return ConsolidationConfig(**values)


def backfill(raw: object, source: str) -> BackfillConfig:
    """``backfill:`` (``source``: where it came from, for errors): ``holdAfterSeconds`` a number of seconds >= 0,
    ``heldJobsPerQueue`` a whole number >= 1; unknown keys are errors."""
    if not isinstance(raw, Mapping):
        raise InvalidObject("must be a map with holdAfterSeconds, heldJobsPerQueue", obj=source, field="backfill")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        where = f"backfill.{key}"
        if key == "holdAfterSeconds":
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
                raise InvalidObject(f"{value!r} is not a number of seconds >= 0", obj=source, field=where)
            values["hold_after_s"] = float(value)
        elif key == "heldJobsPerQueue":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidObject(f"{value!r} is not a whole number >= 1", obj=source, field=where)
            values["held_jobs_per_queue"] = value
        else:
            raise InvalidObject("unknown key (expected holdAfterSeconds, heldJobsPerQueue)", obj=source, field=where)
    return BackfillConfig(**values)


def _actions(raw: object, source: str) -> tuple[str, ...]:
    """The session's actions: a list of names, each once (which names, and in which order, the core's registry of
    actions checks when the profile is built, as the plugins' registry checks theirs)."""
    if not isinstance(raw, list) or not raw:
        raise InvalidObject("must be a non-empty list of actions", obj=source, field="actions")
    for i, name in enumerate(raw):
        if not isinstance(name, str) or not name:
            raise InvalidObject(f"{name!r} is not an action's name", obj=source, field=f"actions[{i}]")
        if name in raw[:i]:
            raise InvalidObject(f"action {name!r} is listed twice", obj=source, field=f"actions[{i}]")
    return tuple(raw)


def load(path: str | Path | None = None) -> ProfileConfig:
    """Load a profile file over the packaged default (keys missing from the file keep the default's value)."""
    default = yaml.safe_load(default_text())
    if path is None:
        return parse(default, source="default profile")
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InvalidObject(f"cannot read: {exc.strerror}", obj=f"profile {path}") from None
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise InvalidObject(f"not valid YAML: {exc}", obj=f"profile {path}") from None
    if not isinstance(raw, Mapping):
        raise InvalidObject("a profile must be a map", obj=f"profile {path}")
    merged = {**default, **raw}
    return parse(merged, source=f"profile {path}")
