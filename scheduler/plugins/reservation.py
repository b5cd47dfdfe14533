"""Filter: keep other jobs off the nodes reserved for the job at the head of the fairest queue.

The loop reserves nodes for a large job that does not fit yet (so that a stream of small jobs cannot hold it
off forever) and passes the reserved slots in the cycle state; every other job treats them as unavailable and
backfills elsewhere. The reserved job's own cycles carry no reservation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduler.framework import args as plugin_args
from scheduler.framework.interface import I8, RESERVED_SLOTS, CycleState
from scheduler.kernels import layout


class Reservation:
    name = "reservation"

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ())

    def filter(self, state: CycleState, reasons: I8) -> None:
        reserved: np.ndarray | None = state.data.get(RESERVED_SLOTS)
        if reserved is None:
            return
        size = min(reserved.shape[0], reasons.shape[0])
        block = reserved[:size] & (reasons[:size] == layout.FIT)
        reasons[:size][block] = layout.RESERVED
