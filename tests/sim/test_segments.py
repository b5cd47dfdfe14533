"""The segments scenario: a 64-worker job on NVL72-shaped racks, in segments of 16 required on a clique."""

from __future__ import annotations

from scheduler.sim import segments


def test_every_segment_of_the_job_sits_inside_one_clique_and_without_segments_they_do_not() -> None:
    with_segments = segments.run(42, segments=True)
    without = segments.run(42, segments=False)
    assert with_segments.placed and without.placed
    assert with_segments.segments_in_one_clique == 4
    assert with_segments.cliques_touched == 4
    assert without.segments_in_one_clique < 4
    assert with_segments.background_gpus == without.background_gpus  # the same background both times


def test_the_cluster_is_nvl72_shaped() -> None:
    nodes = segments.cluster()
    cliques = {n.labels["nvidia.com/gpu.clique"] for n in nodes}
    assert len(nodes) == 8 * 18 and len(cliques) == 8 and all(n.gpus == 4 for n in nodes)
