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
each batch and after a restart, never re-sent, `failed` once `move_settle_s` has passed.

A refusal is typed (`UnloadRefusal`, counted and audited): a 412 is `stale` only when the
bundle is not in the layout; "Failed to find ownership" (nobody owns it: someone unloaded it
since the fresh check) is read back like a 204; "The current leader is empty." and
"Redirected broker's service url is not configured." (validateLeaderBrokerAsync) are
`failed`, as are a 409 (inactive destination) and any other 412; a 404 (namespace gone) is
`stale`.

The modular load manager keeps the destination under the bundle's BARE range, written before
the namespace and bundle checks: a 404 or a 412 after them leaves the entry behind, and the
next lookup of any unowned bundle with that range (any namespace) takes it, with no
isolation or anti-affinity filter. Pulsar has no call that removes an entry (a blank
destination is never written), so the balancer keeps that refusal rare and contained: the
fresh ownership check right before the send (a 404/412 then needs a split or a delete in
between), one move per range in flight per cluster (`ranges_in_flight`: a second move of
the range would overwrite the first's destination), and after such a refusal one follow-up
move (`leftover_cleanup`, reason `clear_leftover`) unloads a bundle with that range to the
broker that owns it: the entry now names that broker, and that bundle's own lookup uses it
up in place. The refusal says which range and destination were left behind (detail, audit
`refusal`, `pulsar_balancer_move_refusals_total`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from balancer.controller.journal import Journal, JournalEntry
from balancer.controller.outcome import Finish, Step, read_back_needed
from balancer.controller.ports import MovePort, PulsarConfigPort
from balancer.controller.writer_gate import fenced
from balancer.core.decisions import DecisionKind, stable_id
from balancer.core.moves.model import MoveDecision, MoveReason
from balancer.core.moves.placement import is_system_namespace
from balancer.core.moves.refusals import AFFINITY_LEFT_BEHIND, UnloadRefusal, classify_refusal
from balancer.core.results import ActionResult
from balancer.pulsar.errors import PulsarAdminError

if TYPE_CHECKING:
    from balancer.controller.apply import Controller

log = logging.getLogger("balancer.controller.apply")  # the controller's logger

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


def bundle_range_of(target: str) -> str:
    """The bare range `0x..._0x..` of a bundle name `tenant/ns/0x..._0x..`."""
    return target.rsplit("/", 1)[-1]


def moves_in_flight(journal: Journal, cluster: str) -> list[JournalEntry]:
    """The cluster's moves sent (or maybe sent) whose bundle is not owned again yet: an
    intent without outcome (a crash) or an `unknown` outcome (rechecked each batch)."""
    return [
        e
        for e in (*journal.pending(), *journal.unknown())
        if e.kind == DecisionKind.MOVE.value and e.cluster == cluster
    ]


def ranges_in_flight(journal: Journal, cluster: str) -> frozenset[str]:
    """The bare ranges of the cluster's moves in flight. The modular load manager keeps ONE
    destination per range (ModularLoadManagerImpl.bundleBrokerAffinityMap, keyed by the
    bare range in releases without apache/pulsar PR #25518) for the next lookup of any
    bundle with it: a second move of the range before the first is owned again would
    overwrite the first's destination."""
    return frozenset(bundle_range_of(e.target) for e in moves_in_flight(journal, cluster))


def moves_in_flight_from(journal: Journal, cluster: str) -> dict[str, int]:
    """Source broker -> the cluster's moves in flight out of it (the drain pace counts
    them per draining broker)."""
    out: dict[str, int] = {}
    for e in moves_in_flight(journal, cluster):
        decision = e.payload.get("decision")
        source = decision.get("source") if isinstance(decision, dict) else None
        if isinstance(source, str):
            out[source] = out.get(source, 0) + 1
    return out


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
    if decision.reason is not MoveReason.CLEAR_LEFTOVER and decision.destination in (
        ctl.draining_of(cluster)
    ):
        # Marked draining since the plan was made (a saved plan, an earlier window's).
        raise Finish(
            ActionResult.STALE,
            f"destination {decision.destination} is draining: no bundle goes to it",
        )
    ctl._wait_unsettled(decision, name)
    _wait_same_range(ctl, decision, name)
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


def leftover_cleanup(
    ctl: Controller, decision: MoveDecision, refusal: UnloadRefusal | None
) -> MoveDecision | None:
    """The follow-up that uses up a destination a refused unload left behind, or None.

    After a 404 or a bundle-not-found 412 the modular load manager's leader keeps
    `decision.destination` under the bare range; the next lookup of ANY unowned bundle with
    that range would take it unfiltered, and Pulsar has no call that removes it. So one
    bundle with that range, of a namespace the controller may act on, is unloaded to the
    broker that owns it now (`CLEAR_LEFTOVER`): that overwrites the entry with its own
    owner, and its clients' lookup uses it up and puts it back where it was (its clients
    reconnect once; no placement rule can be broken). The destination's own bundles are
    tried first. A `not_owned` refusal needs none: the refused bundle itself is unowned and
    its lookup takes the destination the plan chose for it. None under the extensible load
    manager (read from the brokers' runtime configuration when the mover can): it keeps no
    destination."""
    if refusal not in (UnloadRefusal.BUNDLE_NOT_FOUND, UnloadRefusal.NAMESPACE_GONE):
        return None
    if decision.reason is MoveReason.CLEAR_LEFTOVER:
        return None  # a follow-up is never followed up (no chain)
    mover, cluster, rng = ctl.mover, decision.cluster, str(decision.bundle)
    if mover is None:
        return None
    try:
        if isinstance(mover, PulsarConfigPort) and "Extensible" in mover.runtime_configuration(
            cluster
        ).get("loadManagerClassName", ""):
            return None  # the extensible load manager keeps no destination (a transfer)
        draining = ctl.draining_of(cluster)  # the cleanup would anchor a bundle there
        brokers = [b for b in mover.list_brokers(cluster) if b not in draining]
        brokers.sort(key=lambda b: (b != decision.destination, b))
        for broker in brokers:
            for name in sorted(mover.owned_bundles(cluster, broker)):
                namespace, _, bundle = name.rpartition("/")
                if (
                    bundle != rng
                    or namespace == decision.namespace  # refused: gone or not in the layout
                    or namespace.count("/") != 1
                    or is_system_namespace(namespace)
                    or not ctl.settings.allows(namespace)
                    or ctl.journal.unsettled_for(DecisionKind.MOVE.value, name) is not None
                    or ctl.journal.unsettled_for(DecisionKind.SPLIT.value, name) is not None
                ):
                    continue
                return _cleanup_decision(decision, namespace, broker)
    except PulsarAdminError as exc:
        log.warning(
            "moves: the destination %s left for range %s in %s after a refused unload is "
            "not cleared (ownership unread: %s)",
            decision.destination, rng, cluster, exc,
        )  # fmt: skip
        return None
    log.warning(
        "moves: the destination %s left for range %s in %s after a refused unload is not "
        "cleared: no bundle of an allowed namespace with that range is owned",
        decision.destination, rng, cluster,
    )  # fmt: skip
    return None


def _cleanup_decision(decision: MoveDecision, namespace: str, owner: str) -> MoveDecision:
    return MoveDecision(
        decision_id=stable_id("move-leftover", decision.decision_id, namespace),
        cluster=decision.cluster,
        namespace=namespace,
        bundle=decision.bundle,
        source=owner,
        destination=owner,
        reason=MoveReason.CLEAR_LEFTOVER,
        bundle_load_ratio=0.0,
        msg_rate=0.0,
        throughput_bytes=0.0,
        sessions=0,
        source_load_before=0.0,
        source_load_after=0.0,
        destination_load_before=0.0,
        destination_load_after=0.0,
        window_end_ms=decision.window_end_ms,
    )


def _wait_same_range(ctl: Controller, decision: MoveDecision, name: str) -> None:
    """No move while another bundle with the same bare range has a move in flight in the
    cluster (see `ranges_in_flight`): the planner plans none, this guards the journal's
    view at send time (a plan made before an earlier move of the range was sent)."""
    rng = str(decision.bundle)
    other = next(
        (
            e
            for e in moves_in_flight(ctl.journal, decision.cluster)
            if e.target != name and bundle_range_of(e.target) == rng
        ),
        None,
    )
    if other is not None:
        raise Finish(
            ActionResult.DUPLICATE,
            f"range {rng} has a move in flight ({other.decision_id} on {other.target}, not "
            "owned again yet): the modular load manager keeps one destination per range",
        )


def _refused(ctl: Controller, decision: MoveDecision, step: Step) -> Step:
    """The unload did not answer 204: what it means (NamespacesBase
    .internalUnloadNamespaceBundleAsync's refusals, `classify_refusal`), reading ownership
    back when Pulsar may have acted or the bundle was unowned."""
    status = step.pulsar.get("status")
    refusal = classify_refusal(
        status if isinstance(status, int) else None, str(step.pulsar.get("reason", ""))
    )
    if refusal is None:
        if read_back_needed(step):  # no answer or a 5xx: Pulsar may have acted
            return _read_back(ctl, decision, step)
        return step
    step = replace(step, refusal=refusal)
    leftover = (
        f"; the modular load manager's leader keeps destination {decision.destination} for "
        f"range {decision.bundle} (any namespace) until a lookup of an unowned bundle with "
        "that range uses it up"
        if refusal in AFFINITY_LEFT_BEHIND
        else ""
    )
    if refusal is UnloadRefusal.BUNDLE_NOT_FOUND:
        return replace(
            step,
            result=ActionResult.STALE,
            detail=f"{step.detail}: the bundle no longer exists (the layout changed){leftover}",
        )
    if refusal is UnloadRefusal.NAMESPACE_GONE:
        return replace(step, detail=f"{step.detail} (namespace gone){leftover}")
    if refusal is UnloadRefusal.INACTIVE_DESTINATION:
        return replace(step, detail=f"{step.detail}: destination {decision.destination} inactive")
    if refusal is UnloadRefusal.NOT_OWNED:
        # Unloaded by someone else since the fresh check: its next lookup may take the kept
        # destination. Who owns it says what came of it (unknown while nobody does).
        read = _read_back(
            ctl, decision, replace(step, detail=f"{step.detail}: no broker owns the bundle")
        )
        return replace(read, detail=read.detail + leftover, refusal=refusal)
    if refusal is UnloadRefusal.LEADER_URL_MISSING:
        return replace(
            step,
            result=ActionResult.FAILED,
            detail=f"{step.detail}: the load manager's leader has no web service URL for this "
            "scheme (set webServicePort / webServicePortTls on the brokers so the leader "
            "has one, or call the leader itself); nothing was kept or unloaded",
        )
    return replace(step, result=ActionResult.FAILED)


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
