"""The end-of-run summary as `pulsar-balancer run` prints it (and writes with --summary-json):
bundles before and after, splits, offloads and moves applied, brokers' loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from balancer.app.liveview import INTRO
from balancer.core.sizes import format_size


class SplitApplied(TypedDict):
    cluster: str
    namespace: str
    bundle: str
    boundaries: list[str]  # hash points, as 0x... text
    children: int
    reason: str
    algorithm: str
    detail: str


class OffloadTriggered(TypedDict):
    cluster: str
    topic: str
    storage_size_bytes: int
    threshold_bytes: int
    bytes_offloaded: int
    detail: str


class MoveApplied(TypedDict):
    cluster: str
    namespace: str
    bundle: str
    source: str
    destination: str
    reason: str  # MoveReason
    result: str  # applied or landed_elsewhere (the bundle unloaded, owned by another broker)
    sessions: int  # producers + consumers reconnected
    detail: str


class BrokerLoadAtEnd(TypedDict):
    cluster: str
    broker: str
    load_ratio: float  # the newest window's (1.0 is full)
    source: str  # load_report or bundles (no load report: against the configured capacity)


class UnknownAction(TypedDict):
    kind: str
    cluster: str
    target: str  # the bundle key or the topic
    decision_id: str
    detail: str


@dataclass
class RunSummary:
    bundles_before: dict[str, int]
    bundles_after: dict[str, int]
    splits: list[SplitApplied]
    offloads: list[OffloadTriggered]
    events_processed: int
    events_rejected: int
    events_rejected_by_reason: dict[str, int] = field(default_factory=dict)
    events_late: int = 0
    batches: int = 0
    mode: str = "apply"
    duration_s: float = 0.0
    stream_error: str | None = None
    # Actions sent without an answer that Pulsar did not show by the end of the run: the
    # next start rechecks them (never re-sends); their bundles and topics wait until then.
    unknown: list[UnknownAction] = field(default_factory=list)
    lone_hot_topics: list[dict[str, Any]] = field(default_factory=list)  # LoneHotTopic.to_dict
    moves: list[MoveApplied] = field(default_factory=list)
    brokers: list[BrokerLoadAtEnd] = field(default_factory=list)  # at the end of the run

    def to_dict(self) -> dict[str, Any]:
        return {
            "bundles_before": self.bundles_before,
            "bundles_after": self.bundles_after,
            "splits": self.splits,
            "offloads": self.offloads,
            "events_processed": self.events_processed,
            "events_rejected": self.events_rejected,
            "events_rejected_by_reason": self.events_rejected_by_reason,
            "events_late": self.events_late,
            "batches": self.batches,
            "mode": self.mode,
            "duration_s": round(self.duration_s, 1),
            "stream_error": self.stream_error,
            "unknown": self.unknown,
            "lone_hot_topics": self.lone_hot_topics,
            "moves": self.moves,
            "brokers": self.brokers,
        }


def render_summary(summary: RunSummary) -> Group:
    head = Table.grid(padding=(0, 2))
    head.add_row(
        "ran",
        f"{summary.duration_s:.0f} s in {summary.mode} mode",
        "micro-batches",
        str(summary.batches),
    )
    head.add_row(
        "events processed",
        f"{summary.events_processed:,}",
        "events rejected",
        f"{summary.events_rejected:,}",
    )
    if summary.events_rejected_by_reason:
        by_reason = sorted(summary.events_rejected_by_reason.items())
        reasons = ", ".join(f"{k}: {v}" for k, v in by_reason)
        head.add_row("rejected because", reasons, "", "")
    if summary.stream_error:
        head.add_row(Text("stream error", style="red"), summary.stream_error, "", "")
    for u in summary.unknown:
        head.add_row(
            Text("outcome unknown", style="yellow"),
            f"{u['kind']} {u['target']} on {u['cluster']}: rechecked at the next start",
            "",
            "",
        )

    bundles = Table(title="Bundles per namespace", expand=True)
    for col in ("namespace", "before", "after"):
        bundles.add_column(col)
    for ns in sorted(set(summary.bundles_before) | set(summary.bundles_after)):
        before = summary.bundles_before.get(ns)
        after = summary.bundles_after.get(ns)
        style = "bold" if before != after else ""
        bundles.add_row(
            ns,
            str(before if before is not None else "?"),
            Text(str(after if after is not None else "?"), style=style),
        )

    splits = Table(
        title="Splits applied (each bundle split once, at these hash points)", expand=True
    )
    for col in ("cluster", "namespace", "bundle", "children", "split points"):
        splits.add_column(col)
    for s in summary.splits:
        splits.add_row(
            s["cluster"],
            s["namespace"],
            s["bundle"],
            str(s["children"]),
            " ".join(s["boundaries"]) or s.get("detail", ""),
        )
    if not summary.splits:
        splits.add_row("-", "none", "", "", "")

    offloads = Table(title="Offloads triggered (old ledgers moved to tiered storage)", expand=True)
    for col in (
        "cluster",
        "topic",
        "offloads",
        "limit kept in BookKeeper",
        "moved to tiered storage",
    ):
        offloads.add_column(col)
    # A growing topic is offloaded again each time more ledgers pass the limit: one row each.
    per_topic: dict[tuple[str, str], list[OffloadTriggered]] = {}
    for o in summary.offloads:
        per_topic.setdefault((o["cluster"], o["topic"]), []).append(o)
    for (cluster, topic), items in sorted(per_topic.items()):
        offloads.add_row(
            cluster,
            topic,
            str(len(items)),
            format_size(items[-1].get("threshold_bytes", 0)),
            format_size(sum(o.get("bytes_offloaded", 0) for o in items)),
        )
    if not summary.offloads:
        offloads.add_row("-", "none", "", "", "")

    parts: list[RenderableType] = [
        Panel(head, title="pulsar-balancer: summary"),
        Text(INTRO, style="dim"),
        bundles,
        splits,
        offloads,
        _moves(summary),
    ]
    if summary.brokers:
        parts.append(_brokers(summary))
    if summary.lone_hot_topics:
        lone = Table(title="Topics alone over a bundle limit (no split can help)", expand=True)
        for col in ("cluster", "topic", "msg/s", "partitions", "recommended", "remedy"):
            lone.add_column(col)
        for h in summary.lone_hot_topics:
            lone.add_row(
                h["cluster"],
                h["topic"],
                f"{h['msg_rate']:,.0f}",
                str(h["current_partitions"] or "not partitioned"),
                str(h["recommended_partitions"]),
                h["remedy"],
            )
        parts.append(lone)
    return Group(*parts)


def _moves(summary: RunSummary) -> Table:
    moves = Table(title="Moves applied (bundles unloaded to a broker with room)", expand=True)
    for col in ("cluster", "namespace", "bundle", "from -> to", "reason", "result"):
        moves.add_column(col)
    for m in summary.moves:
        elsewhere = m["result"] != "applied"
        moves.add_row(
            m["cluster"],
            m["namespace"],
            m["bundle"],
            f"{m['source']} -> {m['destination']}",
            m["reason"],
            Text(
                m["result"] + (f": {m['detail']}" if elsewhere else ""),
                style="yellow" if elsewhere else "green",
            ),
        )
    if not summary.moves:
        moves.add_row("-", "none", "", "", "", "")
    return moves


def _brokers(summary: RunSummary) -> Table:
    brokers = Table(title="Broker load at the end (share of the broker's capacity)", expand=True)
    for col in ("cluster", "broker", "load", "load from"):
        brokers.add_column(col)
    for b in summary.brokers:
        brokers.add_row(b["cluster"], b["broker"], f"{b['load_ratio'] * 100:.0f} %", b["source"])
    return brokers


def print_summary(summary: RunSummary, console: Console | None = None) -> None:
    (console or Console()).print(render_summary(summary))
