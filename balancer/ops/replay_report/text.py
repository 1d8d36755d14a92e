"""The replay report as `replay` prints it by default: what was replayed, one table with a
column per policy, then the hours where the policies differ most. Plain text (no colours,
no terminal codes), so it reads the same piped to a file; about 80 columns for the four
default policies (long policy names wrap at their hyphens in the header)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from balancer.core.replay.result import ReplayResult
from balancer.core.replay.summary import (
    PolicySummary,
    ReactionFigures,
    ReplaySummary,
    summarize,
)

LABEL_WIDTH = 30
MIN_COLUMN = 10
HEADER_PIECE = 14  # a policy name longer than this wraps at its hyphens


def format_time(at_ms: int) -> str:
    """UTC, minute precision: `2026-11-29 14:03Z` (seconds when not on the minute)."""
    when = datetime.fromtimestamp(at_ms / 1000, tz=UTC)
    return when.strftime("%Y-%m-%d %H:%M:%SZ" if when.second else "%Y-%m-%d %H:%MZ")


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _header_lines(name: str) -> list[str]:
    if len(name) <= HEADER_PIECE:
        return [name]
    lines: list[str] = []
    for piece in name.split("-"):
        joined = f"{lines[-1]}{piece}" if lines else piece
        if lines and len(joined) + 1 <= HEADER_PIECE:
            lines[-1] = f"{joined}-"
        else:
            lines.append(f"{piece}-")
    lines[-1] = lines[-1].removesuffix("-")
    return lines


def _reaction_rows(
    title: str, get: Callable[[PolicySummary], ReactionFigures]
) -> list[tuple[str, Callable[[PolicySummary], str]]]:
    return [
        (f"{title} overloads", lambda p: str(get(p).overloads)),
        ("  never acted on", lambda p: str(get(p).never_acted_on)),
        ("  first action, median", lambda p: format_duration(get(p).median_time_to_action_s)),
        ("  first action, max", lambda p: format_duration(get(p).max_time_to_action_s)),
    ]


ROWS: list[tuple[str, Callable[[PolicySummary], str]]] = [
    ("splits", lambda p: str(p.splits)),
    ("moves", lambda p: str(p.moves)),
    ("offloads", lambda p: str(p.offloads)),
    ("sessions moved", lambda p: f"{p.sessions_moved:,}"),
    ("bundle-minutes over limits", lambda p: f"{p.bundle_minutes_over:.1f}"),
    ("broker-minutes at/over 85 %", lambda p: f"{p.broker_minutes_over:.1f}"),
    ("peak broker load", lambda p: f"{p.peak_broker_load:.0%}"),
    ("bundles at the end", lambda p: str(p.bundles_at_end)),
    *_reaction_rows("bundle", lambda p: p.bundle_reaction),
    *_reaction_rows("broker", lambda p: p.broker_reaction),
]


def policy_table(policies: Sequence[PolicySummary]) -> list[str]:
    headers = [_header_lines(p.policy) for p in policies]
    width = max([MIN_COLUMN, *(len(piece) for lines in headers for piece in lines)])
    depth = max((len(lines) for lines in headers), default=1)
    out: list[str] = []
    for row in range(depth):
        cells = [
            (lines[row - (depth - len(lines))] if row >= depth - len(lines) else "").rjust(width)
            for lines in headers
        ]
        out.append(("policy" if row == depth - 1 else "").ljust(LABEL_WIDTH) + "  ".join(cells))
    out.append("-" * (LABEL_WIDTH + (width + 2) * len(policies) - 2))
    for label, value in ROWS:
        out.append(label.ljust(LABEL_WIDTH) + "  ".join(value(p).rjust(width) for p in policies))
    return out


def render_text(result: ReplayResult, summary: ReplaySummary | None = None) -> str:
    summary = summary if summary is not None else summarize(result)
    windows = max((len(run.windows) for run in result.runs), default=0)
    rejected = sum(result.samples_rejected.values())
    lines = [
        f"Replay of {result.source}: {format_time(result.start_ms)} .. "
        f"{format_time(result.end_ms)}, {windows} windows of {result.window_s} s, "
        f"clusters {', '.join(result.clusters) or '-'}",
        f"{result.topics:,} topics, {result.samples:,} samples "
        f"({rejected:,} rejected, {result.samples_late:,} late)"
        + (f", {len(result.gaps_ms)} gaps in the recording" if result.gaps_ms else ""),
    ]
    for reason, count in sorted(result.samples_rejected.items()):
        lines.append(f"  rejected, {reason}: {count:,}")
    lines.append("")
    for p in summary.policies:
        lines.append(f"{p.policy}: {p.description}")
    lines.append("")
    lines.extend(policy_table(summary.policies))
    lines.append("")
    if len(summary.policies) < 2:
        lines.append("Hours where the policies differ most: only one policy ran.")
    elif not summary.top_hours:
        lines.append("Hours where the policies differ most: none, they agree in every hour.")
    else:
        lines.append(
            "Hours where the policies differ most (score: the spread between policies of\n"
            "broker-minutes at/over 85 %, plus that of bundle-minutes over limits, plus that "
            "of actions):"
        )
        for hour in summary.top_hours:
            lines.append(f"  {format_time(hour.hour_start_ms)}  score {hour.score:.1f}")
            for cell in hour.per_policy:
                lines.append(
                    f"    {cell.policy:<28} broker-min {cell.broker_minutes_over:6.1f}  "
                    f"bundle-min {cell.bundle_minutes_over:6.1f}  actions {cell.actions:4d}"
                )
    return "\n".join(lines) + "\n"
