"""Every kernel agrees with its NumPy twin on random clusters (to 1e-9), and the scores mean what they say."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.kernels import _jit, layout, reference, scores
from scheduler.kernels import fgd as fgd_kernel
from scheduler.kernels import fit as fit_kernel
from scheduler.kernels.synthetic import random_cluster, random_request, random_typical

SEEDS = st.integers(min_value=0, max_value=2**32 - 1)
#: Whether the kernels run their parallel twins (forced for any node count) or their serial ones.
PARALLEL = st.booleans()


@contextlib.contextmanager
def _twins(parallel: bool) -> Iterator[None]:
    saved = _jit.PARALLEL_MIN_NODES
    _jit.PARALLEL_MIN_NODES = 1 if parallel else 10**9
    try:
        yield
    finally:
        _jit.PARALLEL_MIN_NODES = saved


SIZES = st.integers(min_value=1, max_value=60)


def _setup(seed: int, nodes: int):
    rng = np.random.default_rng(seed)
    cluster = random_cluster(rng, nodes)
    req, k, m, gmem = random_request(rng)
    listed = np.sort(rng.choice(nodes, size=rng.integers(1, nodes + 1), replace=False)).astype(np.int64)
    return rng, cluster, req, k, m, gmem, listed


@settings(max_examples=60, deadline=None)
@given(seed=SEEDS, nodes=SIZES, parallel=PARALLEL)
def test_fit_matches_reference(seed: int, nodes: int, parallel: bool) -> None:
    with _twins(parallel):
        _test_fit_matches_reference(seed, nodes)


def _test_fit_matches_reference(seed: int, nodes: int) -> None:
    rng, c, req, k, m, gmem, _ = _setup(seed, nodes)
    model_ok = rng.random(3) < 0.5
    any_model = bool(rng.random() < 0.5)
    node_reason = np.where(rng.random(nodes) < 0.1, layout.UNSCHEDULABLE, layout.FIT).astype(np.int8)
    args = (
        c.cap,
        c.used,
        req,
        c.gpu_free,
        c.gpu_mem_free,
        c.gpu_count,
        c.node_model,
        model_ok,
        any_model,
        k,
        m,
        gmem,
        node_reason,
    )
    got = fit_kernel.fit(*args, np.empty(nodes, np.int8))
    want = reference.fit(*args, np.empty(nodes, np.int8))
    np.testing.assert_array_equal(got, want)


@settings(max_examples=60, deadline=None)
@given(seed=SEEDS, nodes=SIZES, parallel=PARALLEL)
def test_resource_scores_match_reference(seed: int, nodes: int, parallel: bool) -> None:
    with _twins(parallel):
        _test_resource_scores_match_reference(seed, nodes)


def _test_resource_scores_match_reference(seed: int, nodes: int) -> None:
    rng, c, req, k, m, _, listed = _setup(seed, nodes)
    whole_k = k if m >= 1000 else 0
    weights = rng.choice([0.0, 1.0, 2.0, 0.5], size=req.shape[0])
    common = (listed, c.cap, c.used, req, whole_k, c.gpu_mem_each, weights)
    for name in ("spread", "binpack"):
        got = getattr(scores, name)(*common, np.empty(listed.shape[0]))
        want = getattr(reference, name)(*common, np.empty(listed.shape[0]))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9, err_msg=name)
    most = rng.random(req.shape[0]) < 0.5
    got = scores.resource_strategy(*common, most, np.empty(listed.shape[0]))
    want = reference.resource_strategy(*common, most, np.empty(listed.shape[0]))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    coef = rng.random(4) + 0.01
    cache = scores.BalanceCache(nodes, req.shape[0])
    got = scores.balance(*common, coef, 0.9, 0.2, c.gen, cache, np.empty(listed.shape[0]))
    want = reference.balance(*common, coef, 0.9, 0.2, c.gen, cache, np.empty(listed.shape[0]))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    scarce = np.zeros(req.shape[0], dtype=bool)
    scarce[[layout.GPU_MILLI, layout.GPU_MEMORY]] = True
    got = scores.scarce_avoidance(listed, c.cap, req, scarce, np.empty(listed.shape[0]))
    want = reference.scarce_avoidance(listed, c.cap, req, scarce, np.empty(listed.shape[0]))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    for name in ("bestfit", "dotprod"):
        got = getattr(scores, name)(listed, c.cap, c.used, req, 128000.0, 8000.0, np.empty(listed.shape[0]))
        want = getattr(reference, name)(listed, c.cap, c.used, req, 128000.0, 8000.0, np.empty(listed.shape[0]))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9, err_msg=name)


@settings(max_examples=60, deadline=None)
@given(seed=SEEDS, nodes=st.integers(min_value=1, max_value=700), parallel=PARALLEL)
def test_balance_cache_follows_the_cluster(seed: int, nodes: int, parallel: bool) -> None:
    with _twins(parallel):
        _test_balance_cache_follows_the_cluster(seed, nodes)


def _test_balance_cache_follows_the_cluster(seed: int, nodes: int) -> None:
    # Up to 700 nodes: more than one chunk of the kernel. A stream of pods is scored with one cache while
    # placements change nodes (and their generation numbers), capacities change and the weights change; every
    # call must equal the twin's fresh computation.
    rng, c, _, _, _, _, _ = _setup(seed, nodes)
    cache = scores.BalanceCache(nodes, c.cap.shape[1])
    weights = rng.choice([0.0, 1.0, 2.0, 0.5], size=c.cap.shape[1])
    coef = rng.random(4) + 0.01
    counter = int(c.gen.max()) + 1
    for step in range(6):
        req, k, m, _ = random_request(rng)
        whole_k = k if m >= 1000 else 0
        listed = np.sort(rng.choice(nodes, size=rng.integers(1, nodes + 1), replace=False)).astype(np.int64)
        args = (listed, c.cap, c.used, req, whole_k, c.gpu_mem_each, weights, coef, 0.9, 0.2, c.gen, cache)
        got = scores.balance(*args, np.empty(listed.shape[0]))
        want = reference.balance(*args, np.empty(listed.shape[0]))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9, err_msg=f"step {step}")
        changed = rng.choice(nodes, size=rng.integers(0, nodes + 1), replace=False)
        c.used[changed] *= rng.uniform(0.5, 1.0, size=(changed.shape[0], 1))
        if step == 2:
            c.cap[changed[:1]] *= 2.0
        c.gen[changed] = counter + np.arange(changed.shape[0])
        counter += changed.shape[0]
        if step == 3:
            weights = rng.choice([0.0, 1.0, 2.0, 0.5], size=c.cap.shape[1])


@settings(max_examples=60, deadline=None)
@given(seed=SEEDS, parallel=PARALLEL)
def test_balance_thresholds_agree_exactly(seed: int, parallel: bool) -> None:
    # Whole-number capacities and usage (pods, extended resources) put utilisations on the stranding thresholds
    # (6/20 vs 0.3, 22/110 vs 0.2), where computing them another way than the twin, u/c + r/c for (u + r)/c,
    # flips a comparison in the last bit and with it the node's stranding.
    rng = np.random.default_rng(seed)
    nodes = 200
    cap = rng.choice([0.0, 10.0, 20.0, 110.0], size=(nodes, 6))
    used = np.floor(cap * rng.uniform(0.0, 1.0, size=cap.shape))
    req = rng.choice([0.0, 1.0, 2.0, 3.0], size=6)
    listed = np.arange(nodes, dtype=np.int64)
    args = (listed, cap, used, req, 0, np.zeros(nodes), np.ones(6), np.array([0.0, 0.0, 1.0, 0.0]))
    for low, high in ((0.2, 0.9), (0.3, 0.7), (0.3, 0.6), (0.0, 1.0)):
        with _twins(parallel):
            cache = scores.BalanceCache(nodes, 6)
            got = scores.balance(*args, high, low, np.arange(nodes), cache, np.empty(nodes))
        want = reference.balance(*args, high, low, np.arange(nodes), cache, np.empty(nodes))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9, err_msg=f"low {low}, high {high}")


@settings(max_examples=60, deadline=None)
@given(seed=SEEDS, nodes=SIZES, parallel=PARALLEL)
def test_fgd_matches_reference(seed: int, nodes: int, parallel: bool) -> None:
    with _twins(parallel):
        _test_fgd_matches_reference(seed, nodes)


def _test_fgd_matches_reference(seed: int, nodes: int) -> None:
    rng, c, req, k, m, gmem, listed = _setup(seed, nodes)
    typical = random_typical(rng)
    cache = fgd_kernel.FragCache(nodes, typical.cpu.shape[0])
    outs = [
        (np.empty(listed.shape[0]), np.empty(listed.shape[0]), np.empty(listed.shape[0], np.int64)) for _ in range(2)
    ]
    args = (
        listed,
        c.cap,
        c.used,
        c.gpu_free,
        c.gpu_mem_free,
        c.gpu_count,
        c.node_model,
        c.gen,
        typical,
        cache,
        float(req[layout.CPU]),
        k,
        m,
        gmem,
    )
    exact = bool(rng.random() < 0.5)
    scale = float(rng.choice([1000.0, 250.0, 4000.0]))
    fgd_kernel.fgd(*args, *outs[0], exact=exact, scale=scale)
    reference.fgd(*args, *outs[1], exact=exact, scale=scale)
    # Only nodes the pod fits on are scored in practice; compare those.
    reasons = fit_kernel.fit(
        c.cap,
        c.used,
        req,
        c.gpu_free,
        c.gpu_mem_free,
        c.gpu_count,
        c.node_model,
        np.ones(3, bool),
        True,
        k,
        m,
        gmem,
        np.zeros(nodes, np.int8),
        np.empty(nodes, np.int8),
    )
    fits = reasons[listed] == layout.FIT
    for got, want in zip(outs[0], outs[1], strict=True):
        np.testing.assert_allclose(got[fits], want[fits], rtol=0, atol=1e-9)
    frag = fgd_kernel.fragmentation(c.cap, c.used, c.gpu_free, c.gpu_count, c.node_model, typical, np.empty(nodes))
    np.testing.assert_allclose(
        frag,
        reference.fragmentation(c.cap, c.used, c.gpu_free, c.gpu_count, c.node_model, typical, np.empty(nodes)),
        rtol=0,
        atol=1e-9,
    )
    np.testing.assert_allclose(cache.frag[listed], frag[listed], rtol=0, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(seed=SEEDS, nodes=SIZES, parallel=PARALLEL)
def test_fgd_baselines_match_reference(seed: int, nodes: int, parallel: bool) -> None:
    with _twins(parallel):
        _test_fgd_baselines_match_reference(seed, nodes)


def _test_fgd_baselines_match_reference(seed: int, nodes: int) -> None:
    rng, c, _, k, m, _, listed = _setup(seed, nodes)
    reasons = fit_kernel.fit(
        c.cap,
        c.used,
        np.zeros(c.cap.shape[1]),
        c.gpu_free,
        c.gpu_mem_free,
        c.gpu_count,
        c.node_model,
        np.ones(3, bool),
        True,
        k,
        m,
        0.0,
        np.zeros(nodes, np.int8),
        np.empty(nodes, np.int8),
    )
    fits = listed[reasons[listed] == layout.FIT]
    got = scores.gpu_packing(fits, c.gpu_free, c.gpu_count, k, m, np.empty(fits.shape[0]))
    want = reference.gpu_packing(fits, c.gpu_free, c.gpu_count, k, m, np.empty(fits.shape[0]))
    np.testing.assert_array_equal(got, want)
    classes = rng.integers(0, 3, size=(nodes, 17)) * (rng.random((nodes, 17)) < 0.2)
    pod_class = -1 if k == 0 else (0 if m < 1000 else k)
    got = scores.gpu_clustering(fits, c.cap, c.used, classes, pod_class, 8000.0, np.empty(fits.shape[0]))
    want = reference.gpu_clustering(fits, c.cap, c.used, classes, pod_class, 8000.0, np.empty(fits.shape[0]))
    np.testing.assert_array_equal(got, want)


def test_gpu_packing_prefers_partly_used_devices() -> None:
    # Node 0: all free (8 devices) -> max(33-8, 8) = 25. Node 1: one device at 300 free -> 100 - 30//10 = 97.
    # Node 2: devices used but only fully free ones fit a 500-milli pod -> max(50-1, 33) = 49.
    gpu_free = np.array([[1000.0] * 8, [300.0, 1000.0] + [0.0] * 6, [200.0, 1000.0] + [0.0] * 6])
    counts = np.array([8, 8, 8], dtype=np.int64)
    out = scores.gpu_packing(np.arange(3, dtype=np.int64), gpu_free, counts, 1, 250.0, np.empty(3))
    assert out.tolist() == [25.0, 97.0, 49.0]
    out = scores.gpu_packing(np.arange(3, dtype=np.int64), gpu_free, counts, 1, 500.0, np.empty(3))
    assert out.tolist() == [25.0, 49.0, 49.0]


def test_a_twin_must_take_its_kernels_arguments() -> None:
    """A NumPy twin whose arguments drift from its kernel's is refused when the module is read, not found out
    later as a wrong comparison."""
    with pytest.raises(TypeError, match="does not take the arguments of its kernel"):

        @reference._twin_of(scores.spread)
        def spread(nodes, cap, used, req, whole_k, weights, out):  # type: ignore[no-untyped-def]
            return out
