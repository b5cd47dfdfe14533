"""The policies the simulator compares, each a profile of the same plugins the operator runs.

``default`` is the profile the operator uses out of the box (``scheduler/framework/default-profile.yaml``);
the others are the FGD paper's baselines and the classic spread / binpack / balance scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from scheduler.api.basics.errors import InvalidObject
from scheduler.framework import profile, typical
from scheduler.framework.profile import PluginConfig, ProfileConfig

POLICIES = (
    "random",
    "spread",
    "binpack",
    "dotprod",
    "gpu-packing",
    "gpu-clustering",
    "bestfit",
    "fgd",
    "balance",
    "default",
)

_SCORES: dict[str, tuple[str, str]] = {
    # policy: (score plugin, device choice for a shared GPU)
    "spread": ("spread", "bestfit"),
    "binpack": ("binpack", "bestfit"),
    "dotprod": ("dotprod", "bestfit"),
    "gpu-packing": ("gpu_packing", "bestfit"),
    "gpu-clustering": ("gpu_clustering", "bestfit"),
    "bestfit": ("bestfit", "bestfit"),
    "fgd": ("fgd", "hint"),
    "balance": ("balance", "bestfit"),
}


def parse_names(raw: str) -> list[str]:
    names = [n.strip() for n in raw.split(",") if n.strip()]
    for name in names:
        if name not in POLICIES:
            raise InvalidObject(
                f"unknown policy {name!r} (known: {', '.join(POLICIES)})", obj="gpusched simulate", field="--policy"
            )
    if not names:
        raise InvalidObject("no policy named", obj="gpusched simulate", field="--policy")
    return names


def _shapes_arg(shapes: Sequence[typical.Shape]) -> list[dict[str, Any]]:
    return [
        {"cpu": s.cpu, "milli": s.milli, "gpus": s.gpus, "models": "|".join(s.models), "weight": s.weight}
        for s in shapes
    ]


def build(name: str, *, shapes: Sequence[typical.Shape], seed: int) -> ProfileConfig:
    """The profile for a policy; FGD-based scores get the workload's typical pods."""
    if name == "random":
        return ProfileConfig(
            name=name,
            tie_break="random",
            seed=seed,
            plugins=(PluginConfig("fit"), PluginConfig("gpu", args={"device": "random", "seed": seed})),
        )
    if name == "default":
        raw = yaml.safe_load(profile.default_text())
        for plugin in raw["plugins"]:
            if plugin.get("name") == "fgd" and shapes:
                plugin.setdefault("args", {})["typical"] = _shapes_arg(shapes)
        return profile.parse(raw, source="default profile")
    score, device = _SCORES[name]
    args: dict[str, Any] = {"typical": _shapes_arg(shapes)} if score == "fgd" and shapes else {}
    return ProfileConfig(
        name=name,
        tie_break="first",
        seed=seed,
        plugins=(PluginConfig("fit"), PluginConfig("gpu", args={"device": device}), PluginConfig(score, 1.0, args)),
    )
