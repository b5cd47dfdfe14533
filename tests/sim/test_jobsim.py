"""The simulator's side of consolidation: moved pods leave at once and come back as new pods of their controller,
placed on the targets held for them."""

from __future__ import annotations

from scheduler.api.basics import resources
from scheduler.api.basics.resources import GpuRequest
from scheduler.api.objects import node as api_node
from scheduler.api.objects.pod import PodRequest
from scheduler.core.consolidation.defrag import Defragmenter
from scheduler.core.consolidation.moves import Moves
from scheduler.framework import profile
from scheduler.framework.interface import Decision
from scheduler.sim import jobsim
from tests.api import objects


class Arrivals(jobsim.JobSimulation):
    """Single pods arrive at given times and never leave; records placements and replacements."""

    def __init__(
        self,
        pods: list[tuple[float, PodRequest]],
        actions: list[str],
        leave: dict[str, float],
        consolidation: dict[str, int] | None = None,
    ) -> None:
        raw = {"plugins": ["fit", "gpu", "fgd"], "actions": actions, "consolidation": consolidation or {}}
        config = profile.parse(raw)
        nodes = [api_node.parse_node(objects.node(f"n{i}", cpu="64", gpus=8)) for i in range(3)]
        super().__init__(nodes, config)
        self.by_name = {pod.name: pod for _, pod in pods}
        self.where: dict[str, str] = {}
        self.follow: dict[str, str] = {}
        self.leave = leave
        for at, pod in pods:
            self.arrive(pod.name, at)

    def arrived(self, name: str) -> None:
        self.submit([self.by_name[name]], None)
        if name in self.leave:
            self.depart(name, self.leave[name])

    def departed(self, name: str) -> None:
        self.remove([self.by_name[name]], None)
        self.where.pop(name, None)
        self.pods_deleted()

    def placed(self, decision: Decision) -> None:
        self.where[decision.pod.name] = decision.node

    def replaced(self, old: PodRequest, new: PodRequest) -> None:
        self.follow[old.name] = new.name
        self.where.pop(old.name, None)


def _pod(name: str, gpus: int, at: float, owner: str = "") -> tuple[float, PodRequest]:
    request = {resources.CPU: 1000, resources.PODS: 1}
    gpu = GpuRequest(count=gpus, milli=1000)
    return at, PodRequest("trace", name, resources=request, gpu=gpu, owner=owner, owner_kind="ReplicaSet", created=at)


def _workload() -> list[tuple[float, PodRequest]]:
    # 24 one-GPU pods fill the three nodes (FGD packs them in name order), four leave: 7, 6 and 7 GPUs are used
    # when a 4-GPU pod comes.
    pods = [_pod(f"s{i}", 1, float(i), owner=f"rs{i % 3}") for i in range(24)]
    return [*pods, _pod("big", 4, 100.0)]


LEAVE = {"s0": 40.0, "s8": 40.0, "s9": 40.0, "s16": 40.0}


def _run(actions: list[str]) -> Arrivals:
    sim = Arrivals(_workload(), actions, LEAVE)
    sim.run()
    return sim


def test_with_consolidate_the_four_gpu_pod_runs_and_every_moved_pod_runs_again() -> None:
    sim = _run(["allocate", "consolidate"])
    assert "big" in sim.where
    assert sim.follow and all(new in sim.where for new in sim.follow.values())
    assert len(sim.where) == 21 and len(sim.follow) == 2
    assert sim.loop.action_state(Moves).moved == len(sim.follow)


def test_without_it_the_four_gpu_pod_waits() -> None:
    sim = _run(["allocate"])
    assert "big" not in sim.where and not sim.follow
    assert sorted(list(sim.where.values()).count(n) for n in ("n0", "n1", "n2")) == [6, 7, 7]


def test_background_defragmentation_empties_a_node_in_the_simulator() -> None:
    # s0 and s16-s21 leave at 40 s, s22 at 80 s. Defragmentation looks at most every 30 s, at an event: at 40 s
    # (n2 still holds s22 and s23), then at 80 s.
    leave = {f"s{i}": 40.0 - i for i in (0, *range(16, 22))} | {"s22": 80.0 - 22}
    config = {"defragmentEverySeconds": 30}
    sim = Arrivals(_workload()[:-1], ["allocate", "consolidate"], leave, consolidation=config)
    sim.run()
    # s23 was alone on n2: it moved to n0, where s0 left; n2 is whole again.
    assert sim.follow == {"s23": "s23~m1"} and sim.where["s23~m1"] == "n0"
    assert "n2" not in sim.where.values() and sim.loop.action_state(Defragmenter).nodes_emptied == 1
