"""The controller's split path: fresh check of the layout, the call, and what its answer means.

A 412 names a bundle no longer in the layout (`NamespaceBundles.validateBundle`: Pulsar's
own auto-split, or an earlier attempt of ours, got there first): the layout is read back and
the split ends `applied` (our boundaries are there) or `stale` (someone else changed it). A
404 is the namespace gone. No answer or a 5xx (never re-sent: the transport does not retry a
split) is read back the same way. A 204 whose layout read still shows the parent (a read
through a load balancer may lag) is `unknown` and rechecked by `Controller.reconcile()`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from balancer.controller.outcome import (
    Finish,
    Step,
    algorithm_refused,
    split_action_key,
    split_read_back_needed,
)
from balancer.controller.reconcile import split_done, split_verdict
from balancer.controller.writer_gate import fenced
from balancer.core.decisions import SplitDecision
from balancer.core.results import ActionResult
from balancer.core.split import SplitAlgorithm

if TYPE_CHECKING:
    from balancer.controller.apply import Controller


def split_steps(ctl: Controller, decision: SplitDecision, batch_id: str | None) -> Step:
    layout = ctl._layout(decision)
    if not layout.has(decision.bundle):
        raise Finish(ActionResult.STALE, f"bundle {decision.bundle} no longer in the layout")
    ctl._wait_unsettled(decision, decision.bundle.key(decision.namespace))
    action_key = split_action_key(decision)
    earlier = ctl.journal.applied_with_key(action_key)
    if earlier is not None:
        raise Finish(ActionResult.DUPLICATE, f"same split done by {earlier.decision_id}")
    ctl._acquire(decision)
    unload = (
        ctl.settings.unload_after_split
        if decision.unload_children is None
        else decision.unload_children
    )
    call = {
        "op": "split_bundle",
        "namespace": decision.namespace,
        "bundle": str(decision.bundle),
        "algorithm": SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE.value,
        "boundaries": list(decision.boundaries),
        "unload": unload,
    }
    ctl._intent(
        decision,
        batch_id,
        target=decision.bundle.key(decision.namespace),
        action_key=action_key,
        call=call,
    )
    try:
        ctl._call(
            decision.cluster,
            "split bundle",
            fenced(
                ctl.lease,
                lambda: ctl.admin.split_bundle(
                    decision.namespace,
                    decision.bundle,
                    algorithm=SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE.value,
                    boundaries=decision.boundaries,
                    unload=unload,
                ),
            ),
        )
    except Finish as finish:
        step = finish.step
        refused = algorithm_refused(step, SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE)
        if refused is not None:
            step = refused
        elif step.pulsar.get("status") == 404:  # 404 on split: the namespace only
            step = replace(step, detail=f"{step.detail} (namespace gone)")
        elif split_read_back_needed(step):
            step = _split_read_back(ctl, decision, step)
        ctl._outcome(decision.decision_id, step.result, step.detail)
        if step.result is ActionResult.APPLIED:
            return step
        raise Finish.of(step) from None
    return _split_answered(ctl, decision)


def _split_answered(ctl: Controller, decision: SplitDecision) -> Step:
    """The split answered 204: what does the layout show?"""
    children = len(decision.boundaries) + 1
    try:
        after = ctl._layout(decision)
    except Finish as finish:
        detail = f"split accepted; layout not verified ({finish.step.detail})"
        ctl._outcome(decision.decision_id, ActionResult.APPLIED, detail)
        return Step(ActionResult.APPLIED, detail, {"status": 204}, children=children)
    pulsar = {"status": 204, "num_bundles": after.num_bundles}
    if split_done(after, decision.bundle, decision.boundaries):
        detail = f"split into {children} bundles"
        ctl._outcome(decision.decision_id, ActionResult.APPLIED, detail)
        return Step(ActionResult.APPLIED, detail, pulsar, children=children)
    # Pulsar answers 204 when it found nothing to split, and a layout read through a load
    # balancer can still show the parent just after a split: `unknown`, rechecked by
    # reconcile() every batch (never re-sent; `failed` once unknown_settle_s has passed
    # with the parent still there). Sleeping here would hold the cluster's lock.
    result, seen = split_verdict(after, decision.bundle, decision.boundaries, settled=False)
    detail = f"split answered 204 but the layout lacks the boundaries (read back: {seen})"
    ctl._outcome(decision.decision_id, result, detail)
    step = Step(result, detail, pulsar, read_back=result)
    if result is ActionResult.UNKNOWN:
        return step
    raise Finish.of(step)


def _split_read_back(ctl: Controller, decision: SplitDecision, step: Step) -> Step:
    """The split got no answer, a 5xx or a 412 (stale bundle): what does the layout show?
    `applied` (our boundaries are there), `stale` (someone else changed the bundle),
    else `failed`, or `unknown` when no answer came (it may still be in flight)."""
    unknown = step.result is ActionResult.UNKNOWN
    try:
        layout = ctl._layout(decision)
    except Finish as again:
        return replace(step, detail=f"{step.detail}; layout not read ({again.step.detail})")
    result, seen = split_verdict(layout, decision.bundle, decision.boundaries, settled=not unknown)
    pulsar = {**step.pulsar, "num_bundles": layout.num_bundles}
    if result is ActionResult.APPLIED:
        children = len(decision.boundaries) + 1
        detail = f"split into {children} bundles ({step.detail}; read back: {seen})"
        return Step(ActionResult.APPLIED, detail, pulsar, children=children, read_back=result)
    return Step(result, f"{step.detail}; read back: {seen}", pulsar, read_back=result)
