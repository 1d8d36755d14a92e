"""A draining broker gets no bundle from the controller in any move (issue 43, point 2): a
move decided (or saved in a plan) before the broker was marked is stale at send time, the
clear_leftover follow-up never anchors a bundle on a draining broker, and a drain move is
verified where it landed like any move."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from balancer.core.moves.model import MoveReason
from balancer.core.results import ActionResult
from balancer.pulsar.errors import PreconditionFailedError
from tests.controller.test_controller_moves import BUNDLE, DST, NS, OTHER, SRC, FakeMover, Rig, move
from tests.controller.test_moves_refusals import RefusesOnce


def test_a_move_to_a_broker_marked_draining_since_is_stale_and_nothing_sent(
    tmp_path: Path,
) -> None:
    mover = FakeMover()
    ctl = Rig(tmp_path, mover).controller()
    ctl.draining_of = lambda cluster: frozenset({DST}) if cluster == "east" else frozenset()
    outcome = ctl.handle(move())
    assert outcome.result is ActionResult.STALE
    assert f"destination {DST} is draining" in outcome.detail
    assert mover.unloads == [] and ctl.journal.entries() == []


def test_a_drain_move_is_verified_where_it_landed(tmp_path: Path) -> None:
    mover = FakeMover()
    ctl = Rig(tmp_path, mover).controller()
    ctl.draining_of = lambda _cluster: frozenset({SRC})
    drain = replace(move(), reason=MoveReason.DRAIN)
    outcome = ctl.handle(drain)
    assert outcome.result is ActionResult.APPLIED, outcome.detail
    assert outcome.reason == "drain" and mover.owner[f"{NS}/{BUNDLE}"] == DST
    mover2 = FakeMover()
    mover2.then = "elsewhere"  # a lookup put it on OTHER
    ctl2 = Rig(tmp_path / "2", mover2).controller()
    ctl2.draining_of = lambda _cluster: frozenset({SRC})
    outcome = ctl2.handle(replace(drain, decision_id="d2"))
    assert outcome.result is ActionResult.LANDED_ELSEWHERE and outcome.pulsar["owner"] == OTHER


def test_the_leftover_follow_up_skips_bundles_of_draining_brokers(tmp_path: Path) -> None:
    # A drain move SRC -> OTHER is refused (412 bundle not found): the follow-up unloads a
    # bundle with the range to its own owner. OTHER has none; SRC's would come next (by
    # name), but SRC is draining: DST's is chosen.
    mover = RefusesOnce()
    mover.owner[f"shop/peer/{BUNDLE}"] = SRC
    mover.owner[f"shop/third/{BUNDLE}"] = DST
    mover.error = PreconditionFailedError(
        "precondition", status=412, reason="Cannot find bundle in the bundles list"
    )
    ctl = Rig(tmp_path, mover).controller()
    ctl.draining_of = lambda _cluster: frozenset({SRC})
    ctl.handle(replace(move(), destination=OTHER, reason=MoveReason.DRAIN))
    assert mover.unloads[1:] == [("shop/third", str(BUNDLE), "east", DST)]
