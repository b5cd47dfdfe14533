"""CPU to decode and parse a listing of running pods, as ``gpusched run``'s first listing does, with and without
``gc.freeze()`` after the operator's imports (what scheduler/k8s/run.py does once the kernels are warm).

Python's collector makes a full pass each time the objects it tracks have grown by a quarter since the last one,
and a full pass walks every object, the million or so that the imports made included (numba, numpy, the generated
API models). A listing grows the heap fast, so the passes come often and each walks the imports again; frozen,
they are skipped. Each mode runs in its own process (a freeze cannot be undone for the frozen objects), the modes
in turns, ``--runs`` times; the pods are the shape of benchmarks/startup.py's bound pods with one managedFields
entry, in pages of 500 as the informer asks for them.

Run: ``.venv/bin/python -m benchmarks.listing_gc [--pods 10000] [--runs 3]``
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from typing import Any

PAGE = 500


def _pod(i: int) -> dict[str, Any]:
    fields = {"f:spec": {"f:containers": {'k:{"name":"main"}': {".": {}, "f:image": {}, "f:resources": {}}}}}
    return {
        "metadata": {
            "name": f"p-{i:05d}",
            "namespace": "bench",
            "uid": f"uid-{i:08x}-2fa1-11d2-883f",
            "resourceVersion": str(100_000 + i),
            "labels": {"app": "bench"},
            "managedFields": [
                {
                    "manager": "python",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-12-06T10:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": fields,
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "pause",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}},
                }
            ],
            "nodeName": f"node-{i % 1000:04d}",
            "schedulerName": "gpusched",
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def one(*, pods: int, freeze: bool) -> float:
    """CPU seconds to decode and parse ``pods`` pods in this process, after the operator's imports."""
    import scheduler.k8s.run  # noqa: F401  (the operator's imports, as at its start)
    from scheduler.api.objects import pod as api_pod

    pages = [
        json.dumps({"items": [_pod(i) for i in range(start, min(start + PAGE, pods))]}).encode()
        for start in range(0, pods, PAGE)
    ]
    if freeze:
        gc.freeze()
    kept = []
    started = time.process_time()
    for raw in pages:
        kept.extend(api_pod.parse_pod(item) for item in json.loads(raw)["items"])
    return time.process_time() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--one", choices=("plain", "frozen"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(one(pods=args.pods, freeze=args.one == "frozen"))
        return 0
    seconds: dict[str, list[float]] = {"plain": [], "frozen": []}
    for _ in range(args.runs):
        for mode, got in seconds.items():
            out = subprocess.run(
                [sys.executable, "-m", "benchmarks.listing_gc", "--pods", str(args.pods), "--one", mode],
                check=True,
                capture_output=True,
                text=True,
            )
            got.append(float(out.stdout.strip().splitlines()[-1]))
    for mode, got in seconds.items():
        runs = ", ".join(f"{s:.3f}" for s in got)
        print(f"{mode:>6}: median {statistics.median(got):.3f} s of CPU for {args.pods} pods (runs {runs})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
