"""``DeviceStore.releases``: it grows only when a claim stops holding a device, which is when a claim's change may
make room for another pod (the queueing hints)."""

from __future__ import annotations

import copy

from scheduler.api.devices import dra as api_dra
from scheduler.cache.device_store import DeviceStore
from tests.api import dra_objects as dra


def test_only_a_claim_that_lets_a_device_go_counts_as_a_release() -> None:
    store = DeviceStore()
    store.upsert_class(api_dra.parse_device_class(dra.gpu_class()))
    store.upsert_slice(api_dra.parse_resource_slice(dra.gpu_slice("gpu-0", 2)))
    raw = dra.claim("c", dra.request(count=1))
    store.upsert_claim(api_dra.parse_claim(raw))  # made, not allocated
    assert store.releases == 0
    allocated = copy.deepcopy(raw)
    allocated["metadata"]["resourceVersion"] = "2"
    allocated["status"] = {"allocation": dra.allocation("gpu-0", "gpu-0")}
    store.upsert_claim(api_dra.parse_claim(allocated))  # allocated: it takes a device
    assert store.releases == 0 and store.taken()
    freed = copy.deepcopy(raw)
    freed["metadata"]["resourceVersion"] = "3"
    store.upsert_claim(api_dra.parse_claim(freed))  # deallocated
    assert store.releases == 1 and not store.taken()
    store.upsert_claim(api_dra.parse_claim(allocated | {"metadata": {**allocated["metadata"], "resourceVersion": "4"}}))
    store.remove_claim("default/c")  # deleted while allocated
    assert store.releases == 2
