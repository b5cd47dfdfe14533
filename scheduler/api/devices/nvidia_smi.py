"""The GPUs of a node read from ``nvidia-smi topo -m``: what ``gpusched node-topology --from-nvidia-smi`` reads.

A separate module from ``scheduler.api.devices.gputopo`` because it is a parser of a tool's text output, with its own
checks and error positions (the line and column of the matrix), while ``gputopo`` owns the annotation's schema and
the device choice on it. The result is a :class:`~scheduler.api.devices.gputopo.GpuTopology`, so it is checked by the
same rules as the annotation.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.devices.gputopo import Gpu, GpuTopology, Link

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_GPU_NAME = re.compile(r"GPU(0|[1-9][0-9]*)")
_NVLINK = re.compile(r"NV([1-9][0-9]*)")
#: Trailing columns of the matrix, by the names nvidia-smi prints (older drivers print only the first).
_AFFINITY = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
#: Matrix entries other than ``NV#`` and ``X``. ``SOC`` is what drivers before R384 printed for ``SYS``.
_ENTRIES = {"PIX": Link.PCIE, "PXB": Link.PCIE, "PHB": Link.NUMA, "NODE": Link.NUMA, "SYS": Link.SYSTEM}
_ENTRIES_OLD = {"SOC": Link.SYSTEM}


def read(text: str, *, source: str = "nvidia-smi topo -m") -> GpuTopology:
    """Read the output of ``nvidia-smi topo -m``.

    GPU NUMA nodes come from the ``NUMA Affinity`` column (unknown when it says ``N/A`` or names several nodes).
    GPUs joined by ``PIX`` or ``PXB``, directly or through a NIC both are ``PIX``/``PXB`` to (NVLinked GPUs show
    ``NV#`` instead of their PCIe path), get a common PCIe switch id, ``pcie0``, ``pcie1``, ... in the order of
    their lowest GPU index: nvidia-smi does not name the switch. NIC rows, the legends, blank lines and colour codes
    are skipped. ``source`` names the input in errors, which also give the line number. A GPU row is checked
    whole: its number of fields, each entry (``X`` on the diagonal only), and that it agrees with the other
    direction of each pair and with the NUMA Affinity of both GPUs.
    """
    lines = [_ANSI.sub("", line).replace("\u00a0", " ") for line in text.splitlines()]
    header_at = next(
        (n for n, line in enumerate(lines) if line.split()[:1] == ["GPU0"] and "X" not in line.split()), None
    )
    if header_at is None:
        raise InvalidObject("no header line starting with GPU0: is this the output of nvidia-smi topo -m?", obj=source)
    header = lines[header_at]
    for name in _AFFINITY:
        header = header.replace(name, name.replace(" ", "\x00"))
    columns = [token.replace("\x00", " ") for token in header.split()]
    devices = list(itertools.takewhile(lambda column: column not in _AFFINITY, columns))
    affinity = columns[len(devices) :]
    header_obj = f"{source} line {header_at + 1}"
    for column in affinity:
        if column not in _AFFINITY:
            raise InvalidObject(f"unexpected column {column!r} after {', '.join(_AFFINITY)}", obj=header_obj)
    if len(set(devices)) != len(devices) or len(set(affinity)) != len(affinity):
        raise InvalidObject("a column appears twice", obj=header_obj)
    gpu_columns = {column: int(m.group(1)) for column in devices if (m := _GPU_NAME.fullmatch(column))}
    if sorted(gpu_columns.values()) != list(range(len(gpu_columns))):
        raise InvalidObject(f"GPU columns must be GPU0..GPU{len(gpu_columns) - 1}", obj=header_obj)
    n = len(gpu_columns)

    entries: dict[int, list[str]] = {}
    #: For each NIC (or other non-GPU column), the GPUs under the same PCIe switch as it.
    near_nic: dict[str, list[int]] = {}
    row_lines: dict[int, int] = {}
    numa = [-1] * n
    for number, line in enumerate(lines[header_at + 1 :], start=header_at + 2):
        tokens = line.split()
        if not tokens:
            continue
        row_obj = f"{source} line {number}"
        if tokens[0] not in devices:
            if _GPU_NAME.fullmatch(tokens[0]):
                raise InvalidObject(f"a row for {tokens[0]}, which has no column", obj=row_obj)
            continue  # a legend line, a NIC legend, text around the matrix
        if tokens[0] not in gpu_columns:
            continue  # a NIC row
        gpu = gpu_columns[tokens[0]]
        if gpu in entries:
            raise InvalidObject(f"a second row for {tokens[0]} (the first is on line {row_lines[gpu]})", obj=row_obj)
        expected = 1 + len(devices) + len(affinity)
        if len(tokens) != expected:
            raise InvalidObject(
                f"{len(tokens)} fields; expected {expected}: the GPU, {len(devices)} matrix entries and "
                f"{len(affinity)} affinity columns",
                obj=row_obj,
            )
        for column, entry in zip(devices, tokens[1 : 1 + len(devices)], strict=True):
            diagonal = column == tokens[0]
            if (entry == "X") != diagonal:
                what = "X must be on the diagonal only" if entry == "X" else "the diagonal must be X"
                raise InvalidObject(f"{entry!r}: {what}", obj=row_obj, field=column)
            if not diagonal and not (_NVLINK.fullmatch(entry) or entry in _ENTRIES or entry in _ENTRIES_OLD):
                raise InvalidObject(
                    f"unknown entry {entry!r}; expected NV#, {', '.join(_ENTRIES)}", obj=row_obj, field=column
                )
        entries[gpu] = [tokens[1 + devices.index(f"GPU{peer}")] for peer in range(n)]
        for column, entry in zip(devices, tokens[1 : 1 + len(devices)], strict=True):
            if column not in gpu_columns and _ENTRIES.get(entry) is Link.PCIE:
                near_nic.setdefault(column, []).append(gpu)
        row_lines[gpu] = number
        if "NUMA Affinity" in affinity:
            value = tokens[1 + len(devices) + affinity.index("NUMA Affinity")]
            if re.fullmatch(r"0|[1-9][0-9]*", value):
                numa[gpu] = int(value)
            elif value != "N/A" and not re.fullmatch(r"[0-9]+([-,][0-9]+)*", value):
                raise InvalidObject(
                    f"{value!r} is not a NUMA node, a list of them, or N/A", obj=row_obj, field="NUMA Affinity"
                )
    missing = [f"GPU{gpu}" for gpu in range(n) if gpu not in entries]
    if missing:
        raise InvalidObject(f"no row for {', '.join(missing)}", obj=source)

    pcie_pairs: list[tuple[int, int]] = []
    nvlinks: list[dict[int, int]] = [{} for _ in range(n)]
    for a, b in itertools.combinations(range(n), 2):
        there, back = entries[a][b], entries[b][a]
        if _category(there) != _category(back):
            raise InvalidObject(
                f"GPU{a} -> GPU{b} is {there} but GPU{b} -> GPU{a} is {back}",
                obj=f"{source} line {row_lines[b]}",
                field=f"GPU{a}",
            )
        if m := _NVLINK.fullmatch(there):
            nvlinks[a][b] = nvlinks[b][a] = int(m.group(1))
            continue
        link = _ENTRIES.get(there) or _ENTRIES_OLD[there]
        if link is Link.PCIE:
            pcie_pairs.append((a, b))
        same_numa = numa[a] == numa[b]
        if numa[a] >= 0 and numa[b] >= 0 and same_numa != (link is not Link.SYSTEM):
            raise InvalidObject(
                f"GPU{a} and GPU{b} are {there} apart but their NUMA Affinity is {numa[a]} and {numa[b]}",
                obj=f"{source} line {row_lines[b]}",
                field=f"GPU{a}",
            )
    # GPUs joined by NVLink show NV# instead of their PCIe path; a NIC under the same switch still reveals it.
    for gpus in near_nic.values():
        pcie_pairs.extend(itertools.pairwise(gpus))
    switch = _pcie_switches(n, pcie_pairs, entries, source, row_lines)
    return GpuTopology(tuple(Gpu(i, numa[i], switch[i], tuple(sorted(nvlinks[i].items()))) for i in range(n)))


def _category(entry: str) -> str:
    """What must agree between the two directions of a pair: the NVLink count, or the PCIe path."""
    return entry if _NVLINK.fullmatch(entry) else _ENTRIES.get(entry, _ENTRIES_OLD.get(entry, Link.SYSTEM)).name


def _pcie_switches(
    n: int,
    pairs: Sequence[tuple[int, int]],
    entries: Mapping[int, Sequence[str]],
    source: str,
    lines: Mapping[int, int],
) -> list[str]:
    """A switch id for each GPU that shares a switch (PIX/PXB, directly or through a NIC) with another GPU, ""
    for the rest. Every pair of GPUs under one switch must be PIX, PXB or NV# apart."""
    root = list(range(n))

    def find(a: int) -> int:
        while root[a] != a:
            root[a] = root[root[a]]
            a = root[a]
        return a

    for a, b in pairs:
        root[find(a)] = find(b)
    groups: dict[int, list[int]] = {}
    for gpu in range(n):
        groups.setdefault(find(gpu), []).append(gpu)
    switch = [""] * n
    for number, members in enumerate(sorted(group for group in groups.values() if len(group) > 1)):
        for a, b in itertools.combinations(members, 2):
            entry = entries[a][b]
            if not (_NVLINK.fullmatch(entry) or _ENTRIES.get(entry) is Link.PCIE):
                raise InvalidObject(
                    f"GPU{a} and GPU{b} share a PCIe switch through other devices, but are {entry} apart",
                    obj=f"{source} line {lines[b]}",
                    field=f"GPU{a}",
                )
        for gpu in members:
            switch[gpu] = f"pcie{number}"
    return switch
