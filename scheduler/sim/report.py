"""Results of a comparison: the terminal table, the JSON file and the plots.

They are read by people first: each table ends with what its columns mean, a figure that cannot be computed says
why instead of printing ``nan``, and a policy keeps one colour in every panel of a plot.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scheduler.sim import bound, policies


def _pct(value: float, width: int) -> str:
    """A percentage right-aligned in ``width`` characters, or ``n/a*`` when there is none (see the note)."""
    return f"{value:>{width - 1}.2f}%" if math.isfinite(value) else f"{'n/a*':>{width}}"


#: The policy every other one is measured against, and where that comparison starts (% of arrived demand): below
#: half the cluster every policy places every pod, so the curves there say nothing.
BASELINE = "fgd"
VERSUS_FROM = 50


def versus(results: Mapping[str, dict[str, Any]], *, baseline: str = BASELINE, low: int = VERSUS_FROM) -> None:
    """Add to each policy's result how its curve compares with ``baseline``'s from ``low``% arrived on: the mean
    difference (the area between the curves divided by their length, in points of allocation) and the worst
    point (the most negative difference, and where). Nothing is added when ``baseline`` was not run."""
    if baseline not in results:
        return
    base = results[baseline]["curve"]
    for r in results.values():
        diffs = [
            (int(x), float(v) - float(base[x]))
            for x, v in r["curve"].items()
            if int(x) >= low and x in base and math.isfinite(float(v)) and math.isfinite(float(base[x]))
        ]
        if not diffs:
            continue
        worst_at, worst = min(diffs, key=lambda d: (d[1], d[0]))
        r["versus"] = {
            "baseline": baseline,
            "from": low,
            "mean_diff": sum(d for _, d in diffs) / len(diffs),
            "worst_diff": worst,
            "worst_at": worst_at,
            "diff": {str(x): d for x, d in diffs},
        }


#: Below this many points between fgd and the bound, a share of the headroom says nothing (it divides by ~0).
MIN_HEADROOM = 0.05


def headroom(results: Mapping[str, dict[str, Any]], bounds: Mapping[str, Any], *, baseline: str = BASELINE) -> None:
    """Add to each policy's result its share of the headroom at each point of the bound: (policy - baseline) /
    (forced bound - baseline), the part of what the baseline leaves to win that the policy wins. The forced bound
    (every pod arriving before 95% placed) is the one to measure by: a policy that turns pods away while they fit
    is not one a cluster would run. Nothing is added when the baseline was not run or there is no bound."""
    if baseline not in results or not bounds.get("available"):
        return
    base = results[baseline]["alloc_at"]
    for r in results.values():
        share = {}
        for point, pair in bounds["at"].items():
            room = pair["forced"] - base.get(point, math.nan)
            value = r["alloc_at"].get(point, math.nan) - base.get(point, math.nan)
            share[point] = value / room if math.isfinite(value) and room >= MIN_HEADROOM else math.nan
        r["headroom_share"] = share


def _versus_cells(name: str, r: Mapping[str, Any]) -> str:
    v = r.get("versus")
    if v is None:
        return f"{'':>9}{'':>14}"
    if name == v["baseline"]:
        return f"{'-':>9}{'-':>14}"
    worst = f"{v['worst_diff']:+.2f} at {v['worst_at']}%"
    return f"{v['mean_diff']:>+9.2f}{worst:>14}"


def table(results: Mapping[str, Mapping[str, Any]], ratio_key: str, bounds: Mapping[str, Any] | None = None) -> str:
    """One row per policy: allocation at 100% and RATIO arrived (mean ± std), fragmentation at 90%, and more;
    then the optimum's bound when ``bounds`` has it (or why not); then what each column means, and why a cell says
    n/a where one does."""
    # Wider only for longer names (a NUMA-blind run's).
    width = max([16, *(len(name) + 2 for name in results)])
    head = (
        f"{'policy':<{width}}{'alloc@100%':>12}{'alloc@' + ratio_key + '%':>18}{'frag@90%':>10}{'failed':>9}"
        f"{'free nodes':>12}{'stranded':>10}{'decisions/s':>13}{'wall s':>9}"
    )
    compared = any("versus" in r for r in results.values())
    if compared:
        head += f"{'vs ' + BASELINE:>9}{'worst':>14}"
    shared = any("headroom_share" in r for r in results.values())
    if shared:
        head += f"{'headroom':>10}"
    lines = [head, "-" * len(head)]
    missing: set[str] = set()
    for name, r in results.items():
        at = r["alloc_at"]
        std = r["alloc_std_at"].get(ratio_key, math.nan)
        at100, at_ratio, frag = at.get("100", math.nan), at.get(ratio_key, math.nan), r["frag_at"].get("90", math.nan)
        missing |= {p for p, v in (("100", at100), (ratio_key, at_ratio), ("90", frag)) if not math.isfinite(v)}
        spread = f" ±{std:>4.2f}" if math.isfinite(std) else " " * 6
        lines.append(
            f"{name:<{width}}{_pct(at100, 12)}{_pct(at_ratio, 12)}{spread}{_pct(frag, 10)}{r['failed_pods']:>9.0f}"
            f"{r['fully_free_gpu_nodes']:>12.0f}{r['stranded_nodes']:>10.0f}{r['decisions_per_s']:>13.0f}"
            f"{r['wall_s']:>9.2f}"
            + (_versus_cells(name, r) if compared else "")
            + (_share_cell(name, r, ratio_key) if shared else "")
        )
    solved = bounds is not None and bounds.get("available")
    if solved:
        assert bounds is not None
        lines.append("-" * len(head))
        for variant, label in (("refusing", "bound, refusing"), ("forced", "bound, forced")):
            cells = [bounds["at"].get(p, {}).get(variant, math.nan) for p in ("100", ratio_key)]
            missing |= {
                f"bound{p}"
                for p, v in zip(("100", ratio_key), cells, strict=True)
                if p in bounds["at"] and not math.isfinite(v)
            }
            lines.append(f"{label:<{width}}{_pct(cells[0], 12)}{_pct(cells[1], 12)}")
    lines += [
        "",
        "alloc@X%     GPU allocated (% of the cluster's GPU-milli) once the arriving pods asked for X% of it; mean",
        f"             over the seeds, and at {ratio_key}% ± its standard deviation over the seeds (higher is better)",
        "frag@90%     idle GPU-milli that the typical pods cannot use (the FGD paper's fragmentation), % of the",
        "             cluster's GPU, at 90% arrived (lower is better)",
        "failed       pods that fitted on no node; free nodes: GPU nodes left with every GPU free; stranded: nodes",
        "             with one of CPU, memory, GPU over 90% used while another is under 20% (all means per seed)",
        "decisions/s  pods scheduled per second, kernels already compiled; wall s: seconds per seed",
    ]
    if compared:
        lines += [
            f"{'vs ' + BASELINE:<13}the curve minus {BASELINE}'s, averaged over each percent of arrived demand from",
            f"             {VERSUS_FROM}% to {ratio_key}% (the area between the curves per point; > 0: more GPU than "
            f"{BASELINE})",
            f"worst        the most negative difference from {BASELINE} on that range, and the arrived demand where "
            "it is",
        ]
    if solved:
        assert bounds is not None
        grid = bounds["grid_milli"]
        lines += [
            "bound        the most GPU any placement could allocate, online or offline (a linear-programming",
            "             relaxation, solved per seed, mean): 'refusing' may turn pods away, 'forced' places every",
            f"             pod arriving before {100 * bound.FORCED_SHARE:.0f}% of the capacity, as fgd and Kubernetes "
            "do",
        ]
        short = min(bounds["forced_share"], default=bound.FORCED_SHARE)
        if short < bound.FORCED_SHARE:
            lines.append(
                f"             (before {100 * short:.0f}% on some seed: even relaxed, not every pod before "
                f"{100 * bound.FORCED_SHARE:.0f}% fits)"
            )
        if grid > 1:
            lines.append(
                f"             (shared-GPU sizes rounded down to {grid} milli to bound the combinations: looser)"
            )
    elif bounds is not None:
        lines.append(f"bound        not computed: {bounds['reason']}")
    if shared:
        lines += [
            f"headroom     (policy - {BASELINE}) / (forced bound - {BASELINE}) at {ratio_key}%: the share of what "
            f"{BASELINE} leaves",
            f"             that the policy wins (n/a*: {BASELINE} within {MIN_HEADROOM} points of the bound)",
        ]
    if any(p.startswith("bound") for p in missing):
        missing = {p for p in missing if not p.startswith("bound")}
        lines.append("n/a*         (bound) on some seed the CPU-only pods that arrive first do not fit, even relaxed")
    if missing:
        at = " and ".join(f"{p}%" for p in sorted(missing, key=int))
        lines += [
            f"n/a*         no pod arrived while the demand was within a point of {at} of the cluster's GPU: on",
            "             this trace each pod is a large part of the cluster, so the demand jumps over that point",
            "             (--json and --plot have the whole curve)",
        ]
    return "\n".join(lines)


def _share_cell(name: str, r: Mapping[str, Any], ratio_key: str) -> str:
    share = r.get("headroom_share", {}).get(ratio_key, math.nan)
    if name == BASELINE:
        return f"{'-':>10}"
    return f"{100 * share:>+9.0f}%" if math.isfinite(share) else f"{'n/a*':>10}"


def replay_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    head = (
        f"{'policy':<16}{'time-weighted alloc':>21}{'pending mean s':>16}{'pending p99 s':>15}{'never placed':>14}"
        f"{'decisions/s':>13}{'wall s':>9}"
    )
    lines = [head, "-" * len(head)]
    for name, r in results.items():
        lines.append(
            f"{name:<16}{_pct(r['time_weighted_alloc'], 21)}{r['pending_mean_s']:>16.0f}{r['pending_p99_s']:>15.0f}"
            f"{r['failed_pods']:>14.0f}{r['decisions_per_s']:>13.0f}{r['wall_s']:>9.2f}"
        )
    lines += [
        "",
        "time-weighted alloc  GPU allocated (% of the cluster's GPU-milli), averaged over the trace's time span",
        "pending mean/p99 s   seconds a pod waited from its creation to its placement (mean, 99th percentile)",
        "never placed         pods still waiting at the end; decisions/s: pods scheduled per second",
    ]
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
    lines += [
        "",
        "partial gangs, deadlocks  checks after every step: a gang partly placed; gangs waiting while nothing runs",
        "                          and nothing can be placed (sums over the seeds; both should be 0)",
        "wait mean/p99 s           seconds from a gang's arrival until all its workers were placed",
        "GPU alloc                 GPU allocation over the run; placed, waiting: gangs placed, and still waiting at",
        "                          the end (means per seed); wall s: seconds per seed",
    ]
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


def _count(value: float) -> str:
    """A mean count: a whole number as such, otherwise one decimal (55.7, not 55.6667)."""
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def tenant_table(results: Mapping[str, Mapping[str, Any]], *, seeds: int = 1) -> str:
    lines = []
    means = f" (means over {seeds} seeds)" if seeds > 1 else ""
    per_seed = " a seed" if seeds > 1 else ""
    for name, r in results.items():
        lines.append(
            f"{name}{means}: Jain index {r['jain_index']:.3f}, GPU allocation {r['gpu_allocation']:.2f}%, "
            f"reclaim latency {r['reclaim_latency_s']:.0f}s, preempted {r['preempted_gpu_hours']:.1f} GPU-hours "
            f"in {_count(r['preemptions'])} jobs{per_seed}, partial gangs {r['partial_gangs']}"
        )
        lines.append(f"  {'queue':<10}{'weight':>8}{'GPUs held':>11}{'fair share':>12}{'held/fair':>11}")
        for queue, q in r["queues"].items():
            lines.append(
                f"  {queue:<10}{q['weight']:>8g}{q['gpus_held']:>11.1f}{q['fair_share_gpus']:>12.1f}"
                f"{q['share_over_fair']:>11.2f}"
            )
    lines += [
        "",
        "Over the window when every queue is saturated (from an hour after prod starts to the last arrival):",
        "GPUs held: a queue's time-averaged GPUs; fair share: its water-filled share (guarantees, then the rest",
        "by weight); held/fair near 1 is fair. Jain index over those ratios: 1 is perfectly fair. Reclaim",
        "latency: from prod's first job until prod holds its guarantee. Partial gangs: a sum over the seeds.",
    ]
    return "\n".join(lines)


def write_json(path: str | Path, payload: Mapping[str, Any]) -> None:
    Path(path).write_text(json.dumps(_finite(payload), indent=2, allow_nan=False) + "\n")


#: matplotlib's tab10 without its grey (which reads as a reference line, not a policy), and a dark blue.
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#17becf",
    "#393b79",
)


def colours(names: Sequence[str]) -> dict[str, str]:
    """One colour per policy, the same in every panel and every run (by the policy's place in the list of
    policies, so that fgd is the same colour in two plots)."""
    known = list(policies.POLICIES)
    taken = {PALETTE[known.index(n) % len(PALETTE)] for n in names if n in known}
    spare = iter([c for c in PALETTE if c not in taken] + list(PALETTE))
    return {n: PALETTE[known.index(n) % len(PALETTE)] if n in known else next(spare) for n in names}


def _zoom_limits(results: Mapping[str, Mapping[str, Any]], low_x: float) -> tuple[float, float] | None:
    """The y range of every curve from ``low_x`` on, with a margin: where the policies differ."""
    values = [
        float(v)
        for r in results.values()
        for x, v in r["curve"].items()
        if float(x) >= low_x and v is not None and math.isfinite(float(v))
    ]
    if not values:
        return None
    low, high = min(values), max(values)
    margin = max(0.15 * (high - low), 0.5)
    return low - margin, min(high + margin, 100.5)


def plot(path: str | Path, results: Mapping[str, Mapping[str, Any]], *, replay: bool = False) -> None:
    """Allocation per policy (vs arrived demand, or vs time in a replay) and one bar per policy.

    In a comparison there are three panels: the whole curve, the same from 80% arrived demand on with the y axis
    fitted to it (where the policies part: a point there is a point of GPU allocation), and fragmentation at 90%.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    colour = colours(names)
    if replay:
        fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [2, 1]})
        for name in names:
            curve = results[name]["curve"]
            left.plot([float(x) for x in curve], list(curve.values()), label=name, color=colour[name], linewidth=1.4)
        left.set_xlabel("time (days from the trace start)")
        left.set_ylabel("allocated GPU (% of capacity)")
        left.set_title("GPU allocation over time")
        left.grid(alpha=0.3)
        left.legend(fontsize=8)
        bars = [results[n]["time_weighted_alloc"] for n in names]
        right.bar(names, bars, color=[colour[n] for n in names])
        right.set_ylabel("time-weighted GPU allocation (%)")
        right.set_title("time-weighted allocation")
    else:
        compared = [n for n in names if "versus" in results[n] and n != results[n]["versus"]["baseline"]]
        if compared:
            fig, (left, middle, diff_axis, right) = plt.subplots(
                1, 4, figsize=(21, 5.2), gridspec_kw={"width_ratios": [4, 4, 4, 3]}
            )
            _plot_versus(diff_axis, results, compared, colour)
        else:
            fig, (left, middle, right) = plt.subplots(1, 3, figsize=(16, 5.2), gridspec_kw={"width_ratios": [4, 4, 3]})
        top = max((max(float(x) for x in results[n]["curve"]) for n in names), default=100.0)
        zoom_from = min(90.0, top - 10.0)
        for axis in (left, middle):
            for name in names:
                curve = results[name]["curve"]
                axis.plot(
                    [float(x) for x in curve], list(curve.values()), label=name, color=colour[name], linewidth=1.4
                )
            axis.plot([0, 100], [0, 100], color="black", linestyle=":", linewidth=0.8)
            axis.axvline(100, color="black", linewidth=0.6, alpha=0.4)
            axis.set_xlabel("arrived GPU demand (% of capacity)")
            axis.grid(alpha=0.3)
        left.set_ylabel("allocated GPU (% of capacity)")
        left.set_title("GPU allocation as demand arrives")
        left.legend(fontsize=8, loc="lower right")
        limits = _zoom_limits(results, zoom_from)
        middle.set_xlim(zoom_from, top)
        if limits is not None:
            middle.set_ylim(*limits)
            left.axvspan(zoom_from, top, color="grey", alpha=0.08)
        middle.set_title(f"the same from {zoom_from:.0f}% arrived, y axis zoomed")
        frag = [results[n]["frag_at"].get("90", math.nan) for n in names]
        drawn = right.bar(names, [0.0 if not math.isfinite(f) else f for f in frag], color=[colour[n] for n in names])
        right.bar_label(drawn, labels=[f"{f:.1f}" if math.isfinite(f) else "n/a" for f in frag], fontsize=7)
        right.set_ylabel("idle GPU the typical pods cannot use (% of capacity)")
        right.set_title("fragmentation at 90% arrived (lower is better)")
    right.tick_params(axis="x", rotation=60)
    right.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_versus(
    axis: Any, results: Mapping[str, Mapping[str, Any]], names: Sequence[str], colour: Mapping[str, str]
) -> None:
    """Each policy's curve minus the baseline's: below zero is where it allocates less GPU than the baseline."""
    baseline = results[names[0]]["versus"]["baseline"]
    for name in names:
        diff = results[name]["versus"]["diff"]
        axis.plot([float(x) for x in diff], list(diff.values()), label=name, color=colour[name], linewidth=1.4)
    axis.axhline(0.0, color=colour.get(baseline, "black"), linewidth=1.0)
    axis.axvline(100, color="black", linewidth=0.6, alpha=0.4)
    axis.set_xlabel("arrived GPU demand (% of capacity)")
    axis.set_ylabel(f"allocated GPU minus {baseline}'s (points)")
    axis.set_title(f"difference from {baseline} (below 0: {baseline} allocates more)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
