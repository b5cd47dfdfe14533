"""The dashboard's pages as HTML, rendered on the server from the read-only view (:mod:`scheduler.dashboard.view`).

Every page is a whole document whose ``<main>`` the page's script replaces with a fresh rendering when the view
changes (:mod:`scheduler.dashboard.server` answers the script's poll), so nothing reloads. No front-end library:
the pages are tables and coloured cells, and the script is a few lines of polling (``LIVE_SCRIPT``).

Readable at thousands of nodes: past :data:`NODES_SHOWN` nodes the map shows one row per topology domain (the
widest level with at most :data:`GROUPS_SHOWN` domains, else runs of nodes in name order) with its GPUs counted by
state and queue; a row links to its nodes. A label filter (``?label=KEY=VALUE`` or ``?label=KEY``) narrows the map.
Names from namespaces the viewer may not list are replaced (:class:`~scheduler.dashboard.view.Redacted`).
"""

from __future__ import annotations

import hashlib
import html
import urllib.parse
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from scheduler.dashboard import charts, view

#: Past this many nodes (after the filter) the map aggregates.
NODES_SHOWN = 400
#: The most domains one aggregated map shows.
GROUPS_SHOWN = 200
#: Nodes per row when no topology level groups few enough of them.
RUN = 100
#: Milliseconds between two polls of the page's script.
POLL_MS = 1000

PAGES = (("/", "Cluster map"), ("/queues", "Queues"), ("/waiting", "Waiting work"))

_STYLE = """
body{font:13px system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#263238;color:#fff;padding:6px 12px;display:flex;gap:16px;align-items:center}
header a{color:#cfd8dc;text-decoration:none}header a.on{color:#fff;font-weight:600}
header .who{margin-left:auto;font-size:12px;color:#b0bec5}
main{padding:10px 14px}
table{border-collapse:collapse;background:#fff}
td,th{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#eceff1}
.domain{margin:8px 0 2px;font-weight:600}
.nodes{display:flex;flex-wrap:wrap;gap:4px}
.node{border:1px solid #b0bec5;background:#fff;padding:2px 3px;font-size:10px}
.node.cordoned{border-style:dashed;opacity:.7}
.cells{display:flex;gap:1px;margin-top:2px}
.cell{width:11px;height:11px;border:1px solid #90a4ae}
.cell.idle{background:#eceff1}
.cell.stranded{background:repeating-linear-gradient(45deg,#ffab91,#ffab91 2px,#fff 2px,#fff 4px)}
.cell.shared{opacity:.55}
.zones{margin-top:2px;font-size:9px}.zones td{padding:0 3px}.zones caption{text-align:left}
.bar{display:flex;height:12px;width:300px;border:1px solid #90a4ae}
.bar span{display:block;height:100%}
.legend span{display:inline-block;margin-right:12px}
.legend .cell{display:inline-block;vertical-align:middle;margin-right:3px}
pre{background:#fff;border:1px solid #ddd;padding:8px;white-space:pre-wrap}
.standby{background:#fff3e0;border:1px solid #ffb74d;padding:8px}
#live{font-size:11px;color:#b0bec5}
.trends{display:flex;gap:14px;flex-wrap:wrap;margin:4px 0 8px}
.trend{margin:0}.trend figcaption{font-size:12px}.trend .span{font-size:10px;color:#607d8b}
.qtext{font-size:11px;color:#455a64}
.swatch{display:inline-block;width:12px;height:10px;vertical-align:middle;margin-right:3px}
#waits{margin-bottom:10px}#waits caption{text-align:left;padding:2px 0}
"""

LIVE_SCRIPT = """
(function(){
  const main = document.querySelector('main');
  const live = document.getElementById('live');
  async function poll(){
    try {
      const r = await fetch(location.pathname + location.search,
        {headers: {'X-Dashboard-Version': main.dataset.version}, credentials: 'same-origin', cache: 'no-store'});
      if (r.status === 200) {
        main.innerHTML = await r.text();
        main.dataset.version = r.headers.get('X-Dashboard-Version') || '';
      } else if (r.status !== 204) { throw new Error('HTTP ' + r.status); }
      live.textContent = 'live, ' + new Date().toLocaleTimeString();
    } catch (e) { live.textContent = 'not updating: ' + e.message; }
    setTimeout(poll, POLL_MS);
  }
  setTimeout(poll, POLL_MS);
})();
""".replace("POLL_MS", str(POLL_MS))


def e(value: object) -> str:
    return html.escape(str(value), quote=True)


def queue_colour(queue: str) -> str:
    """A stable colour per queue name (the same on every page and every replica)."""
    hue = int(hashlib.sha256(queue.encode()).hexdigest()[:4], 16) % 360
    return f"hsl({hue},60%,45%)"


def document(
    *,
    title: str,
    path: str,
    body: str,
    version: str,
    viewer: view.Redacted,
    leadership: view.Leadership,
    live: bool = True,
) -> str:
    """A whole page: header, navigation, ``<main>`` (``body``) and the polling script."""
    nav = "".join(f'<a href="{href}"{" class=on" if href == path else ""}>{e(name)}</a>' for href, name in PAGES)
    who = f"signed in as {e(viewer.user)}" if viewer.user else ""
    role = "local copy" if leadership.observer else ("leader" if leadership.leading else "standby")
    if not live:  # a page saved to a file: no server to navigate to or to ask
        nav, role = "", "exported page"
    script = f"<script>{LIVE_SCRIPT}</script>" if live else ""
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>gpusched: {e(title)}</title>"
        f"<style>{_STYLE}</style></head><body>"
        f"<header><b>gpusched</b>{nav}<span class=who>{role} {who} <span id=live></span></span></header>"
        f'<main data-version="{e(version)}">{body}</main>{script}</body></html>'
    )


# --- the cluster map -------------------------------------------------------------------------------------------


def label_filter(nodes: Iterable[view.NodeView], selector: str) -> list[view.NodeView]:
    """The nodes whose labels match ``KEY=VALUE`` or have ``KEY`` (several: comma-separated, all must match)."""
    terms = [t.strip() for t in selector.split(",") if t.strip()]
    out = []
    for node in nodes:
        ok = True
        for term in terms:
            key, eq, value = term.partition("=")
            if key not in node.labels or (eq and node.labels[key] != value):
                ok = False
                break
        if ok:
            out.append(node)
    return out


def cluster_map(
    cluster: view.ClusterMap,
    viewer: view.Redacted,
    *,
    label: str = "",
    within: str = "",
    static: bool = False,
    samples: Sequence[view.Sample] = (),
) -> str:
    """The map's ``<main>``. ``within`` narrows to one aggregated row (``LEVEL=VALUE`` or ``#FIRST-LAST``);
    ``samples`` (the last hours, the present last) head it as small charts of the whole cluster."""
    nodes = label_filter(cluster.nodes, label) if label else list(cluster.nodes)
    nodes = _within(nodes, cluster.levels, within)
    counts = Counter(cell.state for node in nodes for cell in node.cells)
    total = sum(counts.values())
    summary = (
        f"<p id=summary data-nodes={len(nodes)} data-gpus={total} "
        + " ".join(f"data-{state}={counts.get(state, 0)}" for state in view.CELL_STATES)
        + f">{len(nodes)} nodes, {total} GPUs: "
        + ", ".join(f"{counts.get(state, 0)} {state}" for state in view.CELL_STATES)
        + "</p>"
    )
    form = (
        ""
        if static
        else (
            '<form method=get><label>node labels <input name=label placeholder="key=value,key" '
            f'value="{e(label)}"></label> <button>filter</button>'
            + (f' <a href="?label={e(urllib.parse.quote(label))}">all domains</a>' if within else "")
            + "</form>"
        )
    )
    legend = (
        "<p class=legend>"
        + "".join(
            f'<span><i class="cell {state}" style="{_cell_style(state, "")}"></i>{e(text)}</span>'
            for state, text in (
                (view.WHOLE, "whole GPU (coloured by queue)"),
                (view.SHARED, "shared GPU (lighter)"),
                (view.IDLE, "idle"),
                (view.STRANDED, "idle but stranded (FGD fragmentation)"),
            )
        )
        + "</p>"
    )
    if len(nodes) > NODES_SHOWN:
        body = _aggregated(nodes, cluster.levels, label, static)
    else:
        body = _detailed(nodes, cluster.levels, viewer)
    return charts.trends(samples) + form + summary + legend + body


def _within(nodes: list[view.NodeView], levels: Sequence[str], within: str) -> list[view.NodeView]:
    if not within:
        return nodes
    if within.startswith("#"):
        first, _, last = within[1:].partition("-")
        ordered = sorted(nodes, key=lambda n: n.name)
        return [n for n in ordered if first <= n.name <= last]
    level, _, value = within.partition("=")
    if level not in levels:
        return nodes
    index = levels.index(level)
    return [n for n in nodes if n.domains[index] == value]


def _groups(nodes: list[view.NodeView], levels: Sequence[str]) -> tuple[str, dict[str, list[view.NodeView]]]:
    """(what the rows are, rows): the widest level with at most GROUPS_SHOWN domains, else runs of RUN nodes."""
    for index, level in enumerate(levels):
        rows: dict[str, list[view.NodeView]] = {}
        for node in nodes:
            rows.setdefault(f"{level}={node.domains[index]}", []).append(node)
        if 1 < len(rows) <= GROUPS_SHOWN:
            return level, rows
    ordered = sorted(nodes, key=lambda n: n.name)
    size = max(RUN, -(-len(ordered) // GROUPS_SHOWN))
    runs = [ordered[i : i + size] for i in range(0, len(ordered), size)]
    return "nodes", {f"#{run[0].name}-{run[-1].name}": run for run in runs}


def _aggregated(nodes: list[view.NodeView], levels: Sequence[str], label: str, static: bool) -> str:
    kind, rows = _groups(nodes, levels)
    lines = [
        f"<p>{len(nodes)} nodes: one row per {e(kind)} (open a row for its nodes)</p>",
        "<table id=groups><tr><th>domain</th><th>nodes</th><th>GPUs</th><th>by state</th><th>by queue</th>"
        "<th>stranded GPU-milli</th></tr>",
    ]
    for name, members in sorted(rows.items()):
        cells = [cell for node in members for cell in node.cells]
        states = Counter(cell.state for cell in cells)
        queues = Counter(cell.queue for cell in cells if cell.queue)
        bar = "".join(
            f'<span title="{count} {state}" style="width:{300 * count / max(1, len(cells)):.1f}px;'
            f'{_cell_style(state, "")}" class="cell {state}"></span>'
            for state, count in sorted(states.items())
        )
        by_queue = ", ".join(f"{e(q)} {n}" for q, n in queues.most_common(5))
        shown = name if not name.startswith("=") else "(no label)"
        link = e(shown) if static else f'<a href="?{_query(label=label, within=name)}">{e(shown)}</a>'
        lines.append(
            f'<tr data-group="{e(name)}"><td>{link}</td><td>{len(members)}</td><td>{len(cells)}</td>'
            f"<td><div class=bar>{bar}</div></td><td>{by_queue or '-'}</td>"
            f"<td>{sum(n.fragmentation_milli for n in members):.0f}</td></tr>"
        )
    lines.append("</table>")
    return "".join(lines)


def _query(**params: str) -> str:
    return e(urllib.parse.urlencode({k: v for k, v in params.items() if v}))


def _detailed(nodes: list[view.NodeView], levels: Sequence[str], viewer: view.Redacted) -> str:
    by_domain: dict[tuple[str, ...], list[view.NodeView]] = {}
    for node in nodes:
        by_domain.setdefault(node.domains, []).append(node)
    out = []
    for domains, members in sorted(by_domain.items()):
        heading = " / ".join(f"{level}={value}" for level, value in zip(levels, domains, strict=True) if value)
        out.append(f"<div class=domain>{e(heading or 'nodes without topology labels')}</div><div class=nodes>")
        for node in sorted(members, key=lambda n: n.name):
            out.append(_node(node, viewer))
        out.append("</div>")
    return "".join(out)


def _node(node: view.NodeView, viewer: view.Redacted) -> str:
    cells = []
    for index, cell in enumerate(node.cells):
        pods = ", ".join(viewer.pod(key) for key in cell.pods)
        title = f"GPU {index}: {cell.state}" + (f", {cell.used_milli}m used" if cell.used_milli else "")
        # A held GPU in no queue is held by a pod another scheduler bound (docs/operator.md).
        owner = f", queue {cell.queue}" if cell.queue else (", no queue (another scheduler's)" if cell.pods else "")
        title += owner + (f", pods {pods}" if pods else "")
        title += f", NVLink clique {cell.clique}" if cell.clique >= 0 else ""
        cells.append(
            f'<i class="cell {cell.state}" data-gpu={index} data-state={cell.state} data-queue="{e(cell.queue)}" '
            f'style="{_cell_style(cell.state, cell.queue)}" title="{e(title)}"></i>'
        )
    cordoned = "" if node.schedulable else " cordoned"
    return (
        f'<div class="node{cordoned}" data-node="{e(node.name)}" title="fragmentation '
        f'{node.fragmentation_milli:.0f} GPU-milli">{e(node.name)}<div class=cells>{"".join(cells)}</div>'
        f"{_zones(node)}</div>"
    )


def _zones(node: view.NodeView) -> str:
    """A node's NUMA zones: per zone what is left of its CPU, memory and GPUs over what it allocates, and the
    Topology Manager policy its kubelet enforces (empty for a node that publishes no zones)."""
    if not node.zones:
        return ""
    rows = "".join(
        f'<tr data-zone="{e(zone.name)}"><td>{e(zone.name)}</td>'
        + "".join(
            f'<td data-resource="{e(a.resource)}">{e(a.resource)} {e(a.available)}/{e(a.allocatable)}</td>'
            for a in zone.amounts
        )
        + "</tr>"
        for zone in node.zones
    )
    return (
        f'<table class=zones data-policy="{e(node.numa_policy)}" title="NUMA zones: available/allocatable">'
        f"<caption>NUMA {e(node.numa_policy)}</caption>{rows}</table>"
    )


def _cell_style(state: str, queue: str) -> str:
    if state in (view.WHOLE, view.SHARED):
        return f"background:{queue_colour(queue) if queue else '#607d8b'}"
    return ""


# --- queues ----------------------------------------------------------------------------------------------------

_QUEUE_COLUMNS = (
    ("allocated", "allocated"),
    ("borrowed", "borrowed"),
    ("guaranteedInUse", "guarantee in use"),
    ("decayedUsage", "decayed usage"),
)


def _amounts(value: object) -> str:
    if isinstance(value, Mapping) and value:
        return "<br>".join(f"{e(k)} {e(v)}" for k, v in value.items())
    return "-"


def queues(rows: Sequence[view.QueueRow]) -> str:
    """The queues with their GPUs as bars against guarantee and limit (:func:`charts.queue_bar`), the amounts as
    their status writes them, and the shares in percent (a ``data-status`` attribute keeps the status's text)."""
    if not rows:
        return "<p>No queues: every pod counts against the implied queue <i>default</i>.</p>"
    head = "".join(
        f"<th>{e(h)}</th>"
        for h in (
            "queue",
            "GPUs: held, guarantee, limit",
            "weight",
            "guarantee",
            "limit",
            *(title for _, title in _QUEUE_COLUMNS),
            "fair share",
            "dominant share",
            "rank share",
            "waiting pods (gangs)",
        )
    )
    scale = charts.queue_scale(rows)
    out = [charts.QUEUE_LEGEND, f"<table id=queues><tr>{head}</tr>"]
    for row in rows:
        s = row.status
        indent = "&nbsp;" * 4 * row.depth
        swatch = f'<i class="cell whole" style="display:inline-block;{_cell_style(view.WHOLE, row.name)}"></i> '
        bar = "-" if row.gpus is None else charts.queue_bar(row.gpus, colour=queue_colour(row.name), scale=scale)
        fields = "".join(f'<td data-field="{key}">{_amounts(s.get(key))}</td>' for key, _ in _QUEUE_COLUMNS)
        shares = "".join(
            f'<td data-field={key} data-status="{e(s.get(key, ""))}">{e(charts.share(s.get(key, "-")))}</td>'
            for key in ("fairShare", "dominantShare", "rankShare")
        )
        out.append(
            f'<tr data-queue="{e(row.name)}"><td>{indent}{swatch}{e(row.name)}</td><td data-field=bar>{bar}</td>'
            f"<td>{row.weight:g}</td>"
            f"<td data-field=guarantee>{_amounts(row.guarantee)}</td><td data-field=limit>{_amounts(row.limit)}</td>"
            f"{fields}{shares}"
            f"<td data-field=pending>{e(s.get('pendingPods', 0))} ({e(s.get('pendingGangs', 0))})</td></tr>"
        )
    out.append("</table>")
    return "".join(out)


# --- waiting work and a job --------------------------------------------------------------------------------------


def waiting(jobs: Sequence[view.WaitingJob], viewer: view.Redacted, *, static: bool = False) -> str:
    shown = [job for job in jobs if viewer.may_see(job.namespace)]
    hidden = len(jobs) - len(shown)
    out = [
        f"<p>{len(shown)} jobs waiting, in the order they will be tried"
        + (f"; {hidden} more in namespaces you may not list" if hidden else "")
        + "</p>"
    ]
    if jobs:  # counts by class name no job: the hidden ones count too
        out.append(charts.waits(jobs))
    if not shown:
        return "".join(out)
    out.append(
        "<table id=waiting><tr><th>#</th><th>job</th><th>kind</th><th>queue</th><th>where</th>"
        "<th>position in its queue</th><th>gang</th><th>waiting for</th><th>why it waits</th></tr>"
    )
    for index, job in enumerate(shown, start=1):
        name = f"{job.namespace}/{job.name}"
        link = e(name) if static else f'<a href="/job/{e(job.key)}">{e(name)}</a>'
        gang = f"{job.placed}/{job.min_member} placed, {job.exist} exist" if job.kind == "podgroup" else "-"
        position = "-" if job.position is None else str(job.position)
        out.append(
            f'<tr data-job="{e(job.key)}"><td>{index}</td><td>{link}</td><td>{e(job.kind)}</td><td>{e(job.queue)}</td>'
            f"<td>{e(job.where)}</td><td data-field=position>{position}</td><td data-field=gang>{e(gang)}</td>"
            f"<td data-field=waited>{charts.duration(job.waited_s) if job.waited_s else '-'}</td>"
            f"<td data-field=reason>{e(job.reason or '-')}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)


def job(page: view.JobPage) -> str:
    members = "".join(
        f'<tr data-member="{e(m.key)}"><td>{e(m.key)}</td><td>{e(m.node or "-")}</td><td>{e(m.state)}</td></tr>'
        for m in page.members
    )
    events = "".join(f"<li>{e(line)}</li>" for line in page.events) or "<li>none recorded by this replica</li>"
    return (
        f"<h2>{e(page.kind)} {e(page.namespace)}/{e(page.key.rsplit('/', 1)[-1])}</h2>"
        f"<p>queue {e(page.queue)}, phase <span id=phase>{e(page.phase)}</span></p>"
        f"<table id=members><tr><th>member</th><th>node</th><th>state</th></tr>{members}</table>"
        f"<h3>Why (gpusched explain)</h3><pre id=explain>{e(page.explanation)}</pre>"
        f"<h3>Events</h3><ul id=events>{events}</ul>"
    )


def standby(leadership: view.Leadership) -> str:
    """What a standby shows instead of its (unscheduled) view."""
    where = (
        f' <a id=leader href="{e(leadership.leader_url)}">Open the leader\'s dashboard</a>.'
        if leadership.leader_url
        else ""
    )
    who = f"the leader is <b>{e(leadership.leader)}</b>" if leadership.leader else "no leader is known yet"
    return f"<p class=standby>This replica is a standby: it does not schedule; {who}.{where}</p>"


def comparison(maps: Sequence[tuple[str, view.ClusterMap]], *, title: str) -> str:
    """Cluster maps side by side (one per policy of a simulation), as one page with no script."""
    viewer = view.Redacted()
    body = f"<h2>{e(title)}</h2>" + "".join(
        f'<section data-policy="{e(name)}"><h2>{e(name)}</h2>{cluster_map(cluster, viewer, static=True)}</section>'
        for name, cluster in maps
    )
    return document(
        title=title,
        path="",
        body=body,
        version="static",
        viewer=viewer,
        leadership=view.Leadership(leading=True),
        live=False,
    )
