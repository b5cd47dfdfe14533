"""The FGD paper's protocol (``--tune``: pods arrive one at a time and never leave, a pod that fits nowhere fails)
with consolidation under a budget of moves: allocation at 130% arrived against the moves made.

Each pod arrives ``GAP_S`` simulated seconds after the previous one, through the real scheduling loop with the
``consolidate`` action: a pod that fits nowhere may get room by moving running pods (each moved pod comes back as
its controller's new pod, on the target its plan held) and is retried at the end of its backoff. When the next pod
arrives, the previous one is placed or has failed: a failed pod leaves the queue for good, as in the paper's
simulator. Once the moves made reach the budget (a share of the workload's pods), consolidation is switched off
for the rest of the run (a plan started before finishes, so a run may end a few moves past its budget). With a
budget of 0 the run is the paper's protocol itself, through the loop instead of one ``schedule`` call a pod.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.api.objects.pod import PodRequest
from scheduler.framework.interface import Decision
from scheduler.framework.profile import ProfileConfig
from scheduler.kernels import layout
from scheduler.sim import jobsim, protocol
from scheduler.sim.trace import NodeSpec, PodSpec

#: Simulated seconds between arrivals: longer than a moved pod's way back and the job's first backoffs.
GAP_S = 30.0


@dataclass
class BudgetRun:
    #: Allocated GPU share (%) at each percent of arrived demand (``protocol.alloc_curve``).
    curve: dict[int, float]
    moves: int
    budget: int
    pods: int
    failed: int
    wall_s: float


class TuneSimulation(jobsim.JobSimulation):
    def __init__(self, nodes: Sequence[NodeSpec], pods: Sequence[PodSpec], config: ProfileConfig, *, budget: int):
        super().__init__((n.info() for n in nodes), config)
        self.pods = pods
        self.budget = budget
        self.requests = [
            dataclasses.replace(p.request(f"{p.name}#{i}"), owner=f"replicaset/{i}", owner_kind="ReplicaSet")
            for i, p in enumerate(pods)
        ]
        self.index = {r.name: i for i, r in enumerate(self.requests)}
        self.placed_once = np.zeros(len(pods), dtype=bool)
        #: A replacement's name -> the arrival it stands for.
        self.origin: dict[str, int] = {}
        self.moves = 0
        self.failed = 0
        self.arrived_at: list[float] = []
        self.allocated_at: list[float] = []
        self.total_arrived = 0.0
        self.current: int | None = None
        for i, request in enumerate(self.requests):
            self.arrive(request.name, i * GAP_S)

    def arrived(self, name: str) -> None:
        self.close()
        i = self.index[name]
        self.current = i
        self.total_arrived += self.pods[i].gpu_total
        self.submit([self.requests[i]], None)

    def close(self) -> None:
        """The last arrival is placed, or fails now (it leaves the queue); its point of the curve is taken: the
        GPU-milli arrived so far and what the cluster holds."""
        if self.current is None:
            return
        i, self.current = self.current, None
        if not self.placed_once[i]:
            self.failed += 1
            self.loop.pod_gone(self.requests[i].key)
        self.arrived_at.append(self.total_arrived)
        self.allocated_at.append(float(self.cache.arrays.used[:, layout.GPU_MILLI].sum()))
        if self.moves >= self.budget:
            self.loop.mover = None  # the budget is spent: no new plan

    def replaced(self, old: PodRequest, new: PodRequest) -> None:
        self.origin[new.name] = self.origin.get(old.name, self.index.get(old.name, -1))
        self.moves += 1

    def placed(self, decision: Decision) -> None:
        name = decision.pod.name
        i = self.origin.get(name, self.index.get(name, -1))
        if i >= 0:
            self.placed_once[i] = True

    def result(self, wall_s: float, percents: Sequence[int]) -> BudgetRun:
        self.close()
        capacity = float(self.cache.arrays.gpu_count.sum()) * layout.WHOLE
        curve = protocol.alloc_curve(np.array(self.arrived_at), np.array(self.allocated_at), capacity, percents)
        return BudgetRun(curve, self.moves, self.budget, len(self.pods), self.failed, wall_s)


def run(
    nodes: Sequence[NodeSpec], pods: Sequence[PodSpec], config: ProfileConfig, *, budget: int, top: int = 130
) -> BudgetRun:
    """``pods`` (the inflated workload, ``protocol.inflate``) on ``nodes`` (``protocol.tie_order``) with ``config``
    (``consolidate`` among its actions for any move), at most about ``budget`` moves."""
    started = time.perf_counter()
    sim = TuneSimulation(nodes, pods, config, budget=budget)
    sim.run()
    return sim.result(time.perf_counter() - started, [100, top])
