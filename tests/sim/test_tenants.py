"""The tenants scenario on a small cluster: queues share it, prod gets its guarantee back, no gang splits."""

from __future__ import annotations

import math

from scheduler.api.crds.queue import QueueSpec
from scheduler.sim import gangs, policies, tenants

QUEUES = (
    QueueSpec(name="prod", weight=2.0, guaranteed={"nvidia.com/gpu": 12}),
    QueueSpec(name="research", weight=2.0, guaranteed={"nvidia.com/gpu": 6}),
    QueueSpec(name="dev", weight=1.0, guaranteed={"nvidia.com/gpu": 2}),
    QueueSpec(name="batch", weight=1.0),
)


def test_jobs_are_generated_per_queue_with_prod_starting_late() -> None:
    jobs = tenants.generate(queues=QUEUES, cluster_gpus=32, horizon_s=3 * 3600.0, prod_start_s=3600.0, seed=1)
    by_queue = {q.name: [j for j in jobs if j.queue == q.name] for q in QUEUES}
    assert all(by_queue.values())
    assert min(j.arrival for j in by_queue["prod"]) >= 3600.0
    assert [j.arrival for j in jobs] == sorted(j.arrival for j in jobs)


def test_a_small_run_shares_the_cluster_and_gives_prod_its_guarantee_back() -> None:
    run = tenants.run(
        gangs.cluster(4),
        policies.build("default", shapes=[], seed=2),
        queues=QUEUES,
        prod_start_s=3600.0,
        horizon_s=3 * 3600.0,
        seed=2,
    )
    assert run.partial_gangs == 0
    assert 0.0 < run.jain_index <= 1.0
    assert 0.0 < run.gpu_allocation <= 100.0
    assert math.isfinite(run.reclaim_latency_s) and run.reclaim_latency_s >= 0.0
    # Fair shares (water-filling on 32 GPUs): guarantees 12, 6, 2, then 12 more split 2:2:1:1.
    fair = {name: q["fair_share_gpus"] for name, q in run.queues.items()}
    assert fair == {"prod": 16.0, "research": 10.0, "dev": 4.0, "batch": 2.0}
