"""The dashboard's pictures: a queue's GPUs as a bar against its guarantee and limit (what it borrows and lends), the
small charts of the last hours from a bounded history, waits by GPU class, and numbers in percent, GPUs, minutes."""

from __future__ import annotations

import re

from scheduler.dashboard import charts, history, pages, view
from tests.dashboard.test_pages import node


def queue(name: str, *, parent: str = "", guarantee: float, held: float, limit: float | None = None) -> view.QueueRow:
    borrowed = max(0.0, held - guarantee)
    return view.QueueRow(
        name=name,
        parent=parent,
        depth=1 if parent else 0,
        weight=1.0,
        guarantee={"nvidia.com/gpu": f"{guarantee:g}"} if guarantee else {},
        limit={"nvidia.com/gpu": f"{limit:g}"} if limit is not None else {},
        status={"fairShare": "0.2500", "dominantShare": "0.3750", "rankShare": "-0.2083"},
        gpus=view.QueueGpus(
            allocated=held,
            guarantee=guarantee,
            limit=limit,
            borrowed=borrowed,
            lendable=max(0.0, guarantee - held),
        ),
    )


def test_numbers_are_in_the_units_a_person_reads() -> None:
    assert [charts.percent(x) for x in (0.25, -0.2083, 0.005, 0, 1.0)] == ["25%", "-21%", "0.5%", "0%", "100%"]
    assert [charts.gpus(x) for x in (1, 6, 2.5, 0.25)] == ["1 GPU", "6 GPUs", "2.5 GPUs", "0.2 GPUs"]
    assert [charts.duration(s) for s in (30, 720, 3600, 3 * 3600 + 300)] == ["30 s", "12 min", "1 h", "3 h 5 min"]
    assert charts.share("0.2500") == "25%" and charts.share("-") == "-"


def test_the_queues_page_shows_shares_in_percent_and_keeps_the_status_text() -> None:
    text = pages.queues([queue("team", guarantee=8, held=6, limit=20)])
    assert '<td data-field=fairShare data-status="0.2500">25%</td>' in text
    assert '<td data-field=rankShare data-status="-0.2083">-21%</td>' in text
    assert "0.2500<" not in text  # no bare four-decimal share left on the page


def test_a_queue_bar_shows_what_it_holds_against_its_guarantee_and_limit() -> None:
    text = pages.queues([queue("team", guarantee=8, held=6, limit=20)])
    assert "6 GPUs held, 75% of its guarantee of 8 GPUs, limit 20 GPUs" in text
    bar = re.search(r"<svg class=qbar.*?</svg>", text)
    assert bar is not None
    assert 'data-allocated="6"' in bar.group() and "class=borrowed" not in bar.group()
    # One scale for the page (the limit, 20 GPUs, is the widest): 6 GPUs held is 90 of 300 pixels, the limit's tick
    # at the right end (a pixel in, to stay visible).
    assert re.search(r"class=within x=0 y=0 width=90.0 ", bar.group())
    assert "class=limit x1=299" in bar.group()


def test_a_borrowing_queue_and_the_queue_it_borrows_from() -> None:
    # 16 GPUs, all guaranteed: what one queue borrows can only be the other's idle guarantee.
    rows = view.with_lent([queue("a", guarantee=8, held=12), queue("b", guarantee=8, held=2)], capacity=16)
    gpus = {row.name: row.gpus for row in rows}
    assert gpus["a"] is not None and gpus["b"] is not None
    assert (gpus["a"].borrowed, gpus["a"].lent, gpus["b"].lent) == (4, 0, 4)
    text = pages.queues(rows)
    assert "12 GPUs held, 150% of its guarantee of 8 GPUs, 4 GPUs borrowed, no limit" in text
    assert "2 GPUs held, 25% of its guarantee of 8 GPUs, 4 GPUs lent, no limit" in text
    assert text.count("class=borrowed") == 1 and text.count("class=lent") == 1
    # 24 GPUs: the 8 nobody is guaranteed cover the borrowing; nobody lends.
    rows = view.with_lent([queue("a", guarantee=8, held=12), queue("b", guarantee=8, held=2)], capacity=24)
    assert [row.gpus.lent for row in rows if row.gpus is not None] == [0, 0]


def test_children_lend_within_what_their_parent_holds() -> None:
    rows = [
        queue("org", guarantee=10, held=10),
        queue("x", parent="org", guarantee=4, held=7),
        queue("y", parent="org", guarantee=4, held=3),
        queue("z", parent="org", guarantee=2, held=0),
    ]
    lent = {row.name: row.gpus.lent for row in view.with_lent(rows, capacity=10) if row.gpus is not None}
    # x borrows 3 of the parent's 10; none is unguaranteed, so y (1 idle) and z (2 idle) lend 1 and 2.
    assert lent == {"org": 0, "x": 0, "y": 1, "z": 2}


def samples(*points: tuple[float, float, float, int]) -> list[view.Sample]:
    return [
        view.Sample(at=at, gpus=24, allocated=held, fragmented=frag, pods_waiting=w) for at, held, frag, w in points
    ]


def test_the_map_page_heads_with_charts_of_the_last_hours() -> None:
    kept = samples((0, 4, 2, 0), (3600, 12, 3.5, 5), (7200, 6, 1, 2))
    text = pages.cluster_map(view.ClusterMap(levels=(), nodes=()), view.Redacted(), samples=kept)
    charts_shown = re.findall(r'<figure class=trend data-chart="(\w+)" data-now="([\d.]+)" data-points=3>', text)
    assert charts_shown == [("allocated", "6"), ("fragmented", "1"), ("waiting", "2")]
    assert "GPUs allocated</b> <span class=now>6 GPUs of 24 (25%)</span>" in text
    assert "Idle GPUs stranded</b> <span class=now>1 GPU</span>" in text
    assert text.count("the last 2 h") == 3
    # The line runs from the left edge to the right one; GPUs allocated are drawn against the 24 present.
    assert 'points="0.0,45.3 130.0,28.0 260.0,41.0"' in text
    assert text.count("<svg") == 3 and "<script" not in text


def test_a_chart_with_one_sample_says_it_just_started() -> None:
    text = charts.trends(samples((100, 0, 0, 0)))
    assert text.count("just started: one point a minute") == 3
    # The first sample and the present less than a second later: from the left edge to the right one.
    text = charts.trends(samples((100, 0, 0, 0), (100.4, 4, 0, 0)))
    assert 'points="0.0,54.0 260.0,45.3"' in text and text.count("just started: one point a minute") == 3
    assert charts.trends([]) == ""


def test_the_history_keeps_one_sample_a_minute_and_only_the_last_hours() -> None:
    kept = history.History(every_s=60, kept=3)
    taken: list[float] = []

    def take(at: float) -> view.Sample:
        taken.append(at)
        return samples((at, 0, 0, 0))[0]

    offered = [kept.offer(at, lambda at=at: take(at)) for at in (0, 30, 59, 60, 200, 250, 400)]
    assert offered == [True, False, False, True, True, False, True]
    assert taken == [0, 60, 200, 400]  # a sample dropped is never taken
    assert [s.at for s in kept.samples()] == [60, 200, 400]  # bounded: the oldest goes


def test_a_sample_counts_the_maps_gpus() -> None:
    cluster = view.ClusterMap(
        levels=("block",),
        nodes=(
            view.NodeView(
                name="n0",
                labels={},
                domains=("b",),
                cells=(
                    view.GpuCell(state=view.WHOLE, used_milli=1000),
                    view.GpuCell(state=view.SHARED, used_milli=500),
                    view.GpuCell(state=view.STRANDED),
                    view.GpuCell(state=view.STRANDED),
                ),
                fragmentation_milli=2000,
            ),
            node("n1", block="b", rack=None, states="iiii"),
        ),
    )
    assert history.sample(cluster, pods_waiting=3, at=50) == view.Sample(
        at=50, gpus=8, allocated=1.5, fragmented=2, pods_waiting=3
    )


def waiting_job(name: str, *, gpus: float, waited_s: float, namespace: str = "ns") -> view.WaitingJob:
    return view.WaitingJob(
        key=f"pod/{namespace}/{name}",
        namespace=namespace,
        name=name,
        kind="pod",
        queue="team",
        where="unschedulable",
        position=None,
        reason="",
        gpus=gpus,
        waited_s=waited_s,
    )


def test_waits_by_class_of_gpus_asked() -> None:
    jobs = [
        waiting_job("half", gpus=0.5, waited_s=90),
        waiting_job("one", gpus=1, waited_s=30),
        waiting_job("one-more", gpus=1, waited_s=600),
        waiting_job("one-again", gpus=1, waited_s=1200),
        waiting_job("three", gpus=3, waited_s=45),
        waiting_job("big", gpus=16, waited_s=7200),
        waiting_job("cpu", gpus=0, waited_s=5, namespace="secret"),
    ]
    text = pages.waiting(jobs, view.Redacted(namespaces=frozenset({"ns"})))
    classes = dict(re.findall(r'<tr data-class="([^"]+)" data-jobs=(\d+)', text))
    assert classes == {
        "shared GPU": "1",
        "1 GPU": "3",
        "2 GPUs": "0",
        "4 GPUs": "1",
        "8 GPUs": "0",
        "more than 8 GPUs": "1",
        "no GPU": "1",  # counted, although its namespace is hidden from this viewer: no name is shown
    }
    assert "3 waiting, longest 20 min, median 10 min" in text
    assert "full width 2 h" in text and "secret/" not in text
    assert "<td data-field=waited>20 min</td>" in text


def test_nothing_waiting_draws_no_wait_chart() -> None:
    assert "<svg" not in pages.waiting([], view.Redacted())
