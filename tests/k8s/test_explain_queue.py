"""`gpusched explain` on queues: what a queue holds and borrows, and the pods of a queue that is not accepted."""

from __future__ import annotations

from scheduler.k8s.operator import Operator
from scheduler.k8s.serve import explain
from tests.k8s.test_operator import node, pod


async def test_a_gpu_only_queue_borrows_no_cpu_or_memory(leader: Operator) -> None:
    operator = leader
    operator.queue_event({"metadata": {"name": "team-a"}, "spec": {"guaranteed": {"nvidia.com/gpu": "4"}}})
    operator.node_event(node("gpu-0", gpus=8))
    operator.pod_event(pod("a", 2, cpu="2500m", labels={"gpusched.io/queue": "team-a"}))
    operator.listed()
    operator.loop.run_until_idle()
    text = explain.answer(operator, "queue/team-a")
    # It said "borrowed: cpu 2500m" while its GPU column was blank: 2 of its 4 GPUs borrow nothing.
    assert "holds: cpu 2500m, nvidia.com/gpu 2; borrowed: nothing" in text


async def test_a_pod_of_a_queue_that_is_not_accepted_is_told_why(leader: Operator) -> None:
    operator = leader
    operator.queue_event({"metadata": {"name": "orphan"}, "spec": {"parent": "ml"}})
    operator.queue_event({"metadata": {"name": "odd"}, "spec": {"guaranteed": {"nvidia.com/gpu": "1.5"}}})
    operator.node_event(node("gpu-0", gpus=8))
    operator.pod_event(pod("a", 1, labels={"gpusched.io/queue": "orphan"}))
    operator.pod_event(pod("b", 1, labels={"gpusched.io/queue": "odd"}))
    operator.listed()
    operator.loop.run_until_idle()
    text = explain.answer(operator, "a")
    assert "queue 'orphan' is not accepted: its parent queue 'ml' does not exist" in text
    assert "does not exist; waiting for it" not in text
    text = explain.answer(operator, "b")
    assert (
        "queue 'odd' is not accepted: field spec.guaranteed.nvidia.com/gpu: 1.5 is not a whole number of GPUs" in text
    )
