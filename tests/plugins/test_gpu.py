"""The gpu plugin picks the devices: whole GPUs on the lowest-index free devices, a shared GPU on the device its
``device`` argument says (the least free that fits, the first, a seeded random one, or the score plugin's hint)."""

from __future__ import annotations

from typing import Any

from tests.api import objects
from tests.core.harness import Cluster


def _used(name: str, device: int, milli: int) -> dict[str, Any]:
    return objects.pod(name, node_name="a", milli=milli, annotations={"gpusched.io/gpu-ids": str(device)})


# Device free milli: [1000, 600, 300, 800].
BUSY = [_used("u1", 1, 400), _used("u2", 2, 700), _used("u3", 3, 200)]


def _cluster(device: str, *extra: Any, seed: int = 0) -> Cluster:
    return Cluster(
        [objects.node("a", gpus=4)],
        ["fit", {"name": "gpu", "args": {"device": device, "seed": seed}}, *extra],
        bound=BUSY,
    )


def test_whole_gpus_go_to_the_lowest_index_free_devices() -> None:
    cluster = Cluster([objects.node("a", gpus=8)], bound=[_used("u", 1, 100)])
    assert cluster.place(objects.pod("p", gpus=2)) == ("a", (0, 2))
    assert cluster.place(objects.pod("q", gpus=3)) == ("a", (3, 4, 5))
    assert cluster.free_devices("a") == [0.0, 900.0, 0.0, 0.0, 0.0, 0.0, 1000.0, 1000.0]


def test_bestfit_takes_the_device_with_least_free_that_fits() -> None:
    cluster = _cluster("bestfit")
    assert cluster.place(objects.pod("p", milli=250)) == ("a", (2,))
    assert cluster.place(objects.pod("q", milli=350)) == ("a", (1,))
    assert cluster.place(objects.pod("r", milli=700)) == ("a", (3,))
    assert cluster.free_devices("a") == [1000.0, 250.0, 50.0, 100.0]


def test_first_takes_the_lowest_index_device_that_fits() -> None:
    cluster = _cluster("first")
    assert cluster.place(objects.pod("p", milli=700)) == ("a", (0,))
    assert cluster.place(objects.pod("q", milli=700)) == ("a", (3,))


def test_random_is_seeded_and_reproducible() -> None:
    def picks(seed: int) -> list[int]:
        cluster = _cluster("random", seed=seed)
        return [cluster.place(objects.pod(f"p{i}", milli=50))[1][0] for i in range(12)]

    assert picks(7) == picks(7)
    assert len(set(picks(7))) > 1
    assert any(picks(seed) != picks(7) for seed in range(3))


def test_the_shared_device_respects_gpu_memory() -> None:
    cluster = Cluster(
        [objects.node("a", gpus=2, gpu_memory_mib="16384")],
        ["fit", {"name": "gpu", "args": {"device": "bestfit"}}],
        bound=[objects.pod("u", node_name="a", milli=500, gpu_memory="12Gi", annotations={"gpusched.io/gpu-ids": "0"})],
    )
    # Device 0 has the least free milli but only 4Gi of memory left.
    assert cluster.place(objects.pod("p", milli=100, gpu_memory="8Gi")) == ("a", (1,))
    assert cluster.place(objects.pod("q", milli=100, gpu_memory="2Gi")) == ("a", (0,))


def test_hint_takes_the_device_fgd_suggests() -> None:
    # One typical pod: one GPU of 500 milli. Free milli [1000, 600, 300, 800]; fragmentation before: 300 (device 2,
    # too small for it). A pod of 350 fits devices 0, 1 and 3:
    #   device 0 -> 650 free: still >= 500, fragmentation stays 300, drop 0    -> score int(100 sigmoid(0))     = 50
    #   device 1 -> 250 free: a new fragment, 300 + 250 = 550,   drop -250    -> int(100 sigmoid(-0.25)) = 43
    #   device 3 -> 450 free: 300 + 450 = 750,                   drop -450    -> int(100 sigmoid(-0.45)) = 38
    # so FGD keeps the whole device busy rather than fragment two, where bestfit would take device 1.
    fgd = {"name": "fgd", "args": {"typical": [{"milli": 500, "gpus": 1}]}}
    cluster = _cluster("hint", fgd)
    result = cluster.schedule(objects.pod("p", milli=350))
    assert result.decision is not None and result.state is not None
    assert result.decision.gpu_ids == (0,)
    assert result.state.device_hints["fgd"].tolist() == [0]
    assert _cluster("bestfit", fgd).place(objects.pod("p", milli=350)) == ("a", (1,))


def test_hint_without_a_hinting_scorer_falls_back_to_bestfit() -> None:
    assert _cluster("hint").place(objects.pod("p", milli=250)) == ("a", (2,))
