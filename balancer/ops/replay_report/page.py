"""The replay report as one self-contained HTML page (`replay --output html PATH`): the
summary table on top (the best policy's cell of each "lower is better" figure marked), the
hours where the policies differ most, then per policy its timeline (timeline.py). No
script, no external resource: inline CSS and SVG only, so the file can be mailed or
attached to a ticket and opened anywhere, offline.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from html import escape
from pathlib import Path

from balancer.core.replay.result import ReplayResult
from balancer.core.replay.summary import PolicySummary, ReplaySummary, summarize
from balancer.ops.replay_report.text import format_duration, format_time
from balancer.ops.replay_report.timeline import (
    MAX_COLUMNS,
    broker_colour,
    brokers_of,
    scale_for,
    timeline_svg,
)

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px 24px; color: #222; background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 20px 0 4px; }
p.meta, p.note { color: #555; margin: 2px 0; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { padding: 3px 10px; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; white-space: nowrap; }
thead th { border-bottom: 2px solid #999; }
td.best { background: #e3f4e1; font-weight: 600; }
section.policy { margin-top: 18px; }
svg.timeline { display: block; max-width: 100%; height: auto; }
svg .plot { fill: #fafafa; stroke: #ccc; }
svg .grid { stroke: #e4e4e4; }
svg .threshold { stroke: #d62728; stroke-dasharray: 6 4; stroke-width: 1.5; }
svg .overload { fill: #d62728; fill-opacity: 0.12; }
svg .bundles-over { fill: #ff7f0e; }
svg .gap { fill: #999; fill-opacity: 0.25; }
svg .load { fill: none; stroke-width: 1.3; stroke-opacity: 0.85; stroke-linecap: round;
  stroke-linejoin: round; }
svg .load:hover { stroke-width: 3; stroke-opacity: 1; }
svg .mark.split { fill: #2ca02c; } svg .mark.move { fill: #1f77b4; }
svg .mark.offload { fill: #9467bd; }
svg .mark { stroke: #fff; stroke-width: 0.8; } svg .mark:hover { stroke: #000; }
svg text { font: 11px system-ui, sans-serif; fill: #555; }
svg .ylabel, svg .lane { text-anchor: end; } svg .xlabel { text-anchor: middle; }
svg .tick { stroke: #999; }
.legend span { display: inline-block; margin: 0 10px 2px 0; font-size: 12px; }
.legend i { display: inline-block; width: 14px; height: 3px; vertical-align: middle;
  margin-right: 4px; }
"""

# (label, value, a number where lower is better or None) for each summary column.
Figure = tuple[str, Callable[[PolicySummary], str], Callable[[PolicySummary], float] | None]


def _or_inf(value: float | None) -> float:
    return float("inf") if value is None else value


FIGURES: list[Figure] = [
    ("splits", lambda p: str(p.splits), None),
    ("moves", lambda p: str(p.moves), None),
    ("offloads", lambda p: str(p.offloads), None),
    ("sessions moved", lambda p: f"{p.sessions_moved:,}", lambda p: p.sessions_moved),
    (
        "bundle-minutes over limits",
        lambda p: f"{p.bundle_minutes_over:.1f}",
        lambda p: p.bundle_minutes_over,
    ),
    (
        "broker-minutes at/over 85 %",
        lambda p: f"{p.broker_minutes_over:.1f}",
        lambda p: p.broker_minutes_over,
    ),
    ("peak broker load", lambda p: f"{p.peak_broker_load:.0%}", lambda p: p.peak_broker_load),
    (
        "overloads never acted on (bundle / broker)",
        lambda p: f"{p.bundle_reaction.never_acted_on} / {p.broker_reaction.never_acted_on}",
        lambda p: p.bundle_reaction.never_acted_on + p.broker_reaction.never_acted_on,
    ),
    (
        "first action, bundle: median / max",
        lambda p: (
            f"{format_duration(p.bundle_reaction.median_time_to_action_s)} / "
            f"{format_duration(p.bundle_reaction.max_time_to_action_s)}"
        ),
        lambda p: _or_inf(p.bundle_reaction.median_time_to_action_s),
    ),
    (
        "first action, broker: median / max",
        lambda p: (
            f"{format_duration(p.broker_reaction.median_time_to_action_s)} / "
            f"{format_duration(p.broker_reaction.max_time_to_action_s)}"
        ),
        lambda p: _or_inf(p.broker_reaction.median_time_to_action_s),
    ),
]


def summary_table(policies: Sequence[PolicySummary]) -> str:
    head = "".join(f"<th>{escape(label)}</th>" for label, _, _ in FIGURES)
    best: list[float | None] = []
    for _, _, key in FIGURES:
        values = [key(p) for p in policies] if key else []
        # Marked only where policies differ: a shared value is no one's win.
        best.append(min(values) if len(set(values)) > 1 else None)
    rows = []
    for p in policies:
        cells = []
        for (_, show, key), low in zip(FIGURES, best, strict=True):
            mark = ' class="best"' if key is not None and low is not None and key(p) == low else ""
            cells.append(f"<td{mark}>{escape(show(p))}</td>")
        rows.append(
            f'<tr><td><a href="#policy-{escape(p.policy)}">{escape(p.policy)}</a></td>'
            f"{''.join(cells)}</tr>"
        )
    return (
        f'<table class="summary"><thead><tr><th>policy</th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def hours_table(summary: ReplaySummary) -> str:
    if len(summary.policies) < 2:
        return '<p class="note">Only one policy ran: nothing to compare.</p>'
    if not summary.top_hours:
        return '<p class="note">The policies agree in every hour.</p>'
    head = "".join(f"<th>{escape(p.policy)}</th>" for p in summary.policies)
    rows = []
    for hour in summary.top_hours:
        cells = "".join(
            f"<td>{c.broker_minutes_over:.1f} / {c.bundle_minutes_over:.1f} / {c.actions}</td>"
            for c in hour.per_policy
        )
        rows.append(
            f"<tr><td>{escape(format_time(hour.hour_start_ms))}</td>"
            f"<td>{hour.score:.1f}</td>{cells}</tr>"
        )
    return (
        '<p class="note">Each cell: broker-minutes at/over 85 % / bundle-minutes over limits / '
        "actions in that hour. Score: the spread between policies of each, added.</p>"
        f'<table class="hours"><thead><tr><th>hour (UTC)</th><th>score</th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _legend(brokers: Sequence[str]) -> str:
    spans = "".join(
        f'<span><i style="background:{broker_colour(i)}"></i>{escape(b)}</span>'
        for i, b in enumerate(brokers)
    )
    return f'<p class="legend">{spans}</p>'


def render_html(result: ReplayResult, summary: ReplaySummary | None = None) -> str:
    summary = summary if summary is not None else summarize(result)
    scale = scale_for(result)
    windows = max((len(run.windows) for run in result.runs), default=0)
    sections = []
    for run, figures in zip(result.runs, summary.policies, strict=True):
        sections.append(
            f'<section class="policy" id="policy-{escape(run.policy)}" '
            f'data-policy="{escape(run.policy)}">'
            f"<h2>{escape(run.policy)}</h2>"
            f'<p class="meta">{escape(run.description)}: {figures.splits} splits, '
            f"{figures.moves} moves, {figures.offloads} offloads, "
            f"{figures.sessions_moved:,} sessions moved</p>"
            f"{timeline_svg(result, run, scale)}{_legend(brokers_of(run))}</section>"
        )
    title = f"Replay report: {result.source}"
    meta = (
        f"{format_time(result.start_ms)} .. {format_time(result.end_ms)}, {windows} windows "
        f"of {result.window_s} s; clusters {', '.join(result.clusters) or '-'}; "
        f"{result.topics:,} topics, {result.samples:,} samples "
        f"({sum(result.samples_rejected.values()):,} rejected, {result.samples_late:,} late"
        + (f", {len(result.gaps_ms)} gaps" if result.gaps_ms else "")
        + ")"
    )
    how = (
        f"Each timeline: a line per broker (its load, the highest of its resources; hover for "
        f"its name), the dashed red line at 85 % (Pulsar's overload threshold), red shading "
        f"where a broker was at or over it, an orange strip under the plot where a bundle was "
        f"over its limit, grey where the recording has no samples, and above the plot a mark "
        f"per action (triangle: split, circle: move, square: offload; hover for details). "
        f"Windows are grouped into at most {MAX_COLUMNS} columns, each showing the highest "
        f"load of its windows, so a one-window peak still shows."
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f'<h1>{escape(title)}</h1><p class="meta">{escape(meta)}</p>'
        f"<h2>Summary</h2>{summary_table(summary.policies)}"
        f"<h2>Hours where the policies differ most</h2>{hours_table(summary)}"
        f'<p class="note">{escape(how)}</p>'
        f"{''.join(sections)}</body></html>\n"
    )


def write_html(
    result: ReplayResult, path: str | os.PathLike[str], summary: ReplaySummary | None = None
) -> None:
    Path(path).write_text(render_html(result, summary), encoding="utf-8")
