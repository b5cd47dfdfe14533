"""The MIG stream's definition (benchmarks/mig_stream.py) and its ideal replay (benchmarks/mig_packing.py): each
seed's stream offers exactly the load it names, and the replay's placements keep the H100's MIG rules."""

from __future__ import annotations

import pytest

from benchmarks import mig_packing, mig_stream


@pytest.mark.parametrize(("load", "seed"), [(0.8, 42), (1.0, 43), (1.4, 47)])
def test_each_seeds_stream_offers_the_load_it_names(load: float, seed: int) -> None:
    arrivals = mig_stream.stream(claims=120, load=load, life=20.0, nodes=2, seed=seed, warmup=30.0, cooldown=10.0)
    counted = [a for a in arrivals if a.counted]
    held = sum(mig_stream.compute_slices(a.profile) * a.life for a in arrivals)
    # Exactly ``load`` over the stream's duration, the arrivals' span and the gap drawn after the last one (one
    # mean gap of ~200: within 1%).
    assert held / (112 * arrivals[-1].at) == pytest.approx(load, rel=0.01)
    assert len(counted) == 120
    # The warm-up comes first, about 30 s of it, then the counted claims, then the arrivals that go on after them.
    assert not arrivals[0].counted and not arrivals[-1].counted
    assert 15.0 < counted[0].at < 45.0
    assert [a.at for a in arrivals] == sorted(a.at for a in arrivals)


def stream_of(profiles: list[str]) -> list[mig_stream.Arrival]:
    return [mig_stream.Arrival(f"c{i}", p, at=float(i), life=1000.0) for i, p in enumerate(profiles)]


def test_keeping_room_leaves_a_4g_where_first_fit_blocks_it() -> None:
    # One node: seven 1g fill GPU 0; the eighth 1g goes to GPU 1: first fit at memory slice 0, where it rules out
    # the 4g there; keeps-room at the end of the memory slices, where a 4g still fits.
    arrivals = stream_of(["1g.10gb"] * 8 + ["4g.40gb"] * 8)
    first = mig_packing.replay(arrivals, nodes=1, grace=2.0, policy="first-fit")
    keeps = mig_packing.replay(arrivals, nodes=1, grace=2.0, policy="keeps-room")
    assert (first.placed, first.big_placed) == (14, 6)
    assert (keeps.placed, keeps.big_placed) == (15, 7)


@pytest.mark.parametrize("policy", mig_packing.POLICIES)
def test_a_replay_never_gives_a_gpu_more_than_it_has(policy: str) -> None:
    arrivals = mig_stream.stream(claims=120, load=1.4, life=20.0, nodes=2, seed=44, warmup=30.0, cooldown=10.0)
    cluster = mig_packing.Cluster(2, policy)
    held = []
    for a in arrivals[:80]:
        where = cluster.place(a.profile)
        if where is not None:
            held.append((a.profile, where))
        for gpus in cluster.gpus:
            for gpu in gpus:
                assert 0 <= gpu.compute <= mig_stream.COMPUTE_PER_GPU
        assert cluster.pool >= 0
    for profile, where in held:
        cluster.release(profile, where)
    assert all(g.compute == 0 and not any(g.memory) for gpus in cluster.gpus for g in gpus)
    assert cluster.claims_on == [0, 0]
