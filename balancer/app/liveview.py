"""What `pulsar-balancer run` shows a person: a live view while it runs, a summary at the end.

Written for someone who has never seen Pulsar internals: a "bundle" is explained as a slice
of a namespace's topics that one broker serves, and loads are shown as a share of the limit.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.panel import Panel
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from balancer.app.app_handler import LiveState
from balancer.controller.outcome import Outcome, target_of
from balancer.core.broker_load import BrokerLoad
from balancer.core.bundles import BundleRange
from balancer.core.decisions import DecisionKind, OffloadDecision
from balancer.core.load import BundleLoad
from balancer.core.moves.model import MoveDecision
from balancer.core.partitions import LoneHotTopic
from balancer.core.results import ActionResult
from balancer.core.rollout_record import RollProgress

LOAD_CAPTION = (
    "load: the bundle's traffic as a share of its limit (Pulsar's defaults: 30,000 msg/s "
    "in+out, 100 MiB/s, 1,000 topics, 1,000 producers+consumers); over 100 % is overloaded"
)
# Narrower than this, the tables' eight columns wrap into an unreadable column of words.
MIN_TABLE_WIDTH = 60
INTRO = (
    "Pulsar spreads each namespace's topics over 'bundles' (hash ranges); one broker serves "
    "a whole bundle. When a bundle carries more than its limit, the balancer splits it - "
    "once, at flow-equal points - and moves old data of topics past a size limit to tiered "
    "storage (offload)."
)


# Brokers named on a cluster's line, and moves in the panel: the panel is drawn in every layout.
BROKERS_SHOWN = 6
MOVES_SHOWN = 3
DECISION_ROWS = 8  # rows of "Latest decisions" at most


def _pct(ratio: float) -> Text:
    style = "bold red" if ratio > 1.0 else ("yellow" if ratio > 0.8 else "green")
    return Text(f"{ratio * 100:5.0f} %", style=style)


@dataclass(frozen=True)
class LiveFrame:
    """What one frame of the live view shows, read from `LiveState` under its lock once."""

    mode: str
    clock: str
    batches: int
    consumed: int
    rejected: int
    late: int
    lag: int
    reporting: int
    errors: int
    over: list[tuple[BundleLoad, float]]  # most loaded first
    lone: dict[tuple[str, str], LoneHotTopic]
    outcomes: list[Outcome]  # oldest first (every one `LiveState` keeps)
    hit_count_threshold: int = 3
    brokers: dict[str, list[BrokerLoad]] | None = None  # cluster -> most loaded first
    moves: list[Outcome] | None = None  # the newest moves' outcomes, oldest first
    # (cluster, namespace, bundle) -> windows over its limit still needed before a split
    windows_to_split: dict[tuple[str, str, BundleRange], int] | None = None
    # cluster -> brokers marked draining (`pulsar-balancer drain`)
    draining: dict[str, tuple[str, ...]] | None = None
    # cluster -> its roll in progress (`pulsar-balancer roll start`)
    rolling: dict[str, RollProgress] | None = None


def render_live(
    live: LiveState, *, mode: str, elapsed_s: float, duration_s: float | None
) -> LiveView:
    with live.lock:
        frame = LiveFrame(
            mode=mode,
            clock=f"{elapsed_s:5.0f} s" + (f" of {duration_s:.0f} s" if duration_s else ""),
            batches=live.batches,
            consumed=live.events_consumed,
            rejected=live.events_rejected_total,
            late=live.events_late,
            lag=live.kafka_lag,
            reporting=live.bundles_reporting,
            errors=live.handler_errors,
            over=list(live.over_threshold),
            lone={(h.cluster, h.bundle): h for h in live.lone_hot_topics},
            outcomes=list(live.outcomes),
            hit_count_threshold=live.hit_count_threshold,
            brokers={c: list(b) for c, b in live.broker_loads.items()},
            moves=[o for o in live.outcomes if o.kind is DecisionKind.MOVE][-MOVES_SHOWN:],
            windows_to_split=dict(live.windows_to_split),
            draining=dict(live.draining),
            rolling=dict(live.rolling),
        )
    return LiveView(frame)


@dataclass(frozen=True)
class _Layout:
    intro: bool = True  # the explanation for newcomers
    caption: bool = True  # what "load" means
    dense: bool = False  # one line per table row, light table borders
    hot_rows: int | None = None  # bundles over their limit shown (None: all)
    decision_rows: int | None = None  # latest decisions shown (None: all)


class LiveView:
    """The live view, drawn to fit the terminal it is shown on.

    Rich redraws a live display by moving the cursor up over the previous frame and writing
    the new one: a frame must never take more rows than the terminal has (Rich would cut it
    with a bare "..."). On a terminal the view fits itself to the height at each redraw:
    the introduction goes first, then the table caption, then the tables go dense (one line
    a row, light borders), then rows (the most loaded bundles and the latest decisions stay,
    a "... N more" line counts the rest), and when not even one row of each fits, or the
    terminal is too narrow for tables, a compact view of a few one-line summaries. Rich
    renders every line to the terminal's width, so no line wraps into an extra row.
    Anywhere else (a file, a pipe) it is drawn whole.
    """

    def __init__(self, frame: LiveFrame) -> None:
        self.frame = frame
        self.decision_rows = group_outcomes(frame.outcomes)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if not options.is_terminal:
            yield from self._parts(_Layout())
            return
        for i, line in enumerate(self.fitted_lines(console, options)):
            if i:
                yield Segment.line()
            yield from line

    def fitted_lines(self, console: Console, options: ConsoleOptions) -> list[list[Segment]]:
        """The rendered lines of the richest layout that fits `options.size.height` rows."""
        options = options.update(height=None)  # parts take their natural height
        height = options.size.height

        def lines(*parts: RenderableType) -> list[list[Segment]]:
            out: list[list[Segment]] = []
            for part in parts:
                out += console.render_lines(part, options, pad=False)
            return out

        if options.max_width >= MIN_TABLE_WIDTH:
            for layout in (
                _Layout(),
                _Layout(intro=False),
                _Layout(intro=False, caption=False),
                _Layout(intro=False, caption=False, dense=True),
            ):
                whole = lines(*self._parts(layout))
                if len(whole) <= height:
                    return whole
            # Dense tables, fewer rows: the panel and each table are rendered apart.
            panel = lines(self._panel())
            hot_rows = len(self.frame.over)
            decision_rows = min(len(self.decision_rows), DECISION_ROWS)
            hot: dict[int, list[list[Segment]]] = {}
            acts: dict[int, list[list[Segment]]] = {}
            while hot_rows > 1 or decision_rows > 1:
                # A row less in the longer table; each keeps at least one.
                if hot_rows > 1 and (hot_rows >= decision_rows or decision_rows <= 1):
                    hot_rows -= 1
                else:
                    decision_rows -= 1
                if hot_rows not in hot:
                    hot[hot_rows] = lines(*self._hot(_Layout(False, False, True, hot_rows)))
                if decision_rows not in acts:
                    layout = _Layout(False, False, True, decision_rows=decision_rows)
                    acts[decision_rows] = lines(*self._decisions(layout))
                if len(panel) + len(hot[hot_rows]) + len(acts[decision_rows]) <= height:
                    return panel + hot[hot_rows] + acts[decision_rows]
        # A terminal of a few rows shows the first lines, the most important first.
        return lines(*self._compact())[:height]

    # -- parts --------------------------------------------------------------------------
    def _parts(self, layout: _Layout) -> list[RenderableType]:
        parts: list[RenderableType] = [Text(INTRO, style="dim")] if layout.intro else []
        return [*parts, self._panel(), *self._hot(layout), *self._decisions(layout)]

    def _panel(self) -> Panel:
        f = self.frame
        stream = Table.grid(padding=(0, 2))
        stream.add_row("running", f.clock, "mode", f.mode)
        stream.add_row("micro-batches", str(f.batches), "events processed", f"{f.consumed:,}")
        stream.add_row("events rejected", f"{f.rejected:,}", "late events", f"{f.late:,}")
        stream.add_row("Kafka lag", f"{f.lag:,}", "bundles reporting", str(f.reporting))
        if f.errors:
            stream.add_row("controller errors", Text(str(f.errors), style="red"), "", "")
        # One line each, cut (never wrapped) to the panel's width: the frame's height is known.
        lines = [
            Text(f"broker load {c}: ").append_text(line)
            for c, line in broker_lines(f.brokers or {})
        ]
        lines += [Text("move ").append_text(move_line(m)) for m in f.moves or []]
        lines += [Text(line, style="yellow") for line in draining_lines(f.draining or {})]
        lines += [Text(line, style="yellow") for line in rolling_lines(f.rolling or {})]
        for line in lines:
            line.no_wrap, line.overflow = True, "ellipsis"
        return Panel(Group(stream, *lines), title="pulsar-balancer", subtitle="Ctrl-C stops")

    def _hot(self, layout: _Layout) -> list[RenderableType]:
        """The bundles over their limit, the most loaded first."""
        f = self.frame
        rows = layout.hot_rows
        shown = f.over if rows is None else f.over[: max(rows, 1)]
        # Dense: the load's share of the limits stands for the traffic and topic figures.
        figures = ("msg/s", "load") if layout.dense else ("msg/s", "MiB/s", "topics", "load")
        hot = _table(
            "Bundles over their limit (latest window)",
            ("cluster", "namespace", "bundle", *figures),
            "note",
            layout,
        )
        if layout.caption:
            hot.caption = LOAD_CAPTION
        for load, ratio in shown:
            cells: list[RenderableType] = [load.cluster, load.namespace, str(load.bundle)]
            cells.append(f"{load.msg_rate:,.0f}")
            if not layout.dense:
                cells += [f"{load.throughput_bytes / 1048576:,.1f}", str(load.topic_count)]
            lone = _lone_note(f.lone.get((load.cluster, str(load.bundle))), load.topic_count)
            due = (f.windows_to_split or {}).get((load.cluster, load.namespace, load.bundle))
            note = "; ".join(n for n in (_split_note(due), lone) if n)
            hot.add_row(*cells, _pct(ratio), _free_text(note, layout))
        if not f.over:
            hot.add_row("-", "none")
        return [hot, *_more(len(f.over) - len(shown), "bundles over their limit")]

    def _decisions(self, layout: _Layout) -> list[RenderableType]:
        """The latest decisions, the most recent last: repeats in one row (`group_outcomes`),
        and the newest row of each kind kept (`pick_rows`)."""
        f = self.frame
        rows = DECISION_ROWS if layout.decision_rows is None else max(layout.decision_rows, 1)
        shown = pick_rows(self.decision_rows, rows)
        acts = _table(
            "Latest decisions",
            ("kind", "cluster", "target", "result", "window", "why"),
            "detail",
            layout,
        )
        for row in shown:
            o = row.latest
            result = Text(o.result.value, style=_result_style(o.result))
            if row.count > 1:  # the times it came, the newest in the row
                result.append(f" ×{row.count}")
            acts.add_row(
                o.kind.value,
                o.cluster,
                _where(o),
                result,
                _window_end(o),
                o.reason,
                _free_text(o.detail, layout),
            )
        if not f.outcomes:
            acts.add_row("-", "", "", f"waiting for {f.hit_count_threshold} windows over the limit")
        more = len(self.decision_rows) - len(shown)
        return [acts, *_more(more, "decisions (older, or of a kind shown)")]

    def _compact(self) -> list[RenderableType]:
        """One-line summaries, most important first, each cut to the terminal's width."""
        f = self.frame
        lines = [
            f"pulsar-balancer  running {f.clock.strip()}  mode {f.mode}  (Ctrl-C stops)",
            f"micro-batches {f.batches}  events processed {f.consumed:,}  rejected "
            f"{f.rejected:,}  late {f.late:,}  Kafka lag {f.lag:,}  bundles reporting "
            f"{f.reporting}",
        ]
        if f.errors:
            lines.append(f"controller errors {f.errors}")
        over = ", ".join(
            f"{load.cluster} {load.namespace} {load.bundle} {ratio * 100:.0f} %"
            for load, ratio in f.over
        )
        lines.append(f"bundles over their limit: {len(f.over)}" + (f" ({over})" if over else ""))
        lines += [f"broker load {c}: {line.plain}" for c, line in broker_lines(f.brokers or {})]
        if f.moves:
            lines.append(f"latest move: {move_line(f.moves[-1]).plain}")
        lines += draining_lines(f.draining or {})
        lines += rolling_lines(f.rolling or {})
        if f.outcomes:
            o = f.outcomes[-1]
            lines.append(
                f"latest decision: {o.kind.value} {o.cluster} {o.namespace} {o.result.value}: "
                f"{o.reason} {o.detail}"
            )
        else:
            lines.append(f"decisions: waiting for {f.hit_count_threshold} windows over the limit")
        return [Text(line, no_wrap=True, overflow="ellipsis") for line in lines]


def broker_lines(brokers: dict[str, list[BrokerLoad]]) -> list[tuple[str, Text]]:
    """One line per cluster: its brokers' loads, the most loaded first (a broker's share of
    its capacity; `*` marks a load from its bundles, without a load report)."""
    out = []
    for cluster, loads in sorted(brokers.items()):
        line = Text(no_wrap=True, overflow="ellipsis")
        for i, load in enumerate(loads[:BROKERS_SHOWN]):
            if i:
                line.append("  ")
            mark = "*" if load.source.value == "bundles" else ""
            line.append(f"{load.broker}{mark} ")
            line.append(_pct(load.load_ratio).plain.strip(), style=_pct(load.load_ratio).style)
        if len(loads) > BROKERS_SHOWN:
            line.append(f"  ... {len(loads) - BROKERS_SHOWN} more")
        out.append((cluster, line))
    return out


def draining_lines(draining: dict[str, tuple[str, ...]]) -> list[str]:
    """One line per cluster with brokers marked draining: they get no new bundle and are
    emptied (`pulsar-balancer drain --list` says who marked them and when)."""
    return [
        f"draining {cluster}: {', '.join(brokers)}"
        for cluster, brokers in sorted(draining.items())
        if brokers
    ]


def rolling_lines(rolling: dict[str, RollProgress]) -> list[str]:
    """One line per cluster with a roll in progress: the next broker of its order to
    restart and how many are back (`pulsar-balancer roll status` says more)."""
    out = []
    for cluster, p in sorted(rolling.items()):
        head = f"next {p.next}" if p.next is not None else "every broker back"
        out.append(f"rolling {cluster}: {head}, {len(p.restarted)} of {p.total} restarted")
    return out


def move_line(outcome: Outcome) -> Text:
    """A move's outcome in one line: bundle, from -> to, reason and result."""
    d = outcome.decision
    where = (
        f"{d.namespace}/{d.bundle} {d.source} -> {d.destination}"
        if isinstance(d, MoveDecision)
        else outcome.namespace
    )
    line = Text(f"{outcome.cluster} {where} ({outcome.reason}): ", no_wrap=True)
    line.append(outcome.result.value, style=_result_style(outcome.result))
    line.overflow = "ellipsis"
    return line


@dataclass(frozen=True, slots=True)
class DecisionRow:
    """The outcomes of one (kind, cluster, target, result): the newest and how many."""

    latest: Outcome
    count: int
    order: int  # the newest's place among the outcomes (larger: newer)


def group_outcomes(outcomes: Sequence[Outcome]) -> list[DecisionRow]:
    """Outcomes (oldest first) as rows, one per (kind, cluster, target, result), the row of
    the oldest newest outcome first. Every window decides a rate-limited offload again: one
    row with its count, not a row per window."""
    rows: dict[tuple[str, str, str, str], DecisionRow] = {}
    for order, outcome in enumerate(outcomes):
        where = target_of(outcome.decision) if outcome.decision else outcome.namespace
        key = (outcome.kind.value, outcome.cluster, where, outcome.result.value)
        before = rows.pop(key, None)  # re-inserted: the dict's order is the rows' recency
        rows[key] = DecisionRow(outcome, 1 + (before.count if before else 0), order)
    return list(rows.values())


def pick_rows(rows: Sequence[DecisionRow], limit: int) -> list[DecisionRow]:
    """At most `limit` rows, oldest first: the newest row of each kind, then the newest
    others. Many offloads (or their repeats) never push the latest split or move out."""
    newest_first = list(reversed(rows))
    kinds: set[DecisionKind] = set()
    chosen: list[DecisionRow] = []
    for row in newest_first:
        if row.latest.kind not in kinds:
            kinds.add(row.latest.kind)
            chosen.append(row)
    chosen = chosen[:limit]
    taken = {row.order for row in chosen}
    chosen += [row for row in newest_first if row.order not in taken][: limit - len(chosen)]
    return sorted(chosen, key=lambda row: row.order)


def _where(outcome: Outcome) -> str:
    """An offload's topic (the rows of one namespace's offloads tell them apart), else the
    namespace (the detail says which bundle)."""
    d = outcome.decision
    return d.topic.removeprefix("persistent://") if isinstance(d, OffloadDecision) else (
        outcome.namespace
    )  # fmt: skip


def _window_end(outcome: Outcome) -> str:
    """The end (UTC) of the window the newest of the row was decided in ("": not known)."""
    ms = getattr(outcome.decision, "window_end_ms", None)
    return time.strftime("%H:%M:%S", time.gmtime(ms / 1000)) if isinstance(ms, int) else ""


def _table(title: str, columns: tuple[str, ...], free_text: str, layout: _Layout) -> Table:
    """A table whose identifiers and figures never wrap: only the last, free-text column
    gives way (dense: light borders, and that column is cut, not wrapped: `_free_text`)."""
    table = Table(
        title=title,
        expand=True,
        box=box.SIMPLE_HEAD if layout.dense else box.HEAVY_HEAD,
        show_edge=not layout.dense,
    )
    for name in columns:
        table.add_column(name, no_wrap=True)
    table.add_column(free_text)
    return table


def _free_text(text: str, layout: _Layout) -> Text:
    return Text(text, no_wrap=True, overflow="ellipsis") if layout.dense else Text(text)


def _more(count: int, what: str) -> list[RenderableType]:
    return [Text(f"... {count} more {what}", style="dim")] if count > 0 else []


def _result_style(result: ActionResult) -> str:
    if result is ActionResult.APPLIED:
        return "green"
    return "red" if result is ActionResult.FAILED else ""


def _split_note(windows: int | None) -> str:
    """How soon the bundle is split if it stays over its limit (the detector's hit count)."""
    if windows is None:
        return ""
    if windows <= 0:
        return "split due"
    return f"split after {windows} more window{'s' if windows > 1 else ''} over"


def _lone_note(hot: LoneHotTopic | None, topic_count: int) -> str:
    if hot is None:
        return "one topic alone is over: no split can help" if topic_count == 1 else ""
    return f"one topic alone is over, no split can help: {hot.remedy}"


def live_display(console: Console, first: RenderableType) -> Live:
    """The live display of `run`: redrawn in place twice a second, the last frame kept."""
    return Live(first, console=console, refresh_per_second=2, transient=False)


@contextmanager
def children_stderr_to(path: Path) -> Iterator[None]:
    """Child processes started inside write their stderr to `path`, not to the terminal.

    The Spark JVM and its Python workers inherit file descriptor 2 and write to it directly
    (log4j, "Streaming TransformWithStateInPandas Python worker ..." lines): text the live
    display does not know of, which pushes its frame down so the next redraw starts below
    it and a stale copy stays behind. Python's own `sys.stderr` keeps the terminal (the
    live display prints it above the frame); both are restored on exit.
    """
    sys.stderr.flush()
    terminal_fd = os.dup(2)
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    python_stderr = sys.stderr
    sys.stderr = open(terminal_fd, "w", buffering=1, closefd=False)  # noqa: SIM115
    try:
        os.dup2(log_fd, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(terminal_fd, 2)
        sys.stderr.close()
        sys.stderr = python_stderr
        os.close(log_fd)
        os.close(terminal_fd)
