"""Nodes: allocatable resources, GPU devices with their memory and model; odd GPU labels do not cost the node."""

from __future__ import annotations

import pytest

from scheduler.api.basics import resources
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.objects import node as api_node
from scheduler.api.objects.selectors import Taint
from tests.api import objects

MIB = 2**20


def test_gpus_come_from_allocatable_and_memory_from_the_label_in_mib() -> None:
    node = api_node.parse_node(objects.node("n1", gpus=8, gpu_memory_mib="81920", product="NVIDIA-A100-SXM4-80GB"))
    assert node.gpus == 8
    assert node.gpu_memory == 81920 * MIB
    assert node.gpu_model == "NVIDIA-A100-SXM4-80GB"
    assert node.allocatable == {"cpu": 32000, "memory": 256 * 2**30, "pods": 110}
    assert resources.GPU not in node.allocatable
    assert node.problems == ()


def test_capacity_stands_in_for_missing_allocatable() -> None:
    raw = objects.node("n1", gpus=2)
    del raw["status"]["allocatable"]
    assert api_node.parse_node(raw).gpus == 2


@pytest.mark.parametrize("label", ["80GB", "-1", "1.5", ""])
def test_an_odd_memory_label_leaves_the_node_usable_and_is_recorded(label: str) -> None:
    node = api_node.parse_node(objects.node("n1", gpus=4, gpu_memory_mib=label))
    assert node.gpus == 4
    assert node.gpu_memory == 0  # unknown
    (problem,) = node.problems
    assert problem.field == "metadata.labels[nvidia.com/gpu.memory]"
    assert problem.obj == "node n1"


def test_taints_and_cordon() -> None:
    raw = objects.node("n1", taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}], unschedulable=True)
    node = api_node.parse_node(raw)
    assert node.taints == (Taint("dedicated", "ml", "NoSchedule"),)
    assert node.unschedulable


def test_a_bad_allocatable_quantity_names_the_node_and_field() -> None:
    with pytest.raises(InvalidObject) as err:
        api_node.parse_node(objects.node("n1", cpu="many"))
    assert (err.value.obj, err.value.field) == ("node n1", "status.allocatable.cpu")


def test_a_node_needs_a_name() -> None:
    with pytest.raises(InvalidObject) as err:
        api_node.parse_node({"metadata": {}, "status": {}})
    assert err.value.field == "metadata.name"


@pytest.mark.parametrize(
    ("allowed", "product", "matches"),
    [
        ("A100", "NVIDIA-A100-SXM4-80GB", True),
        ("A100-SXM4", "NVIDIA-A100-SXM4-80GB", True),
        ("NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB", True),
        ("A10", "NVIDIA-A100-SXM4-80GB", False),
        ("A100", "NVIDIA-A10", False),
        ("H100", "NVIDIA-H100-80GB-HBM3", True),
        ("SXM4-80", "NVIDIA-A100-SXM4-80GB", False),
        ("A100", "", False),
    ],
)
def test_model_matches_whole_dash_separated_parts(allowed: str, product: str, matches: bool) -> None:
    assert resources.model_matches(allowed, product) is matches
