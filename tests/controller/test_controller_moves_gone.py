"""A move whose outcome is not known settles when its source or destination broker leaves the
cluster (issue 41, point 12): scaled down, or restarted under a new address, a broker is no
longer listed as active and no longer answers. Before, reading it failed the whole check and
the move stayed `unknown` for good, so every later action on the bundle ended `duplicate`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from balancer.controller.journal import Journal
from balancer.core.results import ActionResult
from balancer.pulsar.errors import UnavailableError
from tests.controller.test_controller_moves import DST, NAME, NS, OTHER, SRC, FakeMover, Rig, move


class LeavingMover(FakeMover):
    """FakeMover whose brokers can leave (`gone`: not listed, no answer, as a scaled-down
    broker) or stop answering while still listed (`silent`)."""

    def __init__(self) -> None:
        super().__init__()
        self.gone: set[str] = set()
        self.silent: set[str] = set()
        self.listing_fails = False

    def owned_bundles(self, cluster: str, broker: str) -> Mapping[str, object]:
        if broker in self.gone or broker in self.silent:
            raise UnavailableError(f"connection refused: {broker}", cluster=cluster)
        return super().owned_bundles(cluster, broker)

    def list_brokers(self, cluster: str) -> tuple[str, ...]:
        if self.listing_fails:
            raise UnavailableError("connection refused: the admin URL", cluster=cluster)
        return tuple(b for b in self.brokers if b not in self.gone)

    def leave(self, broker: str) -> None:
        """The broker is scaled down: its bundles are owned by nobody until a lookup."""
        self.gone.add(broker)
        for name, owner in list(self.owner.items()):
            if owner == broker:
                del self.owner[name]


@pytest.fixture
def mover() -> LeavingMover:
    return LeavingMover()


@pytest.fixture
def rig(tmp_path: Path, mover: LeavingMover) -> Rig:
    return Rig(tmp_path, mover)


def test_a_scaled_down_destination_settles_the_move_failed_at_once(
    rig: Rig, mover: LeavingMover
) -> None:
    ctl = rig.controller()
    mover.then = "unowned"
    decision_id = ctl.handle(move()).decision_id
    mover.leave(DST)
    rig.clock.advance(10)  # well within move_settle_s
    assert ctl.reconcile() == [(decision_id, ActionResult.FAILED)]
    entry = ctl.journal.get(decision_id)
    assert entry is not None and "destination b2:8080 left the cluster" in (entry.detail or "")
    assert ctl.stats.snapshot().counters[("move", "failed", "overloaded")] == 1
    (audited,) = [r for r in rig.audit_records() if r.get("rechecked")]
    assert audited["result"] == "failed" and "left the cluster" in audited["detail"]
    # The bundle is free for a later move again (no longer `duplicate`).
    mover.lookup(NAME, SRC)
    mover.then = "transfer"
    mover.brokers = (SRC, OTHER)
    later = ctl.handle(replace(move(120_000), destination=OTHER))
    assert later.result is ActionResult.APPLIED, later.detail
    assert len(mover.unloads) == 2


def test_a_source_restarted_under_a_new_address_does_not_stop_the_check(
    rig: Rig, mover: LeavingMover
) -> None:
    ctl = rig.controller(move_settle_s=120.0)
    mover.then = "unowned"
    decision_id = ctl.handle(move()).decision_id
    mover.leave(SRC)
    mover.brokers = (*mover.brokers, "b1-new:8080")  # the same host back, a new id
    rig.clock.advance(10)
    assert ctl.reconcile() == []  # still nobody owns it: the next lookup places it
    rig.clock.advance(120)
    assert ctl.reconcile() == [(decision_id, ActionResult.FAILED)]
    detail = ctl.journal.get(decision_id).detail or ""  # type: ignore[union-attr]
    assert "past controller.move_settle_s" in detail and "left the cluster" in detail
    assert "b1:8080" in detail


def test_a_source_gone_and_the_bundle_on_its_destination_is_applied(
    rig: Rig, mover: LeavingMover
) -> None:
    ctl = rig.controller()
    mover.then = "unowned"
    decision_id = ctl.handle(move()).decision_id
    mover.leave(SRC)
    mover.lookup(NAME, DST)
    assert ctl.reconcile() == [(decision_id, ActionResult.APPLIED)]


def test_a_listed_destination_that_does_not_answer_waits_then_fails(
    rig: Rig, mover: LeavingMover
) -> None:
    ctl = rig.controller(move_settle_s=120.0)
    mover.then = "unowned"
    decision_id = ctl.handle(move()).decision_id
    mover.silent.add(DST)  # listed, but its web port does not answer
    rig.clock.advance(10)
    assert ctl.reconcile() == []  # it may own the bundle: not given up on yet
    rig.clock.advance(120)
    assert ctl.reconcile() == [(decision_id, ActionResult.FAILED)]
    detail = ctl.journal.get(decision_id).detail or ""  # type: ignore[union-attr]
    assert "1 listed broker(s) unread: b2:8080" in detail


def test_a_cluster_whose_brokers_cannot_be_listed_is_not_settled(
    rig: Rig, mover: LeavingMover
) -> None:
    ctl = rig.controller(move_settle_s=120.0)
    mover.then = "unowned"
    ctl.handle(move())
    mover.listing_fails = True
    rig.clock.advance(500)
    assert ctl.reconcile() == []
    assert ctl.journal.has_unsettled()


def test_a_crash_s_intent_whose_source_died_is_not_stuck(
    tmp_path: Path, mover: LeavingMover
) -> None:
    writer = Journal(tmp_path / "journal.sqlite3", role="apply")
    writer.record_intent(
        decision_id="move-x", kind="move", cluster="east", namespace=NS, target=NAME,
        action_key="k", payload={"call": {"source": SRC, "destination_broker": DST}},
        batch_id=None, at_ms=1_800_000_000_000,
    )  # fmt: skip
    writer.close()  # the process that wrote it is gone
    mover.leave(SRC)
    ctl = Rig(tmp_path, mover).controller()
    # May have been sent: `unknown` (then rechecked), never re-sent.
    assert ctl.reconcile() == [("move-x", ActionResult.UNKNOWN)]
    mover.lookup(NAME, OTHER)
    assert ctl.reconcile() == [("move-x", ActionResult.LANDED_ELSEWHERE)]
    assert mover.unloads == []
