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


def test_the_segments_leave_no_more_cliques_partly_used_than_any_placement_of_them_could() -> None:
    """Seed 42: the background leaves 3 cliques partly used, none with 16 empty nodes, so each segment opens an
    empty clique and leaves 2 of its nodes free there: 7 is the fewest, and the placement reaches it."""
    run = segments.run(42, segments=True)
    assert run.partly_used_before == 3
    assert run.fewest_partly_used == 7
    assert run.cliques_partly_used == run.fewest_partly_used


def test_fewest_partly_used_is_exact_on_small_cases() -> None:
    # Two cliques of 8 GPUs (2 nodes of 4): one empty, one with a node full. A unit of one node fills the second.
    assert segments.fewest_partly_used([0, 4], [2, 1], 8, 1, 1) == 0
    # A unit of 2 nodes fits only the empty clique, which it fills; the other stays partly used.
    assert segments.fewest_partly_used([0, 4], [2, 1], 8, 2, 1) == 1
    # Two units of 2 nodes do not fit at all.
    assert segments.fewest_partly_used([0, 4], [2, 1], 8, 2, 2) == -1
