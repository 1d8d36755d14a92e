"""What each refusal of an unload with destination means (issue 41, point 6: NamespacesBase
.internalUnloadNamespaceBundleAsync and validateLeaderBrokerAsync), and the guard against a
second move of a bundle range in flight (point 1)."""

from __future__ import annotations

import pytest

from balancer.controller.metrics_bridge import attach_metrics
from balancer.controller.move_steps import ranges_in_flight
from balancer.core.bundles import BundleRange
from balancer.core.moves.refusals import UnloadRefusal, classify_refusal
from balancer.core.results import ActionResult
from balancer.pulsar.errors import ConflictError, NotFoundError, PreconditionFailedError
from tests.controller.test_controller_moves import (
    BUNDLE,
    DST,
    NAME,
    NS,
    SRC,
    FakeMover,
    Rig,
    Sink,
    move,
)

LEADER_URL = "Redirected broker's service url is not configured."
NOT_OWNED = f"Failed to find ownership for ServiceUnit:{NAME}"


@pytest.fixture
def mover() -> FakeMover:
    return FakeMover()


@pytest.fixture
def rig(tmp_path, mover: FakeMover) -> Rig:  # type: ignore[no-untyped-def]
    return Rig(tmp_path, mover)


@pytest.mark.parametrize(
    ("status", "reason", "refusal"),
    [
        (412, "Cannot find bundle in the bundles list", UnloadRefusal.BUNDLE_NOT_FOUND),
        (412, "Invalid upper boundary for bundle", UnloadRefusal.BUNDLE_NOT_FOUND),
        (412, "bundle not found", UnloadRefusal.BUNDLE_NOT_FOUND),
        (412, NOT_OWNED, UnloadRefusal.NOT_OWNED),
        (412, LEADER_URL, UnloadRefusal.LEADER_URL_MISSING),
        (412, "The current leader is empty.", UnloadRefusal.NO_LEADER),
        (412, "something new", UnloadRefusal.OTHER_412),
        (404, "Namespace does not exist", UnloadRefusal.NAMESPACE_GONE),
        (409, "Not allowed unload namespace bundle to inactive destination broker",
         UnloadRefusal.INACTIVE_DESTINATION),
        (500, "boom", None),
        (None, "", None),
    ],
)  # fmt: skip
def test_classify_refusal(status: int | None, reason: str, refusal: UnloadRefusal | None) -> None:
    assert classify_refusal(status, reason) is refusal


def outcome_of(rig: Rig, mover: FakeMover, error: Exception):  # type: ignore[no-untyped-def]
    mover.error = error  # type: ignore[assignment]
    ctl = rig.controller()
    sink = Sink()
    attach_metrics(ctl, sink)
    return ctl.handle(move()), sink


def test_a_leader_without_url_is_failed_not_stale(rig: Rig, mover: FakeMover) -> None:
    outcome, sink = outcome_of(
        rig, mover, PreconditionFailedError("precondition", status=412, reason=LEADER_URL)
    )
    assert outcome.result is ActionResult.FAILED  # today: stale ("the layout changed")
    assert outcome.refusal is UnloadRefusal.LEADER_URL_MISSING
    assert "no web service URL" in outcome.detail
    assert sink.refusals == [("east", UnloadRefusal.LEADER_URL_MISSING)]
    (record,) = rig.audit_records()
    assert record["refusal"] == "leader_url_missing" and record["result"] == "failed"


def test_not_owned_is_read_back_not_stale(rig: Rig, mover: FakeMover) -> None:
    # Someone unloaded the bundle after the fresh check: nobody owns it when ours arrives.
    mover.then = "unowned"
    mover.applied_anyway = True
    outcome, sink = outcome_of(
        rig, mover, PreconditionFailedError("precondition", status=412, reason=NOT_OWNED)
    )
    assert outcome.result is ActionResult.UNKNOWN, outcome.detail  # rechecked, not stale
    assert outcome.refusal is UnloadRefusal.NOT_OWNED
    assert f"keeps destination {DST} for range {BUNDLE}" in outcome.detail
    assert sink.refusals == [("east", UnloadRefusal.NOT_OWNED)]
    # Its next lookup takes the kept destination: the recheck settles it applied.
    ctl = rig.controller()
    mover.lookup(NAME, DST)
    rig.clock.advance(5)
    assert ctl.reconcile() == [(outcome.decision_id, ActionResult.APPLIED)]
    assert len(mover.unloads) == 1


def test_bundle_not_found_is_stale_and_names_the_leftover(rig: Rig, mover: FakeMover) -> None:
    outcome, _ = outcome_of(
        rig,
        mover,
        PreconditionFailedError(
            "precondition", status=412, reason="Cannot find bundle in the bundles list"
        ),
    )
    assert outcome.result is ActionResult.STALE
    assert outcome.refusal is UnloadRefusal.BUNDLE_NOT_FOUND
    assert f"range {BUNDLE}" in outcome.detail
    assert rig.audit_records()[0]["refusal"] == "bundle_not_found"


def test_404_and_409_are_typed(rig: Rig, mover: FakeMover) -> None:
    outcome, _ = outcome_of(
        rig, mover, NotFoundError("nf", status=404, reason="Namespace does not exist")
    )
    assert outcome.refusal is UnloadRefusal.NAMESPACE_GONE
    assert "namespace gone" in outcome.detail
    mover.error = ConflictError("c", status=409, reason="inactive")
    outcome = rig.controller().handle(move(120_000))
    assert outcome.result is ActionResult.FAILED
    assert outcome.refusal is UnloadRefusal.INACTIVE_DESTINATION


def test_a_second_move_of_a_range_in_flight_waits(rig: Rig, mover: FakeMover) -> None:
    """Another namespace's bundle with the same range was unloaded and is not owned yet:
    a move of ours with that range is not sent (it would overwrite that destination)."""
    other = f"shop/other/{BUNDLE}"
    mover.owner[other] = SRC
    mover.then = "unowned"
    ctl = rig.controller()
    first = ctl.handle(move())
    assert first.result is ActionResult.UNKNOWN
    assert ranges_in_flight(ctl.journal, "east") == {str(BUNDLE)}
    assert ranges_in_flight(ctl.journal, "west") == frozenset()
    second = move(120_000).__class__(
        **{**{f: getattr(move(120_000), f) for f in move().__slots__}, "namespace": "shop/other"}
    )
    outcome = ctl.handle(second)
    assert outcome.result is ActionResult.DUPLICATE
    assert f"range {BUNDLE} has a move in flight" in outcome.detail
    assert [u[0] for u in mover.unloads] == [NS]
    # Owned again: the range is free.
    mover.lookup(NAME, DST)
    rig.clock.advance(5)
    ctl.reconcile()
    assert ranges_in_flight(ctl.journal, "east") == frozenset()
    assert ctl.handle(move(180_000, bundle=BundleRange(0x40000000, 0x80000000))).result in (
        ActionResult.STALE,  # not owned by SRC in the fake: nothing sent, but not held back
    )
