"""Score: keep a gang on few nodes. During a gang's cycle the core passes the slots its members already took
(``CycleContext.gang_slots``); a node there scores 100 (more with more members on it), others 0."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduler.framework import args as plugin_args
from scheduler.framework.interface import F64, I64, CycleState


class Gang:
    name = "gang"

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ())

    def score(self, state: CycleState, nodes: I64, out: F64) -> bool:
        taken: Mapping[int, int] | None = state.context.gang_slots
        if not taken:
            return False
        # Vectorised over the feasible nodes (thousands) against the few nodes the gang holds: a lookup per node
        # in Python was a sixth of a gang's cycle at 5,000 nodes.
        rows = np.fromiter(taken.keys(), dtype=np.int64, count=len(taken))
        members = np.fromiter(taken.values(), dtype=np.float64, count=len(taken))
        order = np.argsort(rows)
        rows, members = rows[order], members[order]
        at = np.minimum(np.searchsorted(rows, nodes), rows.shape[0] - 1)
        counts = np.where(rows[at] == nodes, members[at], 0.0)
        out[:] = np.where(counts > 0, 50.0 + 50.0 * counts / members.max(), 0.0)
        return True
