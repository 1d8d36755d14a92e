"""The controller's move path: fresh check, the unload to a destination, and who owns the
bundle afterwards.

`PUT .../{bundle}/unload?destinationBroker=` (Namespaces.unloadNamespaceBundle, Pulsar 3.0)
answers differently under the two load managers: the extensible one transfers the bundle
and answers once the destination owns it; the modular one (the default) keeps the
destination in the leader's memory (`bundleBrokerAffinityMap`), unloads the bundle, and
answers 204 BEFORE anyone owns it: the next lookup places it, and a concurrent lookup may
place it elsewhere (apache/pulsar#24884). So the answer alone proves nothing: ownership is
read back from `ownedNamespaces` of the destination, the source and, if neither has it, every
active broker (never a lookup: a lookup assigns an unowned bundle and uses up the pending
destination). Moves left `unknown`, and move intents a crash left open, are settled by
move_settle (which also copes with brokers that left the cluster).

Owned by the destination: `applied`; by another broker: `landed_elsewhere` (where, in the
detail and the audit log); by none yet: `unknown`, rechecked by `Controller.reconcile()`
each batch and after a restart, never re-sent, `failed` once `move_settle_s` has passed. A
412 is `stale` (the bundle no longer exists: the layout changed), a 404 the namespace gone,
a 409 (inactive destination) and other 4xx `failed`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from balancer.controller.outcome import Finish, Step, read_back_needed
from balancer.controller.ports import MovePort
from balancer.controller.writer_gate import fenced
from balancer.core.moves.model import MoveDecision
from balancer.core.results import ActionResult
from balancer.pulsar.errors import PulsarAdminError

if TYPE_CHECKING:
    from balancer.controller.apply import Controller

# What Pulsar answered the unload: 204 ("ok"), an error status ("error": it did not act,
# or did not finish), or nothing ("none": no answer or a crash; it may still be in flight).
Answer = Literal["ok", "error", "none"]

# Results that end the decision's own step without raising (the others raise Finish).
_KEPT = (ActionResult.APPLIED, ActionResult.LANDED_ELSEWHERE, ActionResult.UNKNOWN)
NO_MOVER = "this admin client cannot unload to a destination nor read ownership"


def bundle_name(decision: MoveDecision) -> str:
    """`tenant/ns/0x.._0x..`: how ownedNamespaces, the journal and the grace period name it."""
    return decision.bundle.key(decision.namespace)


def move_action_key(decision: MoveDecision) -> str:
    # A bundle may rightly move again later (after its grace period): the window tells apart.
    return (
        f"move|{decision.cluster}|{bundle_name(decision)}|{decision.source}>"
        f"{decision.destination}|{decision.window_end_ms}"
    )


def find_owner(
    mover: MovePort, cluster: str, name: str, first: Sequence[str]
) -> tuple[str | None, str]:
    """The broker that owns bundle `name` (None: none does, as far as could be read) and a
    note on what could not be read. `first` is read first and must answer (its errors
    propagate); the other active brokers are read only if none of `first` owns it, and one
    that does not answer is noted, not fatal."""
    for broker in first:
        if name in mover.owned_bundles(cluster, broker):
            return broker, ""
    unread: list[str] = []
    for broker in mover.list_brokers(cluster):
        if broker in first:
            continue
        try:
            if name in mover.owned_bundles(cluster, broker):
                return broker, ""
        except PulsarAdminError:
            unread.append(broker)
    return None, f" ({len(unread)} broker(s) unread: {', '.join(unread)})" if unread else ""


def move_verdict(
    owner: str | None,
    *,
    source: str,
    destination: str,
    answer: Answer,
    age_s: float,
    settle_s: float,
) -> tuple[ActionResult, str]:
    """What the bundle's owner says of an unload sent to `destination`."""
    if owner == destination:
        return ActionResult.APPLIED, f"owned by the destination {destination}"
    if owner is None:
        if age_s >= settle_s:
            return ActionResult.FAILED, (
                f"not owned by any broker {age_s:.0f} s after the unload (past "
                f"controller.move_settle_s, {settle_s:.0f} s): no lookup placed it"
            )
        return ActionResult.UNKNOWN, "not owned by any broker yet: the next lookup places it"
    if owner != source:
        return ActionResult.LANDED_ELSEWHERE, (
            f"owned by {owner}, not the destination {destination} (apache/pulsar#24884)"
        )
    if answer == "ok":
        return ActionResult.LANDED_ELSEWHERE, (
            f"unloaded (204) but a lookup placed it back on its source {source}"
        )
    if answer == "error" or age_s >= settle_s:
        return ActionResult.FAILED, f"not applied: still owned by its source {source}"
    return ActionResult.UNKNOWN, f"still owned by its source {source}: may still be in flight"


def move_steps(ctl: Controller, decision: MoveDecision, batch_id: str | None) -> Step:
    mover = ctl.mover
    if mover is None:
        raise Finish(ActionResult.FAILED, NO_MOVER)
    name, cluster = bundle_name(decision), decision.cluster
    # Fresh check: the decision's evidence holds only while the bundle is on its source.
    owned = ctl._call(
        cluster, "owned bundles", lambda: mover.owned_bundles(cluster, decision.source)
    )
    if name not in owned:
        raise Finish(ActionResult.STALE, f"bundle {name} no longer owned by {decision.source}")
    ctl._wait_unsettled(decision, name)
    ctl._acquire(decision)
    call = {
        "op": "unload_bundle",
        "namespace": decision.namespace,
        "bundle": str(decision.bundle),
        "source": decision.source,
        "destination_broker": decision.destination,
    }
    ctl._intent(
        decision,
        batch_id,
        target=name,
        action_key=move_action_key(decision),
        call=call,
        expected={"sessions": decision.sessions, "msg_rate": decision.msg_rate},
    )
    try:
        ctl._call(
            cluster,
            "unload bundle",
            fenced(
                ctl.lease,
                lambda: mover.unload_bundle(
                    decision.namespace,
                    decision.bundle,
                    cluster=cluster,
                    destination_broker=decision.destination,
                ),
            ),
        )
    except Finish as finish:
        step = _refused(ctl, decision, finish.step)
        ctl._outcome(decision.decision_id, step.result, step.detail)
        if step.result in _KEPT:
            return step
        raise Finish.of(step) from None
    ctl.journal.add_to_payload(decision.decision_id, answer="ok")
    step = _read_back(ctl, decision, Step(ActionResult.APPLIED, "unloaded (204)", {"status": 204}))
    ctl._outcome(decision.decision_id, step.result, step.detail)
    if step.result in _KEPT:
        return step
    raise Finish.of(step)


def _refused(ctl: Controller, decision: MoveDecision, step: Step) -> Step:
    """The unload did not answer 204: what it means, reading ownership back when needed."""
    status = step.pulsar.get("status")
    reason = str(step.pulsar.get("reason", ""))
    if status == 412 and "leader" not in reason.lower():
        return replace(
            step, result=ActionResult.STALE, detail=f"{step.detail}: the bundle no longer "
            "exists (the layout changed)",
        )  # fmt: skip
    if status == 404:
        return replace(step, detail=f"{step.detail} (namespace gone)")
    if status == 409:
        return replace(step, detail=f"{step.detail}: destination {decision.destination} inactive")
    if read_back_needed(step):  # no answer or a 5xx: Pulsar may have acted
        return _read_back(ctl, decision, step)
    return step


def _read_back(ctl: Controller, decision: MoveDecision, step: Step) -> Step:
    """Who owns the bundle now, after an unload answered `step` (204, 5xx or nothing)."""
    mover = ctl.mover
    assert mover is not None
    answer: Answer = (
        "ok" if step.pulsar.get("status") == 204
        else "none" if step.result is ActionResult.UNKNOWN else "error"
    )  # fmt: skip
    first = (decision.destination, decision.source)
    try:
        owner, unread = ctl._call(
            decision.cluster,
            "owned bundles",
            lambda: find_owner(mover, decision.cluster, bundle_name(decision), first),
        )
    except Finish as again:
        result = ActionResult.UNKNOWN if answer != "error" else step.result
        detail = f"{step.detail}; ownership not read ({again.step.detail})"
        return replace(step, result=result, detail=detail, read_back=None)
    result, seen = move_verdict(
        owner, source=decision.source, destination=decision.destination, answer=answer,
        age_s=0.0, settle_s=ctl.settings.move_settle_s,
    )  # fmt: skip
    pulsar = {**step.pulsar, "owner": owner}
    return Step(result, f"{step.detail}; {seen}{unread}", pulsar, read_back=result)
