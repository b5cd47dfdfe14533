"""Trace loaders: good files load in file order with their values; a bad file names the file, the line and
the column, whatever is wrong with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.api import resources
from scheduler.api.errors import InvalidObject
from scheduler.sim import trace
from scheduler.sim.trace import NodeSpec, PodSpec
from tests.sim.files import MULTIGPU_HEADER, NODE_HEADER, POD_HEADER, write


def test_nodes_load_in_file_order_not_name_order(tmp_path: Path) -> None:
    path = write(
        tmp_path / "nodes.csv",
        NODE_HEADER,
        ["node-b,64000,262144,2,P100", "node-a,96000,786432,8,V100M32", "cpu-0,32000,131072,0,"],
    )
    assert trace.load_nodes(path) == [
        NodeSpec("node-b", 64000, 262144, 2, "P100"),
        NodeSpec("node-a", 96000, 786432, 8, "V100M32"),
        NodeSpec("cpu-0", 32000, 131072, 0, ""),
    ]


def test_a_node_becomes_the_caches_node_with_its_model(tmp_path: Path) -> None:
    (node,) = trace.load_nodes(write(tmp_path / "nodes.csv", NODE_HEADER, ["n0,64000,1024,2,T4"]))
    info = node.info()
    assert info.gpus == 2
    assert info.gpu_model == "T4"
    assert info.allocatable[resources.CPU] == 64000
    assert info.allocatable[resources.MEMORY] == 1024 * 2**20


def test_pods_of_the_full_format_load_in_file_order_with_times(tmp_path: Path) -> None:
    path = write(
        tmp_path / "pods.csv",
        POD_HEADER,
        [
            "pod-2,12000,16384,1,1000,,LS,Running,0,12537496,0",
            "pod-1,6000,12288,1,460,V100M16|V100M32,BE,Running,427061,12902960,427062",
            "pod-0,4000,8192,0,0,,Burstable,Pending,500,,",
            "pod-3,32000,65536,4,1000,G2,LS,Succeeded,600.5,900,610",
        ],
    )
    assert trace.load_pods(path) == [
        PodSpec("pod-2", 12000, 16384, 1, 1000, (), 0.0, 12537496.0, 0.0),
        PodSpec("pod-1", 6000, 12288, 1, 460, ("V100M16", "V100M32"), 427061.0, 12902960.0, 427062.0),
        PodSpec("pod-0", 4000, 8192, 0, 0, (), 500.0, None, None),
        PodSpec("pod-3", 32000, 65536, 4, 1000, ("G2",), 600.5, 900.0, 610.0),
    ]


def test_pods_of_the_five_column_multigpu_format_load_without_times(tmp_path: Path) -> None:
    path = write(
        tmp_path / "multigpu.csv",
        MULTIGPU_HEADER,
        ["pod-0,12000,16384,1,1000", "pod-1,6000,12288,1,460", "pod-2,64000,262144,8,1000", "pod-3,2000,4096,0,0"],
    )
    pods = trace.load_pods(path)
    assert [(p.name, p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli) for p in pods] == [
        ("pod-0", 12000, 16384, 1, 1000),
        ("pod-1", 6000, 12288, 1, 460),
        ("pod-2", 64000, 262144, 8, 1000),
        ("pod-3", 2000, 4096, 0, 0),
    ]
    assert all(p.gpu_spec == () and p.creation is None and p.deletion is None for p in pods)
    assert [p.gpu_total for p in pods] == [1000, 460, 8000, 0]


def test_a_repeated_model_in_gpu_spec_counts_once_in_order(tmp_path: Path) -> None:
    (pod,) = trace.load_pods(
        write(tmp_path / "pods.csv", POD_HEADER, ["p,1000,1024,1,500,V100M16|V100M32|V100M32,LS,Running,0,,"])
    )
    assert pod.gpu_spec == ("V100M16", "V100M32")
    assert pod.shape == (1000.0, 500.0, 1, ("V100M16", "V100M32"))
    assert pod.request().gpu.models == ("V100M16", "V100M32")


def _error(load: object, path: Path) -> InvalidObject:
    with pytest.raises(InvalidObject) as caught:
        load(path)  # type: ignore[operator]
    return caught.value


@pytest.mark.parametrize(
    ("rows", "line", "column", "says"),
    [
        (["ok,1000,1024,0,0", "bad,1.5,1024,0,0"], 3, "cpu_milli", "'1.5' is not an integer"),
        (["bad,x,1024,0,0"], 2, "cpu_milli", "'x' is not an integer"),
        (["bad,,1024,0,0"], 2, "cpu_milli", "'' is not an integer"),
        (["bad,1000,-1,0,0"], 2, "memory_mib", "-1 is outside >= 0"),
        (["bad,-1000,1024,0,0"], 2, "cpu_milli", "-1000 is outside >= 0"),
        (["bad,1000,1024,-1,1000"], 2, "num_gpu", "-1 is outside 0..64"),
        (["bad,1000,1024,1,1001"], 2, "gpu_milli", "1001 is outside 0..1000"),
        (["bad,1000,1024,0,500"], 2, "gpu_milli", "gpu_milli 500 without num_gpu"),
        (["bad,1000,1024,1,0"], 2, "gpu_milli", "a GPU pod needs gpu_milli"),
        (["bad,1000,1024,2,500"], 2, "gpu_milli", "multi-GPU pod takes whole GPUs"),
        (["bad,1000,1024,1,500,,LS,Running,-5,,"], 2, "creation_time", "-5.0 is negative"),
        (["bad,1000,1024,1,500,,LS,Running,0,soon,"], 2, "deletion_time", "'soon' is not a time"),
        ([",1000,1024,0,0"], 2, "name", "empty pod name"),
    ],
)
def test_a_bad_pod_row_names_the_file_the_line_and_the_column(
    tmp_path: Path, rows: list[str], line: int, column: str, says: str
) -> None:
    path = write(tmp_path / "pods.csv", POD_HEADER, rows)
    error = _error(trace.load_pods, path)
    assert error.obj == f"file {path} line {line}"
    assert error.field == column
    assert says in error.reason
    assert f"file {path} line {line} field {column}: " in str(error)


@pytest.mark.parametrize(
    ("rows", "line", "column", "says"),
    [
        (["a,64000,1024,2,T4", "a,64000,1024,2,T4"], 3, "sn", "node 'a' appears twice"),
        (["a,64000,1024,-2,T4"], 2, "gpu", "-2 is outside 0..64"),
        (["a,64k,1024,2,T4"], 2, "cpu_milli", "'64k' is not an integer"),
        (["a,64000,-1,2,T4"], 2, "memory_mib", "-1 is outside >= 0"),
    ],
)
def test_a_bad_node_row_names_the_file_the_line_and_the_column(
    tmp_path: Path, rows: list[str], line: int, column: str, says: str
) -> None:
    path = write(tmp_path / "nodes.csv", NODE_HEADER, rows)
    error = _error(trace.load_nodes, path)
    assert (error.obj, error.field) == (f"file {path} line {line}", column)
    assert says in error.reason


def test_more_fields_than_the_header_names_is_refused_at_that_line(tmp_path: Path) -> None:
    path = write(tmp_path / "multigpu.csv", MULTIGPU_HEADER, ["ok,1000,1024,0,0", "bad,1000,1024,1,500,V100M16"])
    error = _error(trace.load_pods, path)
    assert error.obj == f"file {path} line 3"
    assert "more fields than the header names" in str(error)


@pytest.mark.parametrize(
    ("load", "header", "missing"),
    [
        (trace.load_nodes, "sn,cpu_milli,gpu,model", "memory_mib"),
        (trace.load_pods, "name,cpu_milli,memory_mib,num_gpu", "gpu_milli"),
        (trace.load_pods, "name,cpu,memory_mib,num_gpu,gpu_milli", "cpu_milli"),
    ],
)
def test_a_missing_column_in_the_header_is_named(tmp_path: Path, load: object, header: str, missing: str) -> None:
    path = write(tmp_path / "file.csv", header, ["x,1,2,3"])
    error = _error(load, path)
    assert error.obj == f"file {path} line 1"
    assert f"missing columns ['{missing}']" in error.reason


@pytest.mark.parametrize("load", [trace.load_nodes, trace.load_pods])
def test_an_empty_file_is_refused_naming_it(tmp_path: Path, load: object) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("")
    error = _error(load, path)
    assert error.obj == f"file {path} line 1"
    assert "missing columns" in error.reason


@pytest.mark.parametrize(
    ("load", "header", "what"), [(trace.load_nodes, NODE_HEADER, "no nodes"), (trace.load_pods, POD_HEADER, "no pods")]
)
def test_a_header_without_rows_is_refused_naming_the_file(tmp_path: Path, load: object, header: str, what: str) -> None:
    path = write(tmp_path / "header-only.csv", header, [])
    error = _error(load, path)
    assert error.obj == f"file {path}"
    assert error.reason == what


@pytest.mark.parametrize("load", [trace.load_nodes, trace.load_pods])
def test_an_unreadable_path_is_refused_naming_it(tmp_path: Path, load: object) -> None:
    missing = tmp_path / "no-such.csv"
    error = _error(load, missing)
    assert error.obj == f"file {missing}"
    assert "cannot read" in error.reason and "No such file" in error.reason
    error = _error(load, tmp_path)  # a directory
    assert error.obj == f"file {tmp_path}"
    assert "cannot read" in error.reason


def test_a_file_that_is_not_utf8_text_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes(f"{NODE_HEADER}\nn\xe9ud-0,64000,1024,2,T4\n".encode("latin-1"))
    error = _error(trace.load_nodes, path)
    assert error.obj == f"file {path}"
    assert "not UTF-8" in error.reason


def test_a_row_the_csv_reader_cannot_take_is_refused_at_its_line(tmp_path: Path) -> None:
    path = write(tmp_path / "nodes.csv", NODE_HEADER, ["a,64000,1024,2,T4", "b,64000,1024,2," + "x" * 200_000])
    error = _error(trace.load_nodes, path)
    assert error.obj == f"file {path} line 3"
    assert "not CSV" in error.reason
