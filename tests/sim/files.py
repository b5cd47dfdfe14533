"""Small files in the Alibaba GPU trace format, for the simulator's tests to load."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
)
MULTIGPU_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli"


def write(path: Path, header: str, rows: Sequence[str]) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path
