"""A profile made real: plugin instances sorted by extension point, with their score weights."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.api.basics.errors import InvalidObject
from scheduler.core import registry
from scheduler.framework import interface
from scheduler.framework.profile import ProfileConfig


@dataclass
class Framework:
    config: ProfileConfig
    pre_filters: list[interface.PreFilterPlugin] = field(default_factory=list)
    filters: list[interface.FilterPlugin] = field(default_factory=list)
    #: Score plugins with their weight and, where they have one, their normalize step (resolved once here:
    #: checking a runtime Protocol on every cycle is slow).
    scorers: list[tuple[interface.ScorePlugin, float, Callable[[interface.CycleState, interface.F64], None] | None]] = (
        field(default_factory=list)
    )
    reservers: list[interface.ReservePlugin] = field(default_factory=list)

    @classmethod
    def build(cls, config: ProfileConfig) -> Framework:
        """Instantiate the profile's plugins; unknown names and bad arguments are errors naming the field (its
        actions are checked where they are built, ``scheduler.core.actions.registry.build``)."""
        fw = cls(config)
        for i, pc in enumerate(config.plugins):
            factory = registry.PLUGINS.get(pc.name)
            if pc.name == "reservation":
                raise InvalidObject(
                    "'reservation' is no longer a plugin: nominated and reserved nodes are kept by the scheduler's"
                    " core for every profile; remove it from the profile",
                    obj=f"profile {config.name}",
                    field=f"plugins[{i}].name",
                )
            if factory is None:
                raise InvalidObject(
                    f"unknown plugin {pc.name!r} (known: {', '.join(sorted(registry.PLUGINS))})",
                    obj=f"profile {config.name}",
                    field=f"plugins[{i}].name",
                )
            try:
                plugin = factory(pc.args)
            except InvalidObject as exc:
                raise exc.located(obj=f"profile {config.name}", prefix=f"plugins[{i}]") from None
            if isinstance(plugin, interface.PreFilterPlugin):
                fw.pre_filters.append(plugin)
            if isinstance(plugin, interface.FilterPlugin):
                fw.filters.append(plugin)
            if isinstance(plugin, interface.ScorePlugin) and pc.weight > 0:
                normalize = plugin.normalize if isinstance(plugin, interface.NormalizePlugin) else None
                fw.scorers.append((plugin, pc.weight, normalize))
            if isinstance(plugin, interface.ReservePlugin):
                fw.reservers.append(plugin)
        if not fw.filters:
            raise InvalidObject(
                "a profile needs a filter plugin such as 'fit'", obj=f"profile {config.name}", field="plugins"
            )
        return fw
