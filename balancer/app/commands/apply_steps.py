"""`pulsar-balancer apply`'s work: each planned action's premise checked, then the action
carried out by the controller, and what came of it.

Before each action its premise is read again from Pulsar (GETs only):
- a split: the bundle is still in its namespace's layout with the same range;
- a move: the bundle is still owned by the planned source (`ownedNamespaces` of the source,
  never a lookup, which would place an unowned bundle); a source that left the cluster (not
  listed, no answer) owns nothing;
- an offload: the topic still has the offload point's ledger, with a ledger before it not
  offloaded yet.
An action whose premise changed is refused (`stale`, named) and never adapted. The others go
to `Controller.handle` (allow-list, journal, rate limits, breaker, writer lease, its own
fresh check and read-back), with a decision id derived from the plan id and the action, so
the journal knows an action applied by an earlier `apply` of the same plan.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from balancer.controller.apply import Controller
from balancer.controller.offload_point import ledger_sizes
from balancer.core.decisions import OffloadDecision, SplitDecision
from balancer.core.moves.model import MoveDecision
from balancer.core.offload import MessageId
from balancer.core.plan_document import PlanDocument, PlannedAction, offload_premise
from balancer.core.results import ActionResult
from balancer.pulsar.errors import NotFoundError, PulsarAdminError
from balancer.pulsar.models import InternalStats
from balancer.pulsar.routing import routed_to

log = logging.getLogger(__name__)

# A rate-limited action waits for the rolling minute to free a slot, this often, this long.
RATE_LIMIT_RETRY_S = 5.0
RATE_LIMIT_WAIT_S = 130.0


class Status(StrEnum):
    """What `apply` made of one planned action (the report's `status`)."""

    APPLIED = "applied"  # done now (an offload: started, Pulsar runs it)
    ALREADY_APPLIED = "already_applied"  # done by an earlier apply of this plan
    STALE = "stale"  # its premise changed: refused, nothing sent
    NOT_APPLIED = "not_applied"  # failed, unknown, denied, rate limited, breaker, no lease
    WOULD_APPLY = "would_apply"  # --dry-run: the premise holds, nothing sent
    NOT_SELECTED = "not_selected"  # left out by --only
    EXPIRED = "expired"  # reached after the plan expired (controller.plan_max_age_s): not sent


_DONE = (ActionResult.APPLIED, ActionResult.STARTED)
# Controller results that say the plan's premise no longer holds.
_STALE = (ActionResult.STALE, ActionResult.NOTHING_TO_OFFLOAD, ActionResult.ALREADY_RUNNING)


@dataclass(slots=True)
class Item:
    action: PlannedAction
    decision_id: str
    status: Status
    result: str = ""
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = self.action.decision
        return {
            "id": self.action.action_id,
            "kind": self.action.kind,
            "cluster": d.cluster,
            "target": target_of(self.action),
            "decision_id": self.decision_id,
            "status": self.status.value,
            "result": self.result,
            "detail": self.detail,
        }


def target_of(action: PlannedAction) -> str:
    d = action.decision
    if isinstance(d, OffloadDecision):
        return d.topic
    return d.bundle.key(d.namespace)


class PlannedPoints:
    """The controller's offload point while `apply` works: the planned one, as long as the
    internalStats the controller reads still hold it (else none: `nothing_to_offload`)."""

    def __init__(self) -> None:
        self.point: MessageId | None = None

    def __call__(self, stats: InternalStats, threshold_bytes: int) -> MessageId | None:
        point = self.point
        if point is None or offload_premise(ledger_sizes(stats), point) is not None:
            return None
        return point


def premise(admin: Any, action: PlannedAction) -> str | None:
    """Why the action's premise no longer holds (None: it holds). PulsarAdminError other
    than a 404 propagates (Pulsar cannot be read: not a changed premise)."""
    d = action.decision
    try:
        with routed_to(d.cluster):
            if isinstance(d, SplitDecision):
                layout = admin.get_bundles(d.namespace)
                if not layout.has(d.bundle):
                    return (
                        f"bundle {d.bundle} is no longer in the layout of {d.namespace} "
                        f"(now {layout.num_bundles} bundles): split or unloaded since the plan"
                    )
                return None
            if isinstance(d, MoveDecision):
                name = d.bundle.key(d.namespace)
                try:
                    owned = admin.owned_bundles(d.cluster, d.source)
                except PulsarAdminError:
                    # A source scaled down or restarted under a new address owns nothing.
                    if d.source in admin.list_brokers(d.cluster):
                        raise
                    return (
                        f"the planned source {d.source} left the cluster (no longer listed "
                        "as active, does not answer)"
                    )
                if name not in owned:
                    return f"bundle {name} is no longer owned by {d.source} (the planned source)"
                return None
            assert action.offload_point is not None
            stats = admin.internal_stats(d.topic)
            return offload_premise(ledger_sizes(stats), action.offload_point)
    except NotFoundError as exc:
        return f"gone: {exc.method} {exc.url} answered 404"


def carry_out(
    controller: Controller,
    admin: Any,
    doc: PlanDocument,
    actions: Sequence[PlannedAction],
    points: PlannedPoints,
    *,
    dry_run: bool,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
    fresh: Callable[[], str | None] = lambda: None,
) -> list[Item]:
    """Each selected action in plan order: journal, plan age, premise, controller. `fresh`
    says why the plan may no longer be acted on (None: it may), asked before each action and
    each retry of a rate-limited one: from the first refusal on, nothing more is sent."""
    items: list[Item] = []
    expired: str | None = None
    # A move of a split's child: the child exists only once that split is applied.
    splits = {a.decision.decision_id: a.action_id for a in actions if a.kind == "split"}
    for action in actions:
        decision = action.for_plan(doc.plan_id)
        item = Item(action, decision.decision_id, Status.NOT_APPLIED)
        items.append(item)
        known = controller.journal.get(decision.decision_id)
        if known is not None:  # an earlier apply of this plan handled it: never sent again
            item.result = known.result or "pending"
            done = known.result in {r.value for r in _DONE}
            item.status = Status.ALREADY_APPLIED if done else Status.NOT_APPLIED
            item.detail = f"handled by an earlier apply of this plan: {known.detail or 'pending'}"
            continue
        expired = expired or fresh()
        if expired is not None:
            item.status, item.detail = Status.EXPIRED, f"not sent: {expired}"
            continue
        after = getattr(action.decision, "after_split", None)
        if dry_run and after in splits:
            item.status = Status.WOULD_APPLY
            item.detail = f"after {splits[after]}: its premise is read once that split is applied"
            continue
        try:
            why = premise(admin, action)
        except (PulsarAdminError, ValueError) as exc:
            item.result = ActionResult.FAILED.value
            item.detail = f"premise not read: {exc}"
            continue
        if why is not None:
            item.status, item.result, item.detail = Status.STALE, ActionResult.STALE.value, why
            continue
        if dry_run:
            item.status, item.detail = Status.WOULD_APPLY, "premise holds; nothing sent (--dry-run)"
            continue
        points.point = action.offload_point
        outcome = controller.handle(decision, batch_id=doc.plan_id)
        deadline = monotonic() + RATE_LIMIT_WAIT_S
        while outcome.result is ActionResult.RATE_LIMITED and monotonic() < deadline:
            # Nothing was journaled: the same decision is asked again once the minute frees.
            log.info(
                "apply: %s rate limited; retrying in %g s", action.action_id, RATE_LIMIT_RETRY_S
            )
            sleep(RATE_LIMIT_RETRY_S)
            expired = fresh()
            if expired is not None:
                break
            outcome = controller.handle(decision, batch_id=doc.plan_id)
        if expired is not None:
            item.status, item.detail = Status.EXPIRED, f"not sent (rate limited, then): {expired}"
            continue
        item.result, item.detail = outcome.result.value, outcome.detail
        if outcome.result in _DONE:
            item.status = Status.APPLIED
        elif outcome.result in _STALE:
            item.status = Status.STALE
    return items


def settle(
    controller: Controller,
    items: Sequence[Item],
    *,
    wait_s: float,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> None:
    """Recheck the actions whose outcome is `unknown` (a move no broker owns until the next
    lookup places it) until they settle or `wait_s` has passed; never re-sent."""
    deadline = monotonic() + wait_s
    while True:
        open_items = {i.decision_id: i for i in items if i.result == ActionResult.UNKNOWN.value}
        if not open_items:
            return
        for decision_id, result in controller.reconcile():
            item = open_items.get(decision_id)
            if item is None:
                continue
            entry = controller.journal.get(decision_id)
            item.result = result.value
            item.detail = entry.detail or item.detail if entry is not None else item.detail
            if result in _DONE:
                item.status = Status.APPLIED
        if monotonic() >= deadline:
            return
        sleep(1.0)
