"""The controller's single-writer gate: without a valid lease, no call changes Pulsar.

Against the simulated peer group over real HTTP, which counts every request by route, so
"nothing sent" is checked on Pulsar's side.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from balancer.core.lease import LeaseStatus
from balancer.core.results import ActionResult
from balancer.pulsar import PulsarPeerGroup
from balancer.sim import RunningPeerGroup, parse_scenario, start_peer_group
from tests.controller.test_controller import (
    HOT_NS,
    SCENARIO,
    Rig,
    _offload_decision,
    decide,
    make_client,
    report,
    rig,
)

__all__ = ["rig"]  # the fixture, shared with test_controller

HELD = LeaseStatus(held=True, holder="me:1", detail="writer lease held", valid_for_s=20.0)
STANDBY = LeaseStatus(held=False, holder="other:2", detail="standby: writer lease held by other:2")
LAPSED = LeaseStatus(
    held=False, holder=None, detail="writer lease expired: membership last confirmed 31.0 s ago"
)


class ScriptedLease:
    """Answers `status()` from a script; the last answer repeats."""

    def __init__(self, *answers: LeaseStatus) -> None:
        self._answers = list(answers)
        self.asked = 0

    def status(self) -> LeaseStatus:
        self.asked += 1
        return self._answers.pop(0) if len(self._answers) > 1 else self._answers[0]


@pytest.fixture
def sim() -> Iterator[RunningPeerGroup]:
    with start_peer_group(parse_scenario(SCENARIO)) as running:
        yield running


@pytest.fixture
def client(sim: RunningPeerGroup) -> Iterator[PulsarPeerGroup]:
    with make_client(sim) as group:
        yield group


@pytest.fixture
def lease() -> ScriptedLease:
    return ScriptedLease(STANDBY)


def test_a_standby_decides_and_sends_nothing(
    sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig, lease: ScriptedLease
) -> None:
    controller = rig.controller(client)
    controller.lease = lease
    handler = rig.handler(controller)
    handler.handle(report(sim, 1, 60_000))
    (outcome,) = handler.last_outcomes
    assert outcome.result is ActionResult.NO_LEASE
    assert outcome.detail == "nothing touched: standby: writer lease held by other:2"
    # Not a single call to Pulsar, not even the layout read that precedes a split.
    assert sim.model.requests() == 0 and sim.model.splits == []
    assert controller.journal.entries() == []  # the holder may act on it; so may we, later
    (record,) = rig.audit_records()
    assert record["result"] == "no_lease" and "held by other:2" in record["detail"]
    assert controller.stats.snapshot().counters[("split", "no_lease", "MsgRate")] == 1
    assert controller.stats.snapshot().applied == ()
    handler.close()


def test_the_same_decision_applies_once_the_lease_is_held(
    sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig, lease: ScriptedLease
) -> None:
    decision = decide(sim, rig)
    controller = rig.controller(client)
    controller.lease = lease
    assert controller.apply_split(decision).result is ActionResult.NO_LEASE
    controller.lease = ScriptedLease(HELD)
    outcome = controller.apply_split(decision)  # not "duplicate": nothing was journaled
    assert outcome.result is ActionResult.APPLIED, outcome.detail
    assert len(sim.model.splits) == 1
    controller.close()


def test_a_lease_lapsed_after_the_gate_stops_the_split_before_it_is_sent(
    sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig
) -> None:
    decision = decide(sim, rig)
    controller = rig.controller(client)
    # Held at the gate; lapsed when the call is about to go (a pause past the deadline).
    lease = ScriptedLease(HELD, LAPSED)
    controller.lease = lease
    outcome = controller.apply_split(decision)
    assert outcome.result is ActionResult.NO_LEASE
    assert outcome.detail.startswith("not sent: writer lease expired")
    assert lease.asked == 2
    assert sim.model.requests(route="split") == 0 and sim.model.splits == []
    # The intent was journaled before the call: it is closed as not applied, never applied.
    (entry,) = controller.journal.entries()
    assert entry.result == "no_lease"
    assert controller.journal.applied_with_key(entry.action_key) is None
    assert not controller.journal.has_unsettled()
    controller.close()


def test_offloads_are_gated_the_same_way(
    sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig, lease: ScriptedLease
) -> None:
    topic = f"persistent://{HOT_NS}/o-0"
    sim.clock.advance(3600)
    controller = rig.controller(client)
    controller.lease = lease
    assert controller.apply_offload(_offload_decision(topic)).result is ActionResult.NO_LEASE
    assert sim.model.requests() == 0
    controller.lease = ScriptedLease(HELD, LAPSED)
    outcome = controller.apply_offload(_offload_decision(topic, 120_000))
    assert outcome.result is ActionResult.NO_LEASE and outcome.detail.startswith("not sent")
    assert sim.model.requests(route="offload") == 0
    controller.close()


def test_dry_run_needs_no_lease(sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig) -> None:
    controller = rig.controller(client, mode="dry-run")
    lease = ScriptedLease(STANDBY)
    controller.lease = lease
    assert controller.apply_split(decide(sim, rig)).result is ActionResult.DRY_RUN
    assert lease.asked == 0
    controller.close()
