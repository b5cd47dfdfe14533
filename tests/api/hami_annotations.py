"""HAMi's side of its protocol, for tests: the register annotation as HAMi's device plugin writes it, and a pod's
allocation annotation read back as HAMi's ``Allocate`` reads it (scheduler.api.devices.hami reads the one and writes the
other; the scheduler never writes a register nor reads an allocation)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from scheduler.api.devices import hami


def encode_register(devices: Sequence[hami.Device]) -> str:
    """The JSON form HAMi's device plugin writes (fields left out when zero or false, as Go's omitempty does)."""
    entries = []
    for d in devices:
        entry: dict[str, object] = {
            "id": d.uuid,
            "index": d.index,
            "count": d.count,
            "devmem": d.memory_mib,
            "devcore": d.cores,
            "type": d.type,
            "numa": d.numa,
            "mode": d.mode,
            "health": d.health,
        }
        entries.append({k: v for k, v in entry.items() if v or k == "id"})
    return json.dumps(entries, separators=(",", ":"))


def encode_register_text(devices: Sequence[hami.Device]) -> str:
    """The text form of HAMi's ``EncodeNodeDevices`` (nine fields a device, each ended by ``:``)."""
    return "".join(
        f"{d.uuid},{d.count},{d.memory_mib},{d.cores},{d.type},{d.numa},{str(d.health).lower()},{d.index},{d.mode}:"
        for d in devices
    )


def decode_pod_devices(raw: str) -> tuple[tuple[hami.ContainerDevice, ...], ...]:
    """The per-container devices of an allocation annotation, ``UUID,type,memMiB,cores:`` per device and one
    ``;``-terminated entry per container (empty containers kept: the position says which container)."""
    assert not raw or raw.endswith(";"), raw
    containers = []
    for entry in raw.split(";")[:-1]:
        devices = []
        for item in filter(None, entry.split(":")):
            uuid, kind, memory_mib, cores = item.split(",")
            devices.append(hami.ContainerDevice(uuid=uuid, type=kind, memory_mib=int(memory_mib), cores=int(cores)))
        containers.append(tuple(devices))
    return tuple(containers)
