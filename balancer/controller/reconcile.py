"""What became of an action whose intent was journaled but whose outcome was not (a crash),
or whose call was sent and got no answer (a timeout or reset: outcome `unknown`).

Pulsar's state is the only witness (for a move, ownership: see move_steps): a split is done
when the parent is gone and every decided boundary is in the layout; an offload is done when
the ledgers before its point are offloaded or its status says SUCCESS, and only `started`
while it is RUNNING (then followed by `follow_verdict` until SUCCESS or ERROR).
Nothing here ever re-applies an action.

An unanswered call may still be in flight inside Pulsar, so "not visible" stays `unknown`
until the call is `settled` (old enough that Pulsar has surely answered it); only then is it
`failed`.
"""

from __future__ import annotations

from collections.abc import Sequence

from balancer.controller.journal import JournalEntry
from balancer.controller.layouts import LayoutCache
from balancer.controller.move_settle import recheck_move, reconcile_move
from balancer.controller.ports import AdminPort, MovePort
from balancer.core.bundles import BundleRange, NamespaceBundles
from balancer.core.decisions import DecisionKind
from balancer.core.results import ActionResult
from balancer.pulsar.errors import NotFoundError
from balancer.pulsar.models import (
    InternalStats,
    MessageId,
    OffloadState,
    OffloadStatus,
    parse_message_id,
)


def split_done(layout: NamespaceBundles, bundle: BundleRange, boundaries: Sequence[int]) -> bool:
    """The parent is gone and every decided boundary is in the layout."""
    present = set(layout.boundaries)
    return not layout.has(bundle) and all(b in present for b in boundaries)


def split_verdict(
    layout: NamespaceBundles, bundle: BundleRange, boundaries: Sequence[int], *, settled: bool
) -> tuple[ActionResult, str]:
    """What the layout says of a split sent without an answer."""
    if split_done(layout, bundle, boundaries):
        return ActionResult.APPLIED, "layout holds the decided boundaries"
    if not layout.has(bundle):
        return ActionResult.STALE, "bundle changed by someone else"
    if settled:
        return ActionResult.FAILED, "not applied: the bundle is unchanged"
    return ActionResult.UNKNOWN, "bundle unchanged so far: the split may still be in flight"


def offload_verdict(
    stats: InternalStats, status: OffloadStatus, point: MessageId, *, settled: bool
) -> tuple[ActionResult, str]:
    """What the ledgers and the offload status say of a trigger sent without an answer."""
    if _offloaded(stats, point):
        return ActionResult.APPLIED, "ledgers before the point are offloaded"
    if status.state is OffloadState.RUNNING:
        return ActionResult.STARTED, "offload running"
    seen = f"offload status {status.state.value}"
    if status.last_error:
        seen += f" ({status.last_error})"
    if settled:
        return ActionResult.FAILED, f"not applied: {seen}, ledgers not offloaded"
    return ActionResult.UNKNOWN, f"{seen}, ledgers not offloaded so far: may still be in flight"


def recheck_entry(
    admin: AdminPort,
    layouts: LayoutCache,
    entry: JournalEntry,
    *,
    settled: bool,
    mover: MovePort | None = None,
    age_s: float = 0.0,
    move_settle_s: float = 300.0,
) -> tuple[ActionResult, str]:
    """The outcome of an `unknown` action, read from Pulsar (PulsarAdminError if it cannot be).
    A move settles after its own `move_settle_s` (a lookup must place the bundle first)."""
    call = entry.payload.get("call", {})
    if entry.kind == DecisionKind.MOVE.value:
        return recheck_move(mover, entry, age_s=age_s, settle_s=move_settle_s)
    if entry.kind == DecisionKind.SPLIT.value:
        try:
            layout = admin.get_bundles(entry.namespace)
        except NotFoundError:
            return ActionResult.STALE, "namespace gone"
        layouts.put(entry.cluster, layout)
        bundle = BundleRange.parse(call["bundle"])
        boundaries = tuple(int(b) for b in call["boundaries"])
        return split_verdict(layout, bundle, boundaries, settled=settled)
    topic = call["topic"]
    try:
        stats = admin.internal_stats(topic)
        status = admin.offload_status(topic)
    except NotFoundError:
        return ActionResult.STALE, "topic gone"
    return offload_verdict(stats, status, parse_message_id(call["message_id"]), settled=settled)


def reconcile_entry(
    admin: AdminPort, layouts: LayoutCache, entry: JournalEntry, *, mover: MovePort | None = None
) -> tuple[ActionResult, str]:
    """The outcome of a pending intent, read from Pulsar (PulsarAdminError if it cannot be)."""
    call = entry.payload.get("call", {})
    if entry.kind == DecisionKind.MOVE.value:
        return reconcile_move(mover, entry)
    if entry.kind == DecisionKind.SPLIT.value:
        bundle = BundleRange.parse(call["bundle"])
        boundaries = tuple(int(b) for b in call["boundaries"])
        try:
            layout = admin.get_bundles(entry.namespace)
        except NotFoundError:
            return ActionResult.STALE, "namespace gone"
        layouts.put(entry.cluster, layout)
        if split_done(layout, bundle, boundaries):
            return ActionResult.APPLIED, "layout holds the decided boundaries"
        if layout.has(bundle):
            return ActionResult.ABANDONED, "bundle unchanged: the split never reached Pulsar"
        return ActionResult.STALE, "bundle changed by someone else"
    topic = call["topic"]
    point = parse_message_id(call["message_id"])
    try:
        stats = admin.internal_stats(topic)
        status = admin.offload_status(topic)
    except NotFoundError:
        return ActionResult.STALE, "topic gone"
    if _offloaded(stats, point):
        return ActionResult.APPLIED, "ledgers before the point are offloaded"
    if status.state is OffloadState.RUNNING:
        return ActionResult.STARTED, "offload running"
    return ActionResult.ABANDONED, f"offload status {status.state.value}, ledgers not offloaded"


def follow_verdict(
    stats: InternalStats, status: OffloadStatus, point: MessageId, *, age_s: float, follow_s: float
) -> tuple[ActionResult, str]:
    """What the offload status says of an offload Pulsar accepted (`started`).

    SUCCESS -> applied; ERROR -> failed with Pulsar's lastError; RUNNING -> still started
    until `follow_s` after the call, then failed (no longer followed; Pulsar answers 409 to a
    new trigger while it runs on). NOT_RUN: the status lives in the broker's memory and an
    unload or a broker restart resets it, so the ledgers decide.
    """
    if status.state is OffloadState.SUCCESS:
        return ActionResult.APPLIED, "offload status SUCCESS"
    if status.state is OffloadState.ERROR:
        return ActionResult.FAILED, f"offload status ERROR: {status.last_error or 'no lastError'}"
    if _offloaded(stats, point):
        return ActionResult.APPLIED, "ledgers before the point are offloaded"
    if status.state is OffloadState.RUNNING:
        if age_s < follow_s:
            return ActionResult.STARTED, f"offload running for {age_s:.0f} s"
        return ActionResult.FAILED, (
            f"offload still RUNNING after {age_s:.0f} s, past controller.offload_follow_s "
            f"({follow_s:.0f} s): no longer followed, its bytes not counted"
        )
    return ActionResult.FAILED, (
        f"offload status {status.state.value} (reset by an unload or a broker restart) and "
        f"the ledgers before ledger {point.ledger_id} are not offloaded"
    )


def follow_entry(
    admin: AdminPort, entry: JournalEntry, *, age_s: float, follow_s: float
) -> tuple[ActionResult, str]:
    """The state of a `started` offload, read from Pulsar (PulsarAdminError if it cannot be)."""
    call = entry.payload.get("call", {})
    topic = call["topic"]
    try:
        status = admin.offload_status(topic)
        stats = admin.internal_stats(topic)
    except NotFoundError:
        return ActionResult.FAILED, "topic deleted while its offload ran"
    point = parse_message_id(call["message_id"])
    return follow_verdict(stats, status, point, age_s=age_s, follow_s=follow_s)


def _offloaded(stats: InternalStats, point: MessageId) -> bool:
    """Every non-empty ledger before the point is offloaded (and there is one)."""
    before = [lg for lg in stats.ledgers if lg.ledger_id < point.ledger_id and lg.entries > 0]
    return bool(before) and all(lg.offloaded for lg in before)
