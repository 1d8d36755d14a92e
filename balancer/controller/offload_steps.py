"""The controller's offload path: fresh checks, the trigger, and what its answer means.

An offload's 204 only means STARTED: `PersistentTopic.triggerOffload` starts
`ManagedLedgerImpl.asyncOffloadPrefix` and returns; success or failure shows only in
`GET .../offload` (`OffloadProcessStatus`: NOT_RUN, RUNNING, SUCCESS, ERROR + lastError).
So a 204 is journaled `started`, and `Controller.reconcile()`, which runs every batch and
after a restart, follows the status (`reconcile.follow_verdict`) without holding the cluster's
lock in between. The bytes the offload moves are measured from internalStats before the call
and kept in the journal payload (`expected.bytes_offloaded`): they are counted once, when
Pulsar shows the offload done, even after a restart.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from balancer.controller.outcome import (
    Finish,
    Step,
    bytes_before,
    offload_action_key,
    read_back_needed,
)
from balancer.controller.reconcile import offload_verdict
from balancer.controller.writer_gate import fenced
from balancer.core.decisions import OffloadDecision
from balancer.core.results import ActionResult
from balancer.pulsar.models import MessageId, OffloadState

if TYPE_CHECKING:
    from balancer.controller.apply import Controller

# Results that end the decision's own step without raising (the others raise Finish).
_KEPT = (ActionResult.APPLIED, ActionResult.STARTED)


def offload_steps(ctl: Controller, decision: OffloadDecision, batch_id: str | None) -> Step:
    status = ctl._call(
        decision.cluster, "offload status", lambda: ctl.admin.offload_status(decision.topic)
    )
    if status.state is OffloadState.RUNNING:
        raise Finish(ActionResult.ALREADY_RUNNING, "offload status is RUNNING")
    stats = ctl._call(
        decision.cluster, "internal stats", lambda: ctl.admin.internal_stats(decision.topic)
    )
    point = ctl._offload_point(stats, decision.threshold_bytes)
    if point is None:
        raise Finish(ActionResult.NOTHING_TO_OFFLOAD, "no ledger to offload above threshold")
    ctl._wait_unsettled(decision, decision.topic)
    action_key = offload_action_key(decision, point)
    earlier = ctl.journal.applied_with_key(action_key)
    if earlier is not None:
        raise Finish(ActionResult.DUPLICATE, f"same offload done by {earlier.decision_id}")
    ctl._acquire(decision)
    moved = bytes_before(stats, point)
    call = {"op": "trigger_offload", "topic": decision.topic, "message_id": point.to_json()}
    ctl._intent(
        decision,
        batch_id,
        target=decision.topic,
        action_key=action_key,
        call=call,
        expected={"bytes_offloaded": moved},
    )
    try:
        ctl._call(
            decision.cluster,
            "trigger offload",
            fenced(ctl.lease, lambda: ctl.admin.trigger_offload(decision.topic, point)),
            on_conflict=ActionResult.ALREADY_RUNNING,
        )
    except Finish as finish:
        step = finish.step
        if read_back_needed(step):
            step = _read_back(ctl, decision, point, moved, step)
        ctl._outcome(decision.decision_id, step.result, step.detail)
        if step.result in _KEPT:
            return step
        raise Finish.of(step) from None
    detail = (
        f"offload up to ledger {point.ledger_id} started ({moved} bytes to move): "
        "following its status"
    )
    ctl._outcome(decision.decision_id, ActionResult.STARTED, detail)
    pulsar = {"status": 204, "message_id": point.to_json(), "bytes_to_offload": moved}
    return Step(ActionResult.STARTED, detail, pulsar)


def _read_back(
    ctl: Controller, decision: OffloadDecision, point: MessageId, moved: int, step: Step
) -> Step:
    """The trigger failed without a clear refusal: what do status and ledgers show?
    Offloaded ledgers -> applied (with the bytes); RUNNING -> started (followed)."""
    unknown = step.result is ActionResult.UNKNOWN
    topic = decision.topic
    try:
        status = ctl._call(
            decision.cluster, "offload status", lambda: ctl.admin.offload_status(topic)
        )
        now = ctl._call(decision.cluster, "internal stats", lambda: ctl.admin.internal_stats(topic))
    except Finish as again:
        return replace(step, detail=f"{step.detail}; status not read ({again.step.detail})")
    result, seen = offload_verdict(now, status, point, settled=not unknown)
    pulsar = {**step.pulsar, "message_id": point.to_json()}
    if result is ActionResult.APPLIED:
        detail = (
            f"offload up to ledger {point.ledger_id} ({moved} bytes; {step.detail}; "
            f"read back: {seen})"
        )
        return Step(ActionResult.APPLIED, detail, pulsar, bytes_offloaded=moved, read_back=result)
    if unknown or result is ActionResult.STARTED:
        return Step(result, f"{step.detail}; read back: {seen}", pulsar, read_back=result)
    return replace(
        step, detail=f"{step.detail}; read back: {seen}", pulsar=pulsar, read_back=result
    )
