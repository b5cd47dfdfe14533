"""Trace loaders: good files load in file order with their values; a bad file names the file, the line and
the column, whatever is wrong with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.api.basics import resources
from scheduler.api.basics.errors import InvalidObject
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


# `gpusched trace`: the download helper, on files the test makes and serves from a file:// address (no network).

TRACE_NODES = ["n0,128000,1048576,8,T4", "n1,96000,786432,8,V100M32"]
TRACE_PODS = ["p0,1000,2048,1,500,,LS,Running,0,3600,0", "p1,8000,16384,8,1000,,BE,Running,60,,60"]


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    """A folder laid out like the trace's csv folder, with the GPU node list and two pod lists."""
    source = tmp_path / "mirror"
    source.mkdir()
    write(source / "openb_node_list_gpu_node.csv", NODE_HEADER, TRACE_NODES)
    write(source / "openb_pod_list_default.csv", POD_HEADER, TRACE_PODS)
    write(source / "openb_pod_list_multigpu20.csv", MULTIGPU_HEADER, ["m0,8000,16384,2,1000"])
    return source


def _trace(mirror: Path, cache: Path, *words: str) -> int:
    from scheduler import cli

    return cli.main(["trace", "--dir", str(cache), "--base-url", mirror.as_uri(), *words])


def _one_error(err: str) -> str:
    """The one error line of a failed command (progress lines, starting ``gpusched trace:``, may come first)."""
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.startswith("gpusched: ")]
    assert err.endswith(line + "\n")
    return line


def test_trace_fetches_the_default_files_checks_them_and_prints_their_paths(
    mirror: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache" / "alibaba"
    assert _trace(mirror, cache) == 0
    out = capsys.readouterr()
    nodes, pods = cache / "openb_node_list_gpu_node.csv", cache / "openb_pod_list_default.csv"
    assert out.out.splitlines()[:2] == [str(nodes), str(pods)]
    assert f"gpusched simulate --nodes {nodes} --pods {pods}" in out.out
    assert "2 nodes" in out.err and "2 pods" in out.err
    assert [n.name for n in trace.load_nodes(nodes)] == ["n0", "n1"]
    assert [p.num_gpu for p in trace.load_pods(pods)] == [1, 8]
    assert sorted(p.name for p in cache.iterdir()) == sorted([nodes.name, pods.name])  # no partial files left


def test_trace_downloads_a_file_only_once(mirror: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "cache"
    assert _trace(mirror, cache, "multigpu20", "gpu_node") == 0
    (mirror / "openb_pod_list_multigpu20.csv").unlink()  # a second download would now fail
    assert _trace(mirror, cache, "openb_pod_list_multigpu20.csv") == 0
    assert "already in" in capsys.readouterr().err
    assert [p.num_gpu for p in trace.load_pods(cache / "openb_pod_list_multigpu20.csv")] == [2]


def test_trace_refuses_a_download_that_is_not_a_trace_file(
    mirror: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (mirror / "openb_pod_list_default.csv").write_text("<html><body>rate limited</body></html>\n")
    cache = tmp_path / "cache"
    assert _trace(mirror, cache, "default") == 2
    err = _one_error(capsys.readouterr().err)
    assert "openb_pod_list_default.csv: the download is not a trace file (missing columns" in err
    assert list(cache.iterdir()) == []  # nothing kept, so the next run tries again


def test_trace_names_the_address_it_cannot_reach(
    mirror: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _trace(mirror, tmp_path / "cache", "gpushare40") == 2
    err = _one_error(capsys.readouterr().err)
    assert f"url {mirror.as_uri()}/openb_pod_list_gpushare40.csv: cannot download" in err
    assert "github.com/alibaba/clusterdata" in err


@pytest.mark.parametrize(
    ("words", "says"),
    [
        (["nope"], "'nope' is not a file of the trace"),
        (["--all", "default"], "--all fetches every file"),
        (["--list", "default"], "--list fetches nothing"),
    ],
)
def test_trace_refuses_bad_words_in_one_line(
    words: list[str], says: str, mirror: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _trace(mirror, tmp_path / "cache", *words) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err


def test_trace_list_says_which_files_are_here(mirror: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from scheduler.sim import fetch

    cache = tmp_path / "cache"
    assert _trace(mirror, cache, "default") == 0
    capsys.readouterr()
    assert _trace(mirror, cache, "--list") == 0
    lines = capsys.readouterr().out.splitlines()
    assert "here  openb_pod_list_default.csv" in lines
    assert "      openb_node_list_gpu_node.csv" in lines
    assert len(lines) == len(fetch.FILES) + 1


def test_the_cache_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from scheduler.sim import fetch

    monkeypatch.delenv("GPUSCHED_TRACE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert fetch.cache_dir() == tmp_path / "gpusched" / "traces" / "alibaba-gpu-v2023"
    monkeypatch.setenv("GPUSCHED_TRACE_DIR", str(tmp_path / "mine"))
    assert fetch.cache_dir() == tmp_path / "mine"
