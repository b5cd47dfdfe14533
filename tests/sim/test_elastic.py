"""The elastic scenario: the same jobs rigid and elastic, a job's pace following its placed workers."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler.sim import elastic, gangs, policies
from scheduler.sim.trace import NodeSpec


def _two_nodes() -> list[NodeSpec]:
    return [NodeSpec(f"gpu-{i}", 128_000, 1_048_576, 8, "A100") for i in range(2)]


def _job(name: str, workers: int, queue: str) -> gangs.Job:
    return gangs.Job(name, workers, 4, 1000, 1024, 0.0, 100.0, queue)


def test_an_elastic_job_gives_its_surplus_to_another_queue_s_guarantee_and_grows_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """2 nodes of 8 GPUs, queues qa and qb guaranteed 8 each. Rigid: qa's 4 x 4-GPU job holds all 16 GPUs for 100 s
    and qb's 2 x 4-GPU job waits for it (taking it would push qa below its guarantee). Elastic: qb reclaims qa's
    surplus at once, both run on 8 GPUs, qb's job ends after 100 s, and qa's grows back to 4 workers for the 200
    worker-seconds it has left (ending after 150 s instead of 100 s): mean completion about 125 s instead of 150 s."""
    monkeypatch.setattr(elastic, "MIN_FRACTION", (1, 2))  # a's minimum 2 of 4, b's 1 of 2
    jobs = [_job("a", 4, "qa"), _job("b", 2, "qb")]
    config = policies.build("default", shapes=[], seed=0)
    runs = {}
    for mode in (False, True):
        sim = elastic.ElasticSimulation(_two_nodes(), jobs, config, elastic=mode)
        sim.run()
        runs[mode] = sim
    assert runs[False].finish == {"a": 100.0, "b": 200.0}
    # The reclaim comes with b's first retry (1.5 s: the backoff), and a grows back with the cycles after b ends.
    finish = runs[True].finish
    assert 100.0 < finish["b"] <= 102.0 and 150.0 < finish["a"] <= 153.0, finish
    assert runs[True].surplus_preemptions == 2 and runs[True].preemptions == 0
    rigid, grown = (runs[m].elastic_result(0.0) for m in (False, True))
    assert rigid.jct_mean_s == 150.0 and grown.jct_mean_s < 128.0
    assert grown.lost_gpu_hours == 0.0


def test_the_built_in_jobs_elastic_hold_no_more_than_the_cluster_and_all_finish() -> None:
    nodes = [NodeSpec(f"gpu-{i}", 128_000, 1_048_576, 8, "A100") for i in range(8)]
    jobs = [j if i % 2 else dataclasses.replace(j, queue="qa") for i, j in enumerate(elastic.jobs(64, seed=3)[:40])]
    sim = elastic.ElasticSimulation(nodes, jobs, policies.build("default", shapes=[], seed=3), elastic=True)
    most = [0.0]
    stepped = sim.stepped

    def check(*, bound: int) -> None:
        stepped(bound=bound)
        placed = sum(
            len(s.placed) * sim.by_name[s.group.name].gpus_per_worker for s in sim.loop.jobs.gangs() if s.group
        )
        assert placed == sim.running_gpus, "a job's pace follows the workers the loop holds"
        most[0] = max(most[0], sim.running_gpus)

    sim.stepped = check  # type: ignore[method-assign]
    sim.run()
    result = sim.elastic_result(0.0)
    assert most[0] <= 64
    assert result.partial_gangs == 0 and result.gpu_allocation <= 100.0
    assert set(sim.finish) == {j.name for j in jobs}
