"""What is left of devices while an allocation is searched: the shared counters of partitionable devices
(:class:`CounterBudget`, KEP 4815: a full GPU and its MIG placements consume one counter set) and the capacity of
devices shared by several claims (:class:`CapacityUse`, consumable capacity). ``scheduler.cache.device_store``
makes them from what the cluster's claims hold; the DRA plugin takes and gives back as its search goes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.api.devices import consumable_capacity as api_capacity
from scheduler.api.devices import dra as api_dra
from scheduler.api.devices.dra import Device

DeviceKey = tuple[str, str, str]
#: (driver, pool, counter set name).
CounterSetKey = tuple[str, str, str]


class CounterBudget:
    """The counters left in each counter set while an allocation is searched: devices are taken and given back as
    the search goes, and a device fits while every counter it consumes has that much left (a counter set its pool
    does not declare has nothing)."""

    def __init__(
        self, sets: Mapping[CounterSetKey, Mapping[str, int]], consumed: dict[CounterSetKey, dict[str, int]]
    ) -> None:
        self._sets = sets
        self._consumed = consumed

    def fits(self, device: Device, *also: Device) -> bool:
        """Whether ``device`` (and ``also``, taken with it) fit in what is left."""
        if not device.consumes and not any(d.consumes for d in also):
            return True
        need: dict[CounterSetKey, dict[str, int]] = {}
        for d in (device, *also):
            add_counters(need, d, 1)
        for key, counters in need.items():
            limit = self._sets.get(key)
            if limit is None:
                return False
            used = self._consumed.get(key, {})
            if any(used.get(name, 0) + amount > limit.get(name, 0) for name, amount in counters.items()):
                return False
        return True

    def take(self, devices: Sequence[Device]) -> None:
        for device in devices:
            add_counters(self._consumed, device, 1)

    def give(self, devices: Sequence[Device]) -> None:
        for device in devices:
            add_counters(self._consumed, device, -1)

    def fullness(self, device: Device) -> float:
        """How used the counter sets ``device`` consumes already are (0 untouched .. 1 full), on average over their
        counters: a partition goes to the fullest GPU it fits, so that whole GPUs stay whole."""
        shares = [
            self._consumed.get((device.driver, device.pool, name), {}).get(counter, 0) / limit
            for name, _counters in device.consumes
            for counter, limit in self._sets.get((device.driver, device.pool, name), {}).items()
            if limit > 0
        ]
        return sum(shares) / len(shares) if shares else 0.0

    def share(self, device: Device) -> float:
        """How much of its counter sets ``device`` consumes, each counter as a share of its set's (a 4g placement
        more than a 1g)."""
        total = 0.0
        for set_name, counters in device.consumes:
            limits = self._sets.get((device.driver, device.pool, set_name), {})
            total += sum(amount / limits[name] for name, amount in counters if limits.get(name))
        return total


class CapacityUse:
    """The capacity the shares of devices that allow multiple allocations consume while an allocation is searched
    (consumable capacity): taken and given back as the search goes."""

    def __init__(self, used: dict[DeviceKey, dict[str, int]]) -> None:
        self._used = used

    def consumption(self, choice: api_dra.Choice, device: Device) -> dict[str, int] | None:
        """What ``choice`` would consume of ``device``, None if that does not fit (its policy, or what is left)."""
        consumed = choice.consumption(device)
        if consumed is None:
            return None
        used = self._used.get(device.key, {}) if device.multiple else {}
        return consumed if api_capacity.fits(consumed, used, device.capacity) else None

    def take(self, key: DeviceKey, consumed: Mapping[str, int]) -> None:
        count_capacity(self._used, key, tuple(consumed.items()), 1)

    def give(self, key: DeviceKey, consumed: Mapping[str, int]) -> None:
        count_capacity(self._used, key, tuple(consumed.items()), -1)

    def of(self, devices: Sequence[Device]) -> frozenset[tuple[DeviceKey, api_capacity.Amounts]]:
        """What is consumed of those of ``devices`` that are shared (part of what a node's answer depends on)."""
        return frozenset((d.key, tuple(sorted(self._used[d.key].items()))) for d in devices if d.key in self._used)


def count_capacity(
    into: dict[DeviceKey, dict[str, int]], key: DeviceKey, amounts: api_capacity.Amounts, sign: int
) -> None:
    """Add (``sign`` 1) or take away (-1) ``amounts`` consumed of device ``key``; a device left at nothing goes."""
    totals = into.setdefault(key, {})
    for name, amount in amounts:
        totals[name] = totals.get(name, 0) + sign * amount
    if not any(totals.values()):
        del into[key]


def add_counters(into: dict[CounterSetKey, dict[str, int]], device: Device, sign: int) -> None:
    """Add (``sign`` 1) or take away (-1) what ``device`` consumes of its counter sets."""
    for set_name, counters in device.consumes:
        totals = into.setdefault((device.driver, device.pool, set_name), {})
        for name, amount in counters:
            totals[name] = totals.get(name, 0) + sign * amount
