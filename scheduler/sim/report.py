"""Results of a comparison: the terminal table, the JSON file and the plots."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def table(results: Mapping[str, Mapping[str, Any]], ratio_key: str) -> str:
    """One row per policy: allocation at 100% and RATIO arrived (mean ± std), fragmentation at 90%, and more."""
    head = (
        f"{'policy':<16}{'alloc@100%':>12}{'alloc@' + ratio_key + '%':>18}{'frag@90%':>10}{'failed':>9}"
        f"{'free nodes':>12}{'stranded':>10}{'decisions/s':>13}{'wall s':>9}"
    )
    lines = [head, "-" * len(head)]
    for name, r in results.items():
        at = r["alloc_at"]
        std = r["alloc_std_at"].get(ratio_key, math.nan)
        lines.append(
            f"{name:<16}{at.get('100', math.nan):>11.2f}%{at.get(ratio_key, math.nan):>11.2f}% ±{std:>4.2f}"
            f"{r['frag_at'].get('90', math.nan):>9.2f}%{r['failed_pods']:>9.0f}{r['fully_free_gpu_nodes']:>12.0f}"
            f"{r['stranded_nodes']:>10.0f}{r['decisions_per_s']:>13.0f}{r['wall_s']:>9.2f}"
        )
    return "\n".join(lines)


def replay_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    head = (
        f"{'policy':<16}{'time-weighted alloc':>21}{'pending mean s':>16}{'pending p99 s':>15}{'never placed':>14}"
        f"{'decisions/s':>13}{'wall s':>9}"
    )
    lines = [head, "-" * len(head)]
    for name, r in results.items():
        lines.append(
            f"{name:<16}{r['time_weighted_alloc']:>20.2f}%{r['pending_mean_s']:>16.0f}{r['pending_p99_s']:>15.0f}"
            f"{r['failed_pods']:>14.0f}{r['decisions_per_s']:>13.0f}{r['wall_s']:>9.2f}"
        )
    return "\n".join(lines)


def gang_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    head = (
        f"{'policy':<16}{'partial gangs':>14}{'deadlocks':>11}{'wait mean s':>13}{'wait p99 s':>12}"
        f"{'GPU alloc':>11}{'placed':>8}{'waiting':>9}{'wall s':>9}"
    )
    lines = [head, "-" * len(head)]
    for name, r in results.items():
        lines.append(
            f"{name:<16}{r['partial_gangs']:>14}{r['deadlocks']:>11}{r['gang_wait_mean_s']:>13.0f}"
            f"{r['gang_wait_p99_s']:>12.0f}{r['gpu_allocation']:>10.2f}%{r['placed_gangs']:>8.0f}"
            f"{r['waiting_gangs_at_end']:>9.0f}{r['wall_s']:>9.2f}"
        )
    return "\n".join(lines)


def _finite(value: Any) -> Any:
    """NaN and infinities become null: JSON has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def tenant_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    lines = []
    for name, r in results.items():
        lines.append(
            f"{name}: Jain index {r['jain_index']:.3f}, GPU allocation {r['gpu_allocation']:.2f}%, "
            f"reclaim latency {r['reclaim_latency_s']:.0f}s, preempted {r['preempted_gpu_hours']:.1f} GPU-hours "
            f"({r['preemptions']:g} jobs), partial gangs {r['partial_gangs']}"
        )
        lines.append(f"  {'queue':<10}{'weight':>8}{'GPUs held':>11}{'fair share':>12}{'held/fair':>11}")
        for queue, q in r["queues"].items():
            lines.append(
                f"  {queue:<10}{q['weight']:>8g}{q['gpus_held']:>11.1f}{q['fair_share_gpus']:>12.1f}"
                f"{q['share_over_fair']:>11.2f}"
            )
    return "\n".join(lines)


def write_json(path: str | Path, payload: Mapping[str, Any]) -> None:
    Path(path).write_text(json.dumps(_finite(payload), indent=2, allow_nan=False) + "\n")


def plot(path: str | Path, results: Mapping[str, Mapping[str, Any]], *, replay: bool = False) -> None:
    """Allocation curve per policy (vs arrived demand, or vs time in a replay) and fragmentation at 90%."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [2, 1]})
    names = list(results)
    for name in names:
        curve = results[name]["curve"]
        xs = [float(x) for x in curve]
        left.plot(xs, list(curve.values()), label=name, linewidth=1.4)
    if replay:
        left.set_xlabel("time (days from the trace start)")
        left.set_ylabel("allocated GPU share (%)")
        left.set_title("GPU allocation over time")
        right.bar(names, [results[n]["time_weighted_alloc"] for n in names], color="tab:blue")
        right.set_ylabel("time-weighted GPU allocation (%)")
    else:
        left.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=0.8)
        left.set_xlabel("arrived GPU demand (% of capacity)")
        left.set_ylabel("allocated GPU (% of capacity)")
        left.set_title("GPU allocation as demand arrives")
        right.bar(names, [results[n]["frag_at"].get("90", math.nan) for n in names], color="tab:orange")
        right.set_ylabel("fragmentation at 90% arrived (% of GPU)")
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    right.tick_params(axis="x", rotation=60)
    right.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
