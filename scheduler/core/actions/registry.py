"""Action names as profiles spell them, in the only order they may run (least disruptive first), and how each is
built; ``scheduler.core.registry`` is the plugins' twin of this module."""

from __future__ import annotations

from collections.abc import Callable

from scheduler.api.basics.errors import InvalidObject
from scheduler.core.actions import Action, Setting, allocate, backfill, consolidate, preempt, reclaim
from scheduler.framework.profile import ProfileConfig

Factory = Callable[[Setting], Action]

#: In the order the session runs them: ``allocate`` places the job; the others make room for a job that did not fit.
ACTIONS: dict[str, Factory] = {
    "allocate": allocate.Allocate,
    "consolidate": consolidate.Consolidate,
    "reclaim": reclaim.Reclaim,
    "preempt": preempt.Preempt,
    "backfill": backfill.Backfill,
}

#: The action every profile names first: it places the job (the others only make room).
FIRST = "allocate"


def check(config: ProfileConfig) -> None:
    """The profile's actions are known, ``allocate`` first, the others least disruptive first (each once: the
    profile checked that); errors name the field, as an unknown plugin's do."""
    names, obj = config.actions, f"profile {config.name}"
    order = list(ACTIONS)
    for i, name in enumerate(names):
        if name not in ACTIONS:
            raise InvalidObject(f"unknown action {name!r} (known: {', '.join(order)})", obj=obj, field=f"actions[{i}]")
    if names[0] != FIRST:
        raise InvalidObject(f"the first action must be {FIRST!r} (it places the job)", obj=obj, field="actions[0]")
    for i in range(1, len(names)):
        if order.index(names[i]) < order.index(names[i - 1]):
            raise InvalidObject(
                f"{names[i]!r} cannot run after {names[i - 1]!r}: actions run least disruptive first, in the order"
                f" {', '.join(order)}",
                obj=obj,
                field=f"actions[{i}]",
            )


def build(config: ProfileConfig, setting: Setting) -> list[Action]:
    """The actions ``config`` names, in its order, checked first (:func:`check`)."""
    check(config)
    return [ACTIONS[name](setting) for name in config.actions]
