"""Consumable capacity (KEP 5075, beta and on by default in Kubernetes 1.36): a device that allows multiple
allocations (``allowMultipleAllocations``) is shared by several claims, each consuming part of its capacity (GPU
memory, bandwidth), never more than the device has; a request asks an amount (``capacity.requests``), which the
device's ``requestPolicy`` rounds up (``validRange`` min and step, ``validValues``) or refuses (above ``max``, off the
step, not a valid value).

Pure rules as the v1.36 allocator applies them (k8s.io/dynamic-resource-allocation, structured/internal/incubating,
``CmpRequestOverCapacity``): for every capacity the device publishes, the amount a request consumes is what it asks,
rounded by the policy; or, when it asks none, the policy's ``default``, else the whole capacity. A request asking a
capacity the device does not publish does not fit it. The check holds for every device: one that does not allow
multiple allocations is given whole, and what it is asked must fit in it.

Amounts are milli-units, as every quantity in ``scheduler.api.devices.dra``; capacity names are qualified
(``domain/name``,
the driver's domain when the slice or request gives none).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.api.basics import fields
from scheduler.api.basics import quantity as api_quantity

#: Capacity name -> amount in milli-units.
Amounts = tuple[tuple[str, int], ...]
#: The ``shareID`` of a share the allocator chose, until the binder writes it with an ID of its own (a UUID per
#: result, as kube-scheduler gives each).
NEW_SHARE = "new"


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    """A capacity's ``requestPolicy``."""

    default: int | None = None
    min: int | None = None
    max: int | None = None
    step: int | None = None
    #: ``validValues``, ascending.
    values: tuple[int, ...] = ()

    def consumed(self, asked: int | None, value: int) -> int:
        """What a request asking ``asked`` (None: nothing) consumes of a capacity of ``value``."""
        if asked is None:
            return self.default if self.default is not None else value
        if self.min is not None:
            if asked < self.min:
                return self.min
            if self.step:
                return self.min + -(-(asked - self.min) // self.step) * self.step
            return asked
        return next((v for v in self.values if asked <= v), asked)

    def violated(self, amount: int) -> bool:
        if self.default is not None and amount == self.default:
            return False
        if self.min is not None:
            too_much = self.max is not None and amount > self.max
            return too_much or bool(self.step and (amount - self.min) % self.step)
        return bool(self.values) and amount not in self.values


def parse_policy(raw: object, *, obj: str, field: str) -> RequestPolicy | None:
    if raw is None:
        return None
    entry = fields.mapping(raw, obj=obj, field=field)

    def amount(value: object, where: str) -> int | None:
        return (
            None if value is None else api_quantity.to_milli(api_quantity.parse_quantity(value, obj=obj, field=where))
        )

    valid_range = fields.mapping(entry.get("validRange"), obj=obj, field=f"{field}.validRange")
    values = fields.sequence(entry.get("validValues"), obj=obj, field=f"{field}.validValues")
    return RequestPolicy(
        amount(entry.get("default"), f"{field}.default"),
        amount(valid_range.get("min"), f"{field}.validRange.min"),
        amount(valid_range.get("max"), f"{field}.validRange.max"),
        amount(valid_range.get("step"), f"{field}.validRange.step"),
        tuple(sorted(a for i, v in enumerate(values) if (a := amount(v, f"{field}.validValues[{i}]")) is not None)),
    )


def parse_amounts(raw: object, *, driver: str, obj: str, field: str) -> Amounts:
    """``{name: quantity}`` -> sorted (name, milli-units); names qualified with ``driver``'s domain when given."""
    out = []
    for name, value in fields.mapping(raw, obj=obj, field=field).items():
        amount = api_quantity.to_milli(api_quantity.parse_quantity(value, obj=obj, field=f"{field}.{name}"))
        out.append((str(name) if not driver or "/" in str(name) else f"{driver}/{name}", amount))
    return tuple(sorted(out))


def consumption(
    asked: Mapping[str, int], capacity: Mapping[str, int], policies: Mapping[str, RequestPolicy]
) -> dict[str, int] | None:
    """What a request asking ``asked`` consumes of each capacity of a device (``capacity`` and its ``policies``),
    None when it cannot have the device: it asks a capacity the device does not publish, or an amount its policy
    refuses."""
    if any(name not in capacity for name in asked):
        return None
    out: dict[str, int] = {}
    for name, value in capacity.items():
        policy = policies.get(name)
        wanted = asked.get(name)
        amount = policy.consumed(wanted, value) if policy else wanted if wanted is not None else value
        if policy is not None and policy.violated(amount):
            return None
        out[name] = amount
    return out


def fits(consumed: Mapping[str, int], used: Mapping[str, int], capacity: Mapping[str, int]) -> bool:
    """Whether ``consumed`` more fits in a device's ``capacity`` beside what is ``used`` of it already."""
    return all(used.get(name, 0) + amount <= capacity.get(name, 0) for name, amount in consumed.items())


def share(consumed: Mapping[str, int] | None) -> tuple[str, Amounts]:
    """An allocation result's share ID and consumed capacity: a new share consuming ``consumed``, or (None) none."""
    return ("", ()) if consumed is None else (NEW_SHARE, tuple(sorted(consumed.items())))
