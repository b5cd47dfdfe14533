"""``gpusched trace``: the public Alibaba GPU trace, downloaded once into a cache directory.

The simulator reads the trace's CSV files (:mod:`scheduler.sim.trace`), which are not in this repository: they
are Alibaba's to publish, in the GitHub repository alibaba/clusterdata, folder ``cluster-trace-gpu-v2023/csv``.
This command fetches the ones asked for, keeps a file only once it loads (a proxy's error page or a Git LFS
pointer is refused, not cached), never downloads a file it already has, and prints the paths to give to
``gpusched simulate``. Any failure is one line naming the file or the address.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from scheduler.api.basics.errors import InvalidObject

BASE_URL = "https://raw.githubusercontent.com/alibaba/clusterdata/master/cluster-trace-gpu-v2023/csv"
SOURCE = "github.com/alibaba/clusterdata, folder cluster-trace-gpu-v2023/csv"

#: The node lists: every GPU node (the FGD paper's cluster), and every node (CPU-only ones too).
NODE_FILES = ("openb_node_list_gpu_node.csv", "openb_node_list_all_node.csv")
#: The pod lists by short name: ``default`` (8,152 pods) and variants with more CPU-only, shared-GPU, multi-GPU
#: or model-constrained pods.
POD_LISTS = (
    "default",
    "cpu0",
    "cpu037",
    "cpu050",
    "cpu072",
    "cpu100",
    "cpu200",
    "cpu235",
    "cpu250",
    "cpu300",
    "gpushare20",
    "gpushare40",
    "gpushare60",
    "gpushare80",
    "gpushare100",
    "gpuspec05",
    "gpuspec10",
    "gpuspec20",
    "gpuspec25",
    "gpuspec33",
    "multigpu20",
    "multigpu30",
    "multigpu40",
    "multigpu50",
)
FILES = (*NODE_FILES, *(f"openb_pod_list_{name}.csv" for name in POD_LISTS))
DEFAULT_FILES = ("openb_node_list_gpu_node.csv", "openb_pod_list_default.csv")
#: A trace file is under 1 MB; anything much larger is not one.
MAX_BYTES = 32 * 1024 * 1024

Opener = Callable[[str], IO[bytes]]


def cache_dir() -> Path:
    """Where the files go: ``$GPUSCHED_TRACE_DIR``, else ``$XDG_CACHE_HOME`` (or ``~/.cache``)
    ``/gpusched/traces/alibaba-gpu-v2023``."""
    if os.environ.get("GPUSCHED_TRACE_DIR"):
        return Path(os.environ["GPUSCHED_TRACE_DIR"])
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "gpusched" / "traces" / "alibaba-gpu-v2023"


def file_name(word: str) -> str:
    """A trace file's name from what a user types: ``default``, ``gpushare40``, ``gpu_node``, ``all_node``, or
    the file's own name (with or without ``.csv``)."""
    stem = word.strip().removesuffix(".csv")
    for candidate in (stem, f"openb_pod_list_{stem}", f"openb_node_list_{stem}"):
        if f"{candidate}.csv" in FILES:
            return f"{candidate}.csv"
    raise InvalidObject(
        f"{word!r} is not a file of the trace (pod lists: {', '.join(POD_LISTS)}; nodes: gpu_node, all_node)",
        obj="gpusched trace",
    )


def _open(url: str) -> IO[bytes]:
    response: IO[bytes] = urllib.request.urlopen(url, timeout=60)
    return response


def _check(path: Path, name: str) -> int:
    """Load the file as the simulator will; the number of rows."""
    from scheduler.sim import trace

    rows = trace.load_nodes(path) if name in NODE_FILES else trace.load_pods(path)
    return len(rows)


def fetch(
    names: Sequence[str],
    folder: Path,
    *,
    base_url: str = BASE_URL,
    opener: Opener = _open,
    say: Callable[[str], None] = lambda line: None,
) -> list[Path]:
    """The paths of ``names`` in ``folder``, downloading those not there yet (each checked before it is kept)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidObject(f"cannot create the folder: {exc.strerror}", obj=f"folder {folder}") from None
    paths = []
    for i, name in enumerate(names, 1):
        target = folder / name
        paths.append(target)
        if target.is_file():
            say(f"{name}: already in {folder}")
            continue
        url = f"{base_url.rstrip('/')}/{name}"
        say(f"{name}: downloading ({i} of {len(names)}) from {url}")
        partial = folder / f".{name}.part"
        try:
            with opener(url) as response:
                data = response.read(MAX_BYTES + 1)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
            raise InvalidObject(
                f"cannot download: {reason} (the files can also be copied by hand from {SOURCE} into {folder})",
                obj=f"url {url}",
            ) from None
        if len(data) > MAX_BYTES:
            raise InvalidObject(f"more than {MAX_BYTES // (1024 * 1024)} MB: not a trace file", obj=f"url {url}")
        try:
            partial.write_bytes(data)
            rows = _check(partial, name)
        except InvalidObject as exc:
            partial.unlink(missing_ok=True)
            raise InvalidObject(f"the download is not a trace file ({exc.reason})", obj=f"url {url}") from None
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise InvalidObject(f"cannot write: {exc.strerror}", obj=f"file {partial}") from None
        partial.replace(target)
        say(f"{name}: {len(data) / 1024:.0f} KB, {rows} {'nodes' if name in NODE_FILES else 'pods'}")
    return paths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help=(
            "files to fetch: a pod list by its short name (default, gpushare40, multigpu20, ...), a node list "
            "(gpu_node, all_node), or a file name (default: the GPU node list and the default pod list, 0.6 MB)"
        ),
    )
    parser.add_argument("--all", action="store_true", help=f"every file of the trace ({len(FILES)} files, 13 MB)")
    parser.add_argument(
        "--dir",
        metavar="DIR",
        help=f"where to keep the files (default: $GPUSCHED_TRACE_DIR, else {cache_dir()})",
    )
    parser.add_argument("--list", action="store_true", help="list the trace's files and which are here; fetch none")
    parser.add_argument(
        "--base-url",
        default=os.environ.get("GPUSCHED_TRACE_URL", BASE_URL),
        metavar="URL",
        help="where the files are ($GPUSCHED_TRACE_URL, for a mirror)",
    )


def run(args: argparse.Namespace) -> int:
    folder = Path(args.dir) if args.dir else cache_dir()
    if args.list:
        if args.files or args.all:
            raise InvalidObject("--list fetches nothing: give it no files and no --all", obj="gpusched trace")
        for name in FILES:
            print(f"{'here' if (folder / name).is_file() else '    '}  {name}")
        print(f"(folder {folder}; source {SOURCE})")
        return 0
    if args.all and args.files:
        raise InvalidObject("--all fetches every file: give it no file names", obj="gpusched trace")
    names = list(FILES) if args.all else list(dict.fromkeys(file_name(w) for w in args.files or DEFAULT_FILES))

    def say(line: str) -> None:
        sys.stderr.write(f"gpusched trace: {line}\n")
        sys.stderr.flush()

    paths = fetch(names, folder, base_url=args.base_url, say=say)
    for path in paths:
        print(path)
    nodes = folder / DEFAULT_FILES[0]
    pods = next((p for p in paths if p.name not in NODE_FILES), folder / DEFAULT_FILES[1])
    if nodes.is_file() and pods.is_file():
        print(f"try: gpusched simulate --nodes {nodes} --pods {pods} --policy fgd,default --seeds 42")
    return 0
