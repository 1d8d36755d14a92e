"""How `pulsar-balancer plan` shows a plan: tables for people, one JSON document for programs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rich.console import RenderableType

from balancer.app.commands.output import make_table, print_tables
from balancer.app.commands.plan_moves import MovesPlan, moves_json, moves_parts
from balancer.core.planning import Plan
from balancer.core.sizes import format_size

EXIT_NOTHING = 0
EXIT_ERROR = 2  # the CLI's code for every error (balancer.app.cli)
EXIT_PROPOSALS = 3


@dataclass(frozen=True, slots=True)
class OffloadPoint:
    """What the controller's fresh check would find for one proposed offload."""

    message_id: dict[str, int] | None
    note: str


def plan_json(
    plan: Plan,
    points: dict[str, OffloadPoint],
    *,
    source: str,
    exit_code: int,
    errors: Mapping[str, str] | None = None,
    moves: MovesPlan | None = None,
) -> dict[str, Any]:
    """`errors`: cluster -> why it was not read (left out of the plan)."""
    return {
        "source": source,
        "errors": [{"cluster": c, "error": e} for c, e in (errors or {}).items()],
        "window_end_ms": plan.window_end_ms,
        "hit_count_threshold": plan.hit_count_threshold,
        "bundles": plan.bundles,
        "bundles_over_limit": plan.over_limit,
        "splits": [{**s.to_dict(), "reason": s.reason.value} for s in plan.splits],
        "offloads": [
            {
                **o.to_dict(),
                "offload_point": points[o.decision_id].message_id
                if o.decision_id in points
                else None,
                "offload_note": points[o.decision_id].note if o.decision_id in points else "",
            }
            for o in plan.offloads
        ],
        "skipped": [s.to_dict() for s in plan.skipped],
        "lone_hot_topics": [h.to_dict() for h in plan.lone_hot_topics],
        **moves_json(moves),
        "exit_code": exit_code,
    }


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def _mib(value: float) -> str:
    return f"{value / 1048576:,.1f}"


def print_plan(
    plan: Plan,
    points: dict[str, OffloadPoint],
    *,
    source: str,
    exit_code: int,
    errors: Mapping[str, str] | None = None,
    moves: MovesPlan | None = None,
) -> None:
    head = (
        f"Plan for {source}: {plan.bundles} bundles with load, {plan.over_limit} over a limit. "
        f"`run` acts once a bundle stays over for {plan.hit_count_threshold} consecutive "
        "windows; this plan assumes the load seen persists that long."
    )
    parts: list[RenderableType] = [head]
    for error in (errors or {}).values():  # each names its cluster: "cluster X: ..."
        parts.append(f"Not read: {error}. Its bundles and topics are not in this plan.")
    for s in plan.splits:
        parts.append(
            f"split {s.cluster} {s.namespace} {s.bundle} ({s.reason.value}; over: "
            f"{', '.join(r.value for r in s.reasons)}) with {s.algorithm.value} at "
            + ", ".join(s.to_dict()["boundaries"])
        )
        parts.append(
            make_table(
                None,
                ("child", "topics", "msg/s", "MiB/s", "sessions"),
                [
                    (
                        str(c.bundle),
                        c.topics,
                        _rate(c.msg_rate),
                        _mib(c.throughput_bytes),
                        c.sessions,
                    )
                    for c in s.children
                ],
            )
        )
    if plan.offloads:
        parts.append(
            make_table(
                "Offloads",
                ("cluster", "topic", "in BookKeeper", "keep", "offload point", "note"),
                [
                    (
                        o.cluster,
                        o.topic,
                        format_size(o.bookkeeper_bytes),
                        format_size(o.threshold_bytes),
                        _point_text(points.get(o.decision_id)),
                        points[o.decision_id].note if o.decision_id in points else "",
                    )
                    for o in plan.offloads
                ],
            )
        )
    if plan.skipped:
        parts.append(
            make_table(
                "Over a limit but not acted on",
                ("cluster", "namespace", "bundle/topic", "skipped because", "over", "detail"),
                [
                    (
                        k.cluster,
                        k.namespace,
                        k.target,
                        k.reason,
                        ", ".join(r.value for r in k.split_reasons),
                        k.detail,
                    )
                    for k in plan.skipped
                ],
            )
        )
    if plan.lone_hot_topics:
        parts.append(
            make_table(
                "Lone hot topics (one topic alone over a limit: no split can help; add partitions)",
                (
                    "cluster",
                    "topic",
                    "hot partition",
                    "bundle",
                    "msg/s",
                    "MiB/s",
                    "partitions",
                    "recommended",
                    "remedy",
                ),
                [
                    (
                        h.cluster,
                        h.topic,
                        h.hot_topic,
                        h.bundle,
                        _rate(h.msg_rate),
                        _mib(h.throughput_bytes),
                        h.current_partitions or "not partitioned",
                        h.recommended_partitions,
                        h.remedy,
                    )
                    for h in plan.lone_hot_topics
                ],
            )
        )
    parts += moves_parts(moves)
    if exit_code == EXIT_PROPOSALS:
        parts.append(
            f"{len(plan.splits)} split(s), {len(plan.offloads)} offload(s), "
            f"{len(moves.moves) if moves else 0} move(s) proposed"
            f"{_stuck_text(moves)} (exit code {EXIT_PROPOSALS})"
        )
    else:
        parts.append(f"Nothing to do (exit code {EXIT_NOTHING})")
    print_tables(*parts)


def _stuck_text(moves: MovesPlan | None) -> str:
    stuck = sum(len(c.plan.drain_blocked) for c in moves.clusters.values()) if moves else 0
    return f", {stuck} bundle(s) of draining brokers cannot leave" if stuck else ""


def _point_text(point: OffloadPoint | None) -> str:
    if point is None or point.message_id is None:
        return "-"
    return f"{point.message_id['ledgerId']}:{point.message_id['entryId']}"
