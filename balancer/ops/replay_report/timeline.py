"""One policy's timeline as inline SVG: a line per broker (its load ratio), the 85 % line,
the stretches where a broker was at or over 85 % shaded, a strip under the plot where a
bundle was over its limit, gaps in the recording in grey, and a mark per action above the
plot (split: triangle, move: circle, offload: square), each with a hover title.

Scaling: a day is 1440 windows of tens of brokers. The windows are grouped into at most
`MAX_COLUMNS` consecutive columns (about two pixels each) and each broker's line takes the
column's MAXIMUM, not its mean, so an overload of one window still shows; shading and the
bundle strip are per column too. Every action keeps its own mark. Loads above the plot's
top (at most 200 %) are drawn at the top; the hover title gives the real peak.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from balancer.core.replay.result import ActionKind, PolicyRun, ReplayAction, ReplayResult
from balancer.core.replay.summary import (
    BROKER_OVERLOAD_RATIO,
    BUNDLE_LIMIT_RATIO,
    HOUR_MS,
    window_lengths_ms,
)
from balancer.ops.replay_report.text import format_time

MAX_COLUMNS = 600
PLOT_WIDTH = 1200
LEFT = 52
RIGHT = 16
MARK_LANE = 50  # above the plot: one row per action kind
PLOT_HEIGHT = 240
STRIP = 12  # under the plot: bundles over their limit
AXIS = 22
WIDTH = LEFT + PLOT_WIDTH + RIGHT
HEIGHT = MARK_LANE + PLOT_HEIGHT + STRIP + AXIS
MAX_TOP_RATIO = 2.0

PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31",
)  # fmt: skip
MARK_ROW = {ActionKind.SPLIT: 10, ActionKind.MOVE: 24, ActionKind.OFFLOAD: 38}


def broker_colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


@dataclass(frozen=True, slots=True)
class Column:
    start_ms: int
    end_ms: int
    load: dict[str, float]  # broker -> its highest load in the column's windows
    brokers_over: int  # the most brokers at/over 85 % in one window of the column
    bundles_over: int  # the most bundles over their limit in one window of the column


def columns(run: PolicyRun, window_s: int, max_columns: int = MAX_COLUMNS) -> list[Column]:
    """The run's windows grouped into at most `max_columns` columns (module docstring)."""
    windows = run.windows
    lengths = window_lengths_ms(windows, window_s)
    count = min(len(windows), max_columns)
    out: list[Column] = []
    for i in range(count):
        lo, hi = i * len(windows) // count, (i + 1) * len(windows) // count
        load: dict[str, float] = {}
        brokers_over = bundles_over = 0
        for w in windows[lo:hi]:
            for broker, ratio in w.broker_load.items():
                load[broker] = max(ratio, load.get(broker, ratio))
            brokers_over = max(
                brokers_over, sum(r >= BROKER_OVERLOAD_RATIO for r in w.broker_load.values())
            )
            bundles_over = max(
                bundles_over, sum(r >= BUNDLE_LIMIT_RATIO for r in w.bundles_over.values())
            )
        out.append(
            Column(
                start_ms=windows[lo].window_end_ms - lengths[lo],
                end_ms=windows[hi - 1].window_end_ms,
                load=load,
                brokers_over=brokers_over,
                bundles_over=bundles_over,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class Scale:
    start_ms: int
    end_ms: int
    top_ratio: float

    def x(self, at_ms: int) -> float:
        span = max(1, self.end_ms - self.start_ms)
        clamped = min(max(at_ms, self.start_ms), self.end_ms)
        return LEFT + PLOT_WIDTH * (clamped - self.start_ms) / span

    def y(self, ratio: float) -> float:
        return MARK_LANE + PLOT_HEIGHT * (1 - min(max(ratio, 0.0), self.top_ratio) / self.top_ratio)


def scale_for(result: ReplayResult) -> Scale:
    """One time axis for every policy (so their timelines line up), from the first window's
    start to the last window's end; the load axis to the highest peak, at least 110 %."""
    lengths = [window_lengths_ms(run.windows, result.window_s) for run in result.runs]
    starts = [
        r.windows[0].window_end_ms - n[0]
        for r, n in zip(result.runs, lengths, strict=True)
        if r.windows
    ]
    start = min([result.start_ms, *starts])
    end = max(result.end_ms, start + result.window_s * 1000)
    peak = max(
        (v for r in result.runs for w in r.windows for v in w.broker_load.values()), default=0.0
    )
    top = min(MAX_TOP_RATIO, max(1.1, math.ceil(peak * 4) / 4))
    return Scale(start_ms=start, end_ms=end, top_ratio=top)


def _tick_step_ms(span_ms: int) -> int:
    for step in (10 * 60_000, 30 * 60_000, HOUR_MS, 2 * HOUR_MS, 3 * HOUR_MS, 6 * HOUR_MS):
        if span_ms / step <= 24:
            return step
    return 24 * HOUR_MS


def _axes(scale: Scale) -> list[str]:
    out = [
        f'<rect class="plot" x="{LEFT}" y="{MARK_LANE}" width="{PLOT_WIDTH}" '
        f'height="{PLOT_HEIGHT}"/>'
    ]
    ratio = 0.0
    while ratio <= scale.top_ratio + 1e-9:
        y = scale.y(ratio)
        out.append(
            f'<line class="grid" x1="{LEFT}" x2="{LEFT + PLOT_WIDTH}" y1="{y:.1f}" y2="{y:.1f}"/>'
        )
        out.append(f'<text class="ylabel" x="{LEFT - 6}" y="{y + 4:.1f}">{ratio:.0%}</text>')
        ratio += 0.25
    y85 = scale.y(BROKER_OVERLOAD_RATIO)
    out.append(
        f'<line class="threshold" x1="{LEFT}" x2="{LEFT + PLOT_WIDTH}" '
        f'y1="{y85:.1f}" y2="{y85:.1f}">'
        "<title>85 %: Pulsar's broker overload threshold</title></line>"
    )
    step = _tick_step_ms(scale.end_ms - scale.start_ms)
    tick = scale.start_ms - scale.start_ms % step + step
    base = MARK_LANE + PLOT_HEIGHT + STRIP
    while tick <= scale.end_ms:
        x = scale.x(tick)
        label = format_time(tick)[11:16] if tick % (24 * HOUR_MS) else format_time(tick)[5:10]
        out.append(f'<line class="tick" x1="{x:.1f}" x2="{x:.1f}" y1="{base}" y2="{base + 4}"/>')
        out.append(f'<text class="xlabel" x="{x:.1f}" y="{base + 16}">{label}</text>')
        tick += step
    return out


def _runs_of(cols: Sequence[Column], over: str) -> list[tuple[int, int, int]]:
    """(first, last, most) of each run of columns with something over."""
    found: list[tuple[int, int, int]] = []
    for i, col in enumerate(cols):
        n = col.brokers_over if over == "brokers" else col.bundles_over
        if not n:
            continue
        if found and found[-1][1] == i - 1:
            first, _, most = found[-1]
            found[-1] = (first, i, max(most, n))
        else:
            found.append((i, i, n))
    return found


def _shading(cols: Sequence[Column], scale: Scale) -> list[str]:
    out = []
    for first, last, most in _runs_of(cols, "brokers"):
        x0, x1 = scale.x(cols[first].start_ms), scale.x(cols[last].end_ms)
        peak = max(v for c in cols[first : last + 1] for v in c.load.values())
        title = (
            f"{format_time(cols[first].start_ms)} .. {format_time(cols[last].end_ms)}: up to "
            f"{most} broker(s) at/over 85 % at once, peak {peak:.0%}"
        )
        out.append(
            f'<rect class="overload" x="{x0:.1f}" y="{MARK_LANE}" width="{max(x1 - x0, 1):.1f}" '
            f'height="{PLOT_HEIGHT}"><title>{escape(title)}</title></rect>'
        )
    for first, last, most in _runs_of(cols, "bundles"):
        x0, x1 = scale.x(cols[first].start_ms), scale.x(cols[last].end_ms)
        title = (
            f"{format_time(cols[first].start_ms)} .. {format_time(cols[last].end_ms)}: up to "
            f"{most} bundle(s) over their limit at once"
        )
        out.append(
            f'<rect class="bundles-over" x="{x0:.1f}" y="{MARK_LANE + PLOT_HEIGHT + 2}" '
            f'width="{max(x1 - x0, 1):.1f}" height="{STRIP - 4}">'
            f"<title>{escape(title)}</title></rect>"
        )
    return out


def _gaps(result: ReplayResult, scale: Scale) -> list[str]:
    out = []
    for first, last in result.gaps_ms:
        x0 = scale.x(first - result.window_s * 1000)
        x1 = scale.x(last)
        title = f"no samples recorded: windows ending {format_time(first)} .. {format_time(last)}"
        out.append(
            f'<rect class="gap" x="{x0:.1f}" y="{MARK_LANE}" width="{max(x1 - x0, 1):.1f}" '
            f'height="{PLOT_HEIGHT}"><title>{escape(title)}</title></rect>'
        )
    return out


def _lines(
    cols: Sequence[Column], brokers: Sequence[str], scale: Scale, window_s: int
) -> list[str]:
    out = []
    for index, broker in enumerate(brokers):
        parts: list[str] = []
        previous_end: int | None = None
        for col in cols:
            ratio = col.load.get(broker)
            if ratio is None:  # absent from the column: its line breaks
                previous_end = None
                continue
            # A hole of more than one window in the recording breaks it too.
            joined = previous_end is not None and col.start_ms - previous_end <= window_s * 1000
            point = f"{scale.x(col.end_ms):.1f} {scale.y(ratio):.1f}"
            # `h0` with round caps: a point on its own still shows as a dot.
            parts.append(f"L{point}" if joined else f"M{point} h0")
            previous_end = col.end_ms
        if not parts:
            continue
        peak = max(c.load[broker] for c in cols if broker in c.load)
        out.append(
            f'<path class="load" stroke="{broker_colour(index)}" data-broker="{escape(broker)}" '
            f'd="{" ".join(parts)}"><title>{escape(broker)} (peak {peak:.0%})</title></path>'
        )
    return out


def action_title(action: ReplayAction) -> str:
    head = f"{format_time(action.at_ms)} {action.kind.value} {action.cluster}/{action.subject}"
    if action.kind == ActionKind.MOVE:
        head += f": {action.source_broker or '?'} -> {action.destination_broker or '?'}"
    elif action.kind == ActionKind.SPLIT and action.children:
        head += f" into {', '.join(action.children)}"
    if action.sessions_moved:
        head += f"; {action.sessions_moved:,} sessions moved"
    return head + (f" ({action.reason})" if action.reason else "")


def _mark(action: ReplayAction, scale: Scale) -> str:
    x, y = scale.x(action.at_ms), MARK_ROW[action.kind]
    title = f"<title>{escape(action_title(action))}</title>"
    kind = action.kind.value
    if action.kind == ActionKind.SPLIT:
        return (
            f'<path class="mark split" data-kind="{kind}" '
            f'd="M{x:.1f} {y - 5} L{x + 5:.1f} {y + 4} L{x - 5:.1f} {y + 4} Z">{title}</path>'
        )
    if action.kind == ActionKind.MOVE:
        return (
            f'<circle class="mark move" data-kind="{kind}" cx="{x:.1f}" cy="{y}" r="4">'
            f"{title}</circle>"
        )
    return (
        f'<rect class="mark offload" data-kind="{kind}" x="{x - 4:.1f}" y="{y - 4}" '
        f'width="8" height="8">{title}</rect>'
    )


def brokers_of(run: PolicyRun) -> list[str]:
    return sorted({b for w in run.windows for b in w.broker_load})


def timeline_svg(result: ReplayResult, run: PolicyRun, scale: Scale) -> str:
    cols = columns(run, result.window_s)
    label = (
        f"{run.policy}: broker load over time ({len(run.windows)} windows in {len(cols)} columns), "
        f"{len(run.actions)} actions"
    )
    parts = [
        f'<svg class="timeline" data-policy="{escape(run.policy)}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
        f'aria-label="{escape(label)}">',
        f"<title>{escape(label)}</title>",
        *_axes(scale),
        *_gaps(result, scale),
        *_shading(cols, scale),
        *_lines(cols, brokers_of(run), scale, result.window_s),
    ]
    for kind, row in MARK_ROW.items():
        parts.append(f'<text class="lane" x="{LEFT - 6}" y="{row + 4}">{kind.value}</text>')
    parts.extend(_mark(a, scale) for a in sorted(run.actions, key=lambda a: a.at_ms))
    parts.append("</svg>")
    return "\n".join(parts)
