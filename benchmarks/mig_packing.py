"""What a MIG stream allows: ``benchmarks/mig_stream.py``'s seeded streams replayed without a cluster, by an ideal
scheduler that takes no time, under several ways of choosing the MIG placement, so the real runs' figures can be
read against them.

Each stream (the same arrivals, profiles and lifetimes as ``mig_stream.py`` draws for a load and seed) is replayed
as events: at each arrival and each departure every pending claim is tried again, oldest first, and placed at once
if it fits (no latency, no backoff); a placed claim leaves its lifetime after its bind. A counted claim is placed if
bound by ``--grace`` seconds after the last counted arrival, as in the real runs. The placement policies:

- ``first-fit``: on the node with the fewest claims, the first MIG placement of the profile whose memory slices and
  compute slices are free, GPUs and start slices in their order (what kube-scheduler v1.36 does: its scoring
  spreads pods over nodes; its DRA allocator takes the first matching device of the slices, in their order);
- ``keeps-room``: gpusched's choice (``_keeps_room`` in scheduler/cache/device_allocator.py), over the cluster's
  GPUs: the fullest GPU the placement fits, and on it the placement after which the other placements still possible
  are the largest;
- ``repacked``: a GPU takes a claim whenever its free compute slices and memory slices are enough, wherever they are
  (as if the GPU's partitions could be moved for free): no placement ever blocks another on the same GPU;
- ``pooled``: the cluster's compute slices are one pool (no GPU boundaries at all): a claim fits while the pool
  has its compute slices.

``repacked`` and ``pooled`` are not schedulers anyone can run: they say what alignment inside a GPU, and GPU
boundaries, cost on the stream. None of these is a proven optimum or bound: the order claims are tried in matters
(``--smallest-first`` tries the smallest profiles first), and so does timing (a real scheduler may place a claim
later, or elsewhere, than the replay and do better after).

    .venv/bin/python -m benchmarks.mig_packing [--loads 0.8,1.0,1.2,1.4] [--seeds 42,43,44] [--smallest-first]
                                               [--deadline S] [the stream's options of mig_stream.py]
"""

from __future__ import annotations

import argparse
import heapq
import sys
from dataclasses import dataclass

from benchmarks import mig_stream
from tests.api import dra_objects

POLICIES = ("first-fit", "keeps-room", "repacked", "pooled")
MEMORY_SLICES = 8


@dataclass(slots=True)
class Gpu:
    memory: list[bool]  # which memory slices are taken
    compute: int = 0  # compute slices taken

    def free_at(self, start: int, memory: int, compute: int) -> bool:
        return self.compute + compute <= mig_stream.COMPUTE_PER_GPU and not any(self.memory[start : start + memory])

    def take(self, start: int, memory: int, compute: int, sign: int) -> None:
        for m in range(start, start + memory):
            self.memory[m] = sign > 0
        self.compute += sign * compute

    def fullness(self) -> float:
        """As ``CounterBudget.fullness``: the mean over the GPU's counters (8 memory slices, compute) of their use."""
        return (sum(self.memory) + self.compute / mig_stream.COMPUTE_PER_GPU) / (MEMORY_SLICES + 1)

    def room(self) -> float:
        """As ``_keeps_room``'s room: the counters' shares of every placement (and the full GPU) still possible."""
        total = 0.0
        for memory, compute, starts in dra_objects.MIG_PROFILES.values():
            share = memory + compute / mig_stream.COMPUTE_PER_GPU
            total += sum(share for s in starts if self.free_at(s, memory, compute))
        if self.compute == 0 and not any(self.memory):
            total += MEMORY_SLICES + 1  # the full GPU device
        return total


class Cluster:
    def __init__(self, nodes: int, policy: str) -> None:
        self.policy = policy
        self.gpus = [[Gpu([False] * MEMORY_SLICES) for _ in range(mig_stream.GPUS_PER_NODE)] for _ in range(nodes)]
        self.claims_on = [0] * nodes
        self.pool = nodes * mig_stream.GPUS_PER_NODE * mig_stream.COMPUTE_PER_GPU

    def place(self, profile: str) -> tuple[int, int, int] | None:
        """Where the claim goes (node, GPU, start slice), taken; None when it does not fit."""
        memory, compute, starts = dra_objects.MIG_PROFILES[profile]
        where: tuple[int, int, int] | None = None
        if self.policy == "pooled":
            if self.pool < compute:
                return None
            self.pool -= compute
            return (0, 0, 0)
        if self.policy == "first-fit":
            for n in sorted(range(len(self.gpus)), key=lambda n: (self.claims_on[n], n)):
                where = next(
                    (
                        (n, g, s)
                        for g, gpu in enumerate(self.gpus[n])
                        for s in starts
                        if gpu.free_at(s, memory, compute)
                    ),
                    None,
                )
                if where is not None:
                    break
        elif self.policy == "keeps-room":
            best: tuple[float, float, int, int] | None = None
            for n, gpus in enumerate(self.gpus):
                for g, gpu in enumerate(gpus):
                    for s in starts:
                        if not gpu.free_at(s, memory, compute):
                            continue
                        fullness = gpu.fullness()
                        gpu.take(s, memory, compute, +1)
                        key = (-fullness, -gpu.room(), n, g)
                        gpu.take(s, memory, compute, -1)
                        if best is None or key < best:
                            best, where = key, (n, g, s)
        else:  # repacked: any GPU whose free slices are enough, the fullest first
            fitting = [
                (-gpu.compute, n, g)
                for n, gpus in enumerate(self.gpus)
                for g, gpu in enumerate(gpus)
                if gpu.compute + compute <= mig_stream.COMPUTE_PER_GPU and MEMORY_SLICES - sum(gpu.memory) >= memory
            ]
            if fitting:
                _c, n, g = min(fitting)
                gpu = self.gpus[n][g]
                free = [m for m in range(MEMORY_SLICES) if not gpu.memory[m]][:memory]
                for m in free:
                    gpu.memory[m] = True
                gpu.compute += compute
                self.claims_on[n] += 1
                return (n, g, -1 - sum(1 << m for m in free))  # the slices taken, to give back
        if where is None:
            return None
        n, g, s = where
        self.gpus[n][g].take(s, memory, compute, +1)
        self.claims_on[n] += 1
        return where

    def release(self, profile: str, where: tuple[int, int, int]) -> None:
        memory, compute, _starts = dra_objects.MIG_PROFILES[profile]
        if self.policy == "pooled":
            self.pool += compute
            return
        n, g, s = where
        gpu = self.gpus[n][g]
        if s < 0:  # repacked: the slices it took
            mask = -1 - s
            for m in range(MEMORY_SLICES):
                if mask >> m & 1:
                    gpu.memory[m] = False
            gpu.compute -= compute
        else:
            gpu.take(s, memory, compute, -1)
        self.claims_on[n] -= 1


@dataclass(slots=True)
class Outcome:
    placed: int
    big_placed: int
    asked: int
    big_asked: int
    compute_in_use: float


def replay(
    arrivals: list[mig_stream.Arrival],
    *,
    nodes: int,
    grace: float,
    policy: str,
    deadline: float | None = None,
    smallest_first: bool = False,
) -> Outcome:
    cluster = Cluster(nodes, policy)
    counted = [a for a in arrivals if a.counted]
    window, end = counted[0].at, counted[-1].at + (grace if deadline is None else deadline + 0.5)
    events: list[tuple[float, int, int]] = [(a.at, 1, i) for i, a in enumerate(arrivals)]  # (time, kind, claim)
    heapq.heapify(events)
    pending: list[int] = []
    held: dict[int, tuple[int, int, int]] = {}
    bound: dict[int, float] = {}
    in_use, busy, last = 0, 0.0, window
    while events:
        now, kind, i = heapq.heappop(events)
        if now > end:
            break
        if now > window:
            busy += in_use * (now - max(last, window))
            last = now
        if kind == 0:  # departure
            cluster.release(arrivals[i].profile, held.pop(i))
            in_use -= mig_stream.compute_slices(arrivals[i].profile)
        else:
            pending.append(i)
        still: list[int] = []
        if smallest_first:
            pending.sort(key=lambda j: (mig_stream.compute_slices(arrivals[j].profile), j))
        for j in pending:
            if deadline is not None and now > arrivals[j].at + deadline:
                continue  # withdrawn
            where = cluster.place(arrivals[j].profile)
            if where is None:
                still.append(j)
                continue
            held[j], bound[j] = where, now
            in_use += mig_stream.compute_slices(arrivals[j].profile)
            leave_after = arrivals[j].leave_after
            if leave_after is None:
                heapq.heappush(events, (now + arrivals[j].life, 0, j))
            elif j + leave_after < len(arrivals):  # leaves as that later arrival comes
                heapq.heappush(events, (max(now, arrivals[j + leave_after].at), 0, j))
        pending = still
    busy += in_use * (end - max(last, window))
    capacity = nodes * mig_stream.GPUS_PER_NODE * mig_stream.COMPUTE_PER_GPU
    placed = [i for i, a in enumerate(arrivals) if a.counted and i in bound]
    return Outcome(
        placed=len(placed),
        big_placed=sum(1 for i in placed if arrivals[i].profile in mig_stream.BIG),
        asked=len(counted),
        big_asked=sum(1 for a in counted if a.profile in mig_stream.BIG),
        compute_in_use=busy / (capacity * (end - window)),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mig_stream.add_stream_options(parser, loads="0.8,1.0,1.2,1.4")
    parser.add_argument(
        "--smallest-first",
        action="store_true",
        help="try the pending claims smallest profile first (the most claims, the big ones last) instead of oldest",
    )
    args = parser.parse_args(argv)
    seeds = [int(x) for x in args.seeds.split(",")]
    print(
        f"{args.nodes} nodes of {mig_stream.GPUS_PER_NODE} H100, {args.claims} claims, life {args.life} s, "
        f"seeds {args.seeds}: means, and per seed the claims placed"
    )
    print("| load | placement | claims placed | 4g/7g placed | compute in use | per seed |")
    print("|---:|---|---:|---:|---:|---|")
    for load in (float(x) for x in args.loads.split(",")):
        streams = [mig_stream.arrivals_of(args, load=load, seed=seed) for seed in seeds]
        for policy in POLICIES:
            outs = [
                replay(
                    s,
                    nodes=args.nodes,
                    grace=args.grace,
                    policy=policy,
                    deadline=args.deadline,
                    smallest_first=args.smallest_first,
                )
                for s in streams
            ]
            n = len(outs)
            print(
                f"| {load:.1f} | {policy} | {sum(o.placed for o in outs) / n:.1f} of {outs[0].asked} "
                f"| {sum(o.big_placed for o in outs) / n:.1f} of {sum(o.big_asked for o in outs) / n:.1f} "
                f"| {100 * sum(o.compute_in_use for o in outs) / n:.1f}% | {', '.join(str(o.placed) for o in outs)} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
