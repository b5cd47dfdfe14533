"""The dashboard's pictures as inline SVG, drawn on the server: a queue's GPUs against its guarantee and limit, the
small charts of the last hours, and how long pending work waits by its GPU class.

No script and no library: each picture is a few rectangles and a polyline in the page's HTML, so it is in the
``<main>`` the page's poll replaces, in a page saved to a file, and in a screenshot. Every number is given in the
units a person reads (GPUs, percent, minutes) by the formatters here, and the picture's numbers are repeated as text
beside it (a ``data-`` attribute carries the exact value for tests and scripts).
"""

from __future__ import annotations

import html
import statistics
from collections.abc import Callable, Sequence

from scheduler.dashboard import view

#: The bar of a queue and the small charts, in CSS pixels.
BAR_WIDTH = 300
BAR_HEIGHT = 16
CHART_WIDTH = 260
CHART_HEIGHT = 56

#: The wait classes: (name, the most GPUs a pod of the class asks for). A pod asking more than the last class's
#: bound counts in a class of its own (``more than 8 GPUs``); a pod asking none in ``no GPU``.
WAIT_CLASSES: tuple[tuple[str, float], ...] = (
    ("shared GPU", 0.999),
    ("1 GPU", 1),
    ("2 GPUs", 2),
    ("4 GPUs", 4),
    ("8 GPUs", 8),
)
NO_GPU = "no GPU"
MORE = "more than 8 GPUs"


def e(value: object) -> str:
    return html.escape(str(value), quote=True)


# --- units ----------------------------------------------------------------------------------------------------


def percent(share: float) -> str:
    """A share (1.0 = everything) as a person reads it: ``25%``, ``-20.8%``, ``0.5%``."""
    value = share * 100
    return f"{value:.0f}%" if abs(value) >= 10 or value == 0 else f"{value:.1f}%"


def gpus(amount: float) -> str:
    """GPUs: ``6 GPUs``, ``1 GPU``, ``2.5 GPUs`` (a shared GPU's fraction kept to a tenth)."""
    text = f"{amount:.1f}".rstrip("0").rstrip(".")
    return f"{text} GPU" if text == "1" else f"{text} GPUs"


def duration(seconds: float) -> str:
    """A wait: ``40 s``, ``12 min``, ``3 h 5 min``."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min" if minutes % 60 else f"{minutes // 60} h"


def share(text: object) -> str:
    """A share as the Queue's status writes it (``0.2500``) as a percent (``25%``); ``-`` when there is none."""
    try:
        return percent(float(str(text)))
    except ValueError:
        return "-"


# --- a queue's bar --------------------------------------------------------------------------------------------


def queue_scale(rows: Sequence[view.QueueRow]) -> float:
    """The GPUs one bar's width stands for: the same for every queue of the page, so that bars compare."""
    widest = 0.0
    for row in rows:
        g = row.gpus
        if g is not None:
            widest = max(widest, g.guarantee, g.limit or 0.0, g.allocated + g.lent)
    return widest or 1.0


def queue_bar(g: view.QueueGpus, *, colour: str, scale: float) -> str:
    """What a queue holds as a bar: within its guarantee in its colour, borrowed beyond it striped, its idle
    guarantee other queues use (lent) in amber, idle guarantee as an outline; ticks at the guarantee and the limit."""

    def x(amount: float) -> float:
        return round(BAR_WIDTH * min(amount, scale) / scale, 1)

    within = min(g.allocated, g.guarantee)
    parts = [f'<rect x=0 y=0 width={BAR_WIDTH} height={BAR_HEIGHT} fill="#eceff1"/>']
    if g.guarantee:
        parts.append(
            f'<rect class=guaranteed x=0 y=1 width={x(g.guarantee)} height={BAR_HEIGHT - 2} fill="#fff" '
            f'stroke="{colour}" stroke-dasharray="3 2"/>'
        )
    parts.append(f'<rect class=within x=0 y=0 width={x(within)} height={BAR_HEIGHT} fill="{colour}"/>')
    if g.borrowed > 0:
        start = g.allocated - g.borrowed
        parts.append(
            f"<rect class=borrowed x={x(start)} y=0 width={x(g.allocated) - x(start):.1f} height={BAR_HEIGHT} "
            f'fill="{colour}" fill-opacity=".45" stroke="{colour}"/>'
        )
    if g.lent > 0:
        parts.append(
            f"<rect class=lent x={x(g.allocated)} y=3 width={x(g.allocated + g.lent) - x(g.allocated):.1f} "
            f'height={BAR_HEIGHT - 6} fill="#ffb300"/>'
        )
    if g.guarantee:
        parts.append(f'<line x1={x(g.guarantee)} x2={x(g.guarantee)} y1=0 y2={BAR_HEIGHT} stroke="#263238"/>')
    if g.limit is not None:
        tick = min(x(g.limit), BAR_WIDTH - 1)  # a limit at the scale's end stays visible
        parts.append(f'<line class=limit x1={tick} x2={tick} y1=0 y2={BAR_HEIGHT} stroke="#c62828" stroke-width=2/>')
    words = [f"{gpus(g.allocated)} held"]
    if g.guarantee:
        words.append(f"{percent(g.allocated / g.guarantee)} of its guarantee of {gpus(g.guarantee)}")
    if g.borrowed > 0:
        words.append(f"{gpus(g.borrowed)} borrowed")
    if g.lent > 0:
        words.append(f"{gpus(g.lent)} lent")
    words.append("no limit" if g.limit is None else f"limit {gpus(g.limit)}")
    text = ", ".join(words)
    return (
        f'<svg class=qbar width={BAR_WIDTH} height={BAR_HEIGHT} role=img data-allocated="{g.allocated:g}" '
        f'data-borrowed="{g.borrowed:g}" data-lent="{g.lent:g}"><title>{e(text)}</title>{"".join(parts)}</svg>'
        f"<div class=qtext>{e(text)}</div>"
    )


QUEUE_LEGEND = (
    '<p class=legend><span><i class=swatch style="background:#607d8b"></i>held within the guarantee</span>'
    '<span><i class=swatch style="background:#607d8b;opacity:.45"></i>borrowed beyond it</span>'
    '<span><i class=swatch style="background:#ffb300"></i>its idle guarantee other queues use (lent)</span>'
    '<span><i class=swatch style="border:1px dashed #607d8b;background:#fff"></i>idle guarantee</span>'
    '<span><i class=swatch style="background:#263238;width:2px"></i>guarantee</span>'
    '<span><i class=swatch style="background:#c62828;width:2px"></i>limit</span></p>'
)


# --- the last hours -------------------------------------------------------------------------------------------


def trend(
    samples: Sequence[view.Sample],
    *,
    name: str,
    title: str,
    value: Callable[[view.Sample], float],
    top: Callable[[view.Sample], float],
    shown: Callable[[view.Sample], str],
    colour: str,
) -> str:
    """One small chart over the samples (oldest left, the present right): ``value`` as a filled line under a
    ceiling of ``top`` (the largest of them), with the present in words (``shown``) and the span covered."""
    now = samples[-1]
    ceiling = max([top(s) for s in samples] + [1.0])
    start, end = samples[0].at, now.at
    span = end - start

    def point(s: view.Sample) -> str:
        px = CHART_WIDTH * (s.at - start) / span if span > 0 else CHART_WIDTH
        py = CHART_HEIGHT - 2 - (CHART_HEIGHT - 4) * min(value(s), ceiling) / ceiling
        return f"{px:.1f},{py:.1f}"

    points = " ".join(point(s) for s in samples)
    first = points.split(" ", 1)[0].split(",")[0]
    area = f"{first},{CHART_HEIGHT} {points} {CHART_WIDTH},{CHART_HEIGHT}"
    last_x, last_y = point(now).split(",")
    over = f"the last {duration(span)}" if span >= 1 else "just started: one point a minute"
    return (
        f'<figure class=trend data-chart="{e(name)}" data-now="{value(now):g}" data-points={len(samples)}>'
        f"<figcaption><b>{e(title)}</b> <span class=now>{e(shown(now))}</span></figcaption>"
        f"<svg width={CHART_WIDTH} height={CHART_HEIGHT} role=img><title>{e(title)}: {e(shown(now))}</title>"
        f'<rect width={CHART_WIDTH} height={CHART_HEIGHT} fill="#fff" stroke="#cfd8dc"/>'
        f'<polygon points="{area}" fill="{colour}" fill-opacity=".18"/>'
        f'<polyline points="{points}" fill=none stroke="{colour}" stroke-width=1.5/>'
        f'<circle cx={last_x} cy={last_y} r=2.5 fill="{colour}"/></svg>'
        f"<div class=span>{e(over)}, top {e(_ceiling_text(name, ceiling))}</div></figure>"
    )


def _ceiling_text(name: str, ceiling: float) -> str:
    if name == "waiting":
        return "1 pod" if ceiling == 1 else f"{ceiling:.0f} pods"
    return gpus(ceiling)


def trends(samples: Sequence[view.Sample]) -> str:
    """The three charts of the map page: GPUs allocated (of those present), fragmented, and pods waiting."""
    if not samples:
        return ""

    def held(s: view.Sample) -> str:
        return f"{gpus(s.allocated)} of {s.gpus} ({percent(s.allocated / s.gpus) if s.gpus else '-'})"

    charts = (
        trend(
            samples,
            name="allocated",
            title="GPUs allocated",
            value=lambda s: s.allocated,
            top=lambda s: float(s.gpus),
            shown=held,
            colour="#1e88e5",
        ),
        trend(
            samples,
            name="fragmented",
            title="Idle GPUs stranded",
            value=lambda s: s.fragmented,
            top=lambda s: s.fragmented,
            shown=lambda s: gpus(s.fragmented),
            colour="#e64a19",
        ),
        trend(
            samples,
            name="waiting",
            title="Pods waiting",
            value=lambda s: float(s.pods_waiting),
            top=lambda s: float(s.pods_waiting),
            shown=lambda s: f"{s.pods_waiting}",
            colour="#8e24aa",
        ),
    )
    return f"<div class=trends id=trends>{''.join(charts)}</div>"


# --- waits by class -------------------------------------------------------------------------------------------


def wait_class(asked: float) -> str:
    """The class of a pod asking ``asked`` GPUs (a gang: each member's)."""
    if asked <= 0:
        return NO_GPU
    for name, bound in WAIT_CLASSES:
        if asked <= bound:
            return name
    return MORE


def waits(jobs: Sequence[view.WaitingJob]) -> str:
    """Per class, how many jobs wait and for how long (the longest and the median), as bars of the longest wait on
    one scale; the GPU classes are always listed, the others only when a job is in them."""
    by_class: dict[str, list[float]] = {name: [] for name, _ in WAIT_CLASSES}
    for job in jobs:
        by_class.setdefault(wait_class(job.gpus), []).append(job.waited_s)
    longest = max([max(w) for w in by_class.values() if w] + [60.0])
    rows = []
    for name, waited in by_class.items():
        if not waited:
            rows.append(f'<tr data-class="{e(name)}" data-jobs=0><td>{e(name)}</td><td></td><td>none waiting</td></tr>')
            continue
        worst, middle = max(waited), statistics.median(waited)
        width = max(2.0, BAR_WIDTH * worst / longest)
        median_x = BAR_WIDTH * middle / longest
        text = f"{len(waited)} waiting, longest {duration(worst)}, median {duration(middle)}"
        bar = (
            f"<svg width={BAR_WIDTH} height=12 role=img><title>{e(text)}</title>"
            f'<rect width={width:.1f} height=12 fill="#8e24aa" fill-opacity=".35"/>'
            f'<line x1={median_x:.1f} x2={median_x:.1f} y1=0 y2=12 stroke="#4a148c" stroke-width=2/></svg>'
        )
        rows.append(
            f'<tr data-class="{e(name)}" data-jobs={len(waited)} data-longest="{worst:.0f}">'
            f"<td>{e(name)}</td><td>{bar}</td><td>{e(text)}</td></tr>"
        )
    return (
        "<table id=waits><caption>How long work waits, by the GPUs each pod asks for (bar: the longest wait, "
        f"line: the median; full width {duration(longest)})</caption>{''.join(rows)}</table>"
    )
