"""``gpusched simulate --dashboard FILE.html``: the dashboard's cluster map of each policy's cluster at the end of
a comparison, side by side on one static page, so that a policy comparison is looked at as a live cluster is.

The maps are the operator's (``scheduler.dashboard.cluster_map``: whole, shared, idle and stranded GPUs by the FGD
measure, against the trace's typical pods); the page has no script and needs no server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.cache.state import Cache
from scheduler.dashboard import cluster_map, pages
from scheduler.framework import typical


def page(ends: Mapping[str, tuple[Cache, Sequence[typical.Shape]]], *, title: str) -> str:
    """One page with a cluster map per policy (the policy's name heads it)."""
    maps = [
        (name, cluster_map.build(cache, queue_of=lambda pod: pod.queue or "default", shapes=shapes))
        for name, (cache, shapes) in ends.items()
    ]
    return pages.comparison(maps, title=f"simulation of {title}")
