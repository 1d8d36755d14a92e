"""Plan files: `plan --save PLAN.json` writes one, `apply PLAN.json` reads and shows it.

The document itself (schema, id, checks) is `balancer.core.plan_document`; here are the
file, the config's hash and the text a reviewer reads.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from balancer.app.config import BalancerConfig
from balancer.core.bundles import format_position
from balancer.core.decisions import OffloadDecision, SplitDecision
from balancer.core.moves.model import MoveDecision
from balancer.core.offload import MessageId
from balancer.core.plan_document import (
    PlanDocument,
    PlanFileError,
    PlannedAction,
    build_document,
    iso_utc,
    parse_document,
)

if TYPE_CHECKING:
    from balancer.app.commands.plan_output import OffloadPoint
    from balancer.core.planning import Plan

__all__ = ["PlanFileError", "config_sha256", "describe", "read_plan", "save_plan"]


def config_sha256(config: BalancerConfig) -> str:
    """The hash of the config as parsed (comments and key order do not change it)."""
    text = config.model_dump_json()
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def save_plan(
    path: Path,
    *,
    config: BalancerConfig,
    source: str,
    plan: Plan,
    points: Mapping[str, OffloadPoint],
    moves: Sequence[MoveDecision],
    layouts: Mapping[tuple[str, str], tuple[int, ...]],
    now_ms: int,
    move_plan_clusters: Collection[str] = (),
) -> dict[str, Any]:
    """Write the plan document (atomically: a reader never sees half a file) and return it.
    Offloads without an offload point (none found, or an offload running) are not saved:
    there is nothing exact to apply.

    Each split says whether its children are unloaded, as `run` decides it: in a cluster
    with a move plan (`move_plan_clusters`) they stay on the parent's broker (the move plan
    counted them there and places those that must go), elsewhere as
    `controller.unload_after_split` says."""
    splits = [
        replace(
            s,
            unload_children=(
                False if s.cluster in move_plan_clusters else config.controller.unload_after_split
            ),
        )
        for s in plan.splits
    ]
    offloads: list[tuple[OffloadDecision, MessageId]] = []
    for o in plan.offloads:
        found = points.get(o.decision_id)
        if found is not None and found.message_id is not None:
            m = found.message_id
            offloads.append(
                (o, MessageId(m["ledgerId"], m["entryId"], m.get("partitionIndex", -1)))
            )
    doc = build_document(
        created_at_ms=now_ms,
        config_sha256=config_sha256(config),
        source=source,
        clusters=[c.name for c in config.clusters],
        layouts=layouts,
        splits=splits,
        offloads=offloads,
        moves=moves,
    )
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    with tmp.open("rb") as f:
        os.fsync(f.fileno())
    tmp.replace(path)
    return doc


def read_plan(path: Path) -> PlanDocument:
    """The plan in `path`, checked (PlanFileError, one line, for a bad file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanFileError(f"plan file {path}: no such file") from None
    except UnicodeDecodeError:
        raise PlanFileError(f"plan file {path}: not UTF-8 text") from None
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanFileError(
            f"plan file {path}: not valid JSON (truncated?): {exc.msg} at line {exc.lineno}"
        ) from None
    try:
        return parse_document(body)
    except PlanFileError as exc:
        raise PlanFileError(f"plan file {path}: {exc}") from None


def describe(action: PlannedAction) -> str:
    """One line a reviewer reads: what will be done, and the load behind it."""
    d = action.decision
    if isinstance(d, SplitDecision):
        at = ", ".join(format_position(b) for b in d.boundaries)
        children = {
            False: "children stay on the parent's broker",
            True: "children unloaded: Pulsar places them",
            None: "children unloaded as controller.unload_after_split says",
        }[d.unload_children]
        return (
            f"split {d.cluster} {d.namespace}/{d.bundle} at {at} ({d.algorithm.value}; over "
            f"{', '.join(r.value for r in d.reasons)}: {d.inputs.msg_rate:,.0f} msg/s, "
            f"{d.inputs.throughput_bytes / 1048576:,.1f} MiB/s, {d.inputs.topic_count} topics, "
            f"{d.inputs.session_count} sessions; {children})"
        )
    if isinstance(d, OffloadDecision):
        point = action.offload_point
        up_to = f"ledger {point.ledger_id}" if point is not None else "?"
        return (
            f"offload {d.cluster} {d.topic}: every ledger before {up_to} "
            f"({d.bookkeeper_bytes:,} bytes in BookKeeper, keep {d.threshold_bytes:,})"
        )
    return (
        f"move {d.cluster} {d.namespace}/{d.bundle} from {d.source} to {d.destination} "
        f"({d.reason.value}; {d.msg_rate:,.0f} msg/s, {d.sessions} sessions reconnect; "
        f"source load {d.source_load_before:.0%} -> {d.source_load_after:.0%})"
    )


def heading(doc: PlanDocument, *, now_ms: int) -> str:
    return (
        f"Plan {doc.plan_id}, made {iso_utc(doc.created_at_ms)} ({doc.age_s(now_ms):.0f} s ago) "
        f"against {doc.source}: {len(doc.actions)} action(s)"
    )
