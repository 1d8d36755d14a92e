"""An offload's 204 only means STARTED (`PersistentTopic.triggerOffload` starts
`ManagedLedgerImpl.asyncOffloadPrefix` and returns): the controller journals `started`,
follows `GET .../offload` from reconcile() (no lock held while waiting), and settles it
`applied` with the bytes on SUCCESS, `failed` with lastError on ERROR."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from balancer.app.summary import actions_of
from balancer.controller.apply import Controller
from balancer.controller.clock import FakeClock
from balancer.controller.metrics_bridge import attach_metrics
from balancer.controller.outcome import Outcome
from balancer.controller.settings import ControllerSettings
from balancer.core.results import ActionResult
from balancer.pulsar.errors import NotFoundError
from balancer.pulsar.models import InternalStats, LedgerInfo, OffloadState, OffloadStatus
from balancer.pulsar.routing import routing_hint
from tests.controller.test_controller_apply import FakeAdmin, Sink, make, offload_decision

LEDGERS = (LedgerInfo(0, 1, 1000, False), LedgerInfo(1, 1, 0, False))
NO_OFFLOADER = "No offloader configured for namespace acme/orders"


@dataclass
class StatusAdmin(FakeAdmin):
    last_error: str = ""

    def offload_status(self, topic: str) -> OffloadStatus:
        self._maybe_fail("offload_status")
        return OffloadStatus(self.status, self.last_error)

    def trigger_offload(self, topic: str, message_id: object) -> None:
        super().trigger_offload(topic, message_id)  # type: ignore[arg-type]
        self.status = OffloadState.RUNNING


def _admin() -> StatusAdmin:
    return StatusAdmin(ledgers=LEDGERS, current_ledger_size=5000)


def _rig(
    tmp_path: Path, admin: StatusAdmin, clock: FakeClock | None = None
) -> tuple[Controller, Sink, list[Outcome]]:
    controller = make(tmp_path, admin, clock)
    sink, seen = Sink(), list[Outcome]()
    attach_metrics(controller, sink)
    controller.add_listener(seen.append)
    return controller, sink, seen


def test_a_204_is_started_and_applied_with_its_bytes_only_on_success(tmp_path: Path) -> None:
    admin = _admin()
    controller, sink, seen = _rig(tmp_path, admin)
    decision = offload_decision(threshold=100)
    outcome = controller.apply_offload(decision)
    assert outcome.result is ActionResult.STARTED and outcome.bytes_offloaded == 0
    entry = controller.journal.get(decision.decision_id)
    assert entry is not None and entry.result == "started"
    assert sink.offloads == [("east", "started", 0)]
    _, offloads, _ = actions_of(seen)
    assert offloads == []  # the summary counts no bytes before SUCCESS

    # Still RUNNING: nothing settled; no second offload of the topic meanwhile.
    assert controller.reconcile() == []
    again = controller.apply_offload(replace(decision, decision_id="offload-2"))
    assert again.result is ActionResult.ALREADY_RUNNING or again.result is ActionResult.DUPLICATE
    assert sum(c.startswith("offload:") for c in admin.calls) == 1

    admin.status = OffloadState.SUCCESS
    assert controller.reconcile() == [(decision.decision_id, ActionResult.APPLIED)]
    assert sink.offloads[-1] == ("east", "applied", 1000)
    settled = seen[-1]
    assert settled.rechecked and settled.bytes_offloaded == 1000
    _, offloads, _ = actions_of(seen)
    assert [o["bytes_offloaded"] for o in offloads] == [1000]
    assert controller.reconcile() == []  # settled once


def test_an_error_is_failed_with_pulsars_last_error(tmp_path: Path) -> None:
    admin = _admin()
    controller, sink, seen = _rig(tmp_path, admin)
    decision = offload_decision(threshold=100)
    controller.apply_offload(decision)
    admin.status, admin.last_error = OffloadState.ERROR, NO_OFFLOADER
    assert controller.reconcile() == [(decision.decision_id, ActionResult.FAILED)]
    entry = controller.journal.get(decision.decision_id)
    assert entry is not None and entry.result == "failed" and NO_OFFLOADER in (entry.detail or "")
    assert sink.offloads[-1] == ("east", "failed", 0)
    assert NO_OFFLOADER in seen[-1].detail
    audit = (tmp_path / "a.jsonl").read_text()
    assert NO_OFFLOADER in audit


def test_running_past_the_follow_bound_is_failed(tmp_path: Path) -> None:
    clock = FakeClock()
    admin = _admin()
    controller, _, _ = _rig(tmp_path, admin, clock)
    decision = offload_decision(threshold=100)
    controller.apply_offload(decision)
    follow_s = ControllerSettings().offload_follow_s
    clock.advance(follow_s - 1)
    assert controller.reconcile() == []
    clock.advance(2)
    assert controller.reconcile() == [(decision.decision_id, ActionResult.FAILED)]
    entry = controller.journal.get(decision.decision_id)
    assert entry is not None and "still RUNNING" in (entry.detail or "")


def test_not_run_after_a_started_offload_looks_at_the_ledgers(tmp_path: Path) -> None:
    """The status lives in the broker's memory: an unload resets it to NOT_RUN."""
    admin = _admin()
    controller, _, _ = _rig(tmp_path, admin)
    decision = offload_decision(threshold=100)
    controller.apply_offload(decision)
    admin.status = OffloadState.NOT_RUN
    assert controller.reconcile() == [(decision.decision_id, ActionResult.FAILED)]
    entry = controller.journal.get(decision.decision_id)
    assert entry is not None and "NOT_RUN" in (entry.detail or "")


def test_not_run_with_the_ledgers_offloaded_is_applied(tmp_path: Path) -> None:
    admin = _admin()
    controller, sink, _ = _rig(tmp_path, admin)
    controller.apply_offload(offload_decision(threshold=100))
    admin.status = OffloadState.NOT_RUN
    admin.ledgers = (LedgerInfo(0, 1, 1000, True), LedgerInfo(1, 1, 0, False))
    assert [r for _, r in controller.reconcile()] == [ActionResult.APPLIED]
    assert sink.offloads[-1] == ("east", "applied", 1000)


def test_a_restart_settles_a_started_offload_with_the_journaled_bytes(tmp_path: Path) -> None:
    admin = _admin()
    first = make(tmp_path, admin)
    decision = offload_decision(threshold=100)
    first.apply_offload(decision)
    first.close()
    admin.status = OffloadState.SUCCESS
    admin.ledgers = (LedgerInfo(0, 1, 1000, True), LedgerInfo(1, 1, 0, False))  # now offloaded
    controller, sink, seen = _rig(tmp_path, admin)
    assert controller.reconcile() == [(decision.decision_id, ActionResult.APPLIED)]
    assert sink.offloads == [("east", "applied", 1000)]  # from the intent, not re-measured
    assert isinstance(seen[-1], Outcome) and seen[-1].bytes_offloaded == 1000


@dataclass
class ClusterBoundAdmin(StatusAdmin):
    """Answers topic routes only when routed to the topic's cluster, as Pulsar's offload
    trigger and status (topic ownership only) do: any other cluster answers 404."""

    home: str = "west"

    def _check_routed(self) -> None:
        if routing_hint() != self.home:
            raise NotFoundError("HTTP 404: Topic not found", status=404)

    def offload_status(self, topic: str) -> OffloadStatus:
        self._check_routed()
        return super().offload_status(topic)

    def internal_stats(self, topic: str) -> InternalStats:
        self._check_routed()
        return super().internal_stats(topic)


def test_a_started_offload_is_followed_on_its_own_cluster(tmp_path: Path) -> None:
    """reconcile() runs outside any decision: it must route each check to the cluster the
    offload went to, or a topic of another cluster than the entry one reads as deleted."""
    admin = ClusterBoundAdmin(ledgers=LEDGERS, current_ledger_size=5000, home="west")
    controller, sink, _ = _rig(tmp_path, admin)
    decision = replace(offload_decision(threshold=100), cluster="west")
    assert controller.apply_offload(decision).result is ActionResult.STARTED
    assert controller.reconcile() == []  # still RUNNING, read on west
    admin.status = OffloadState.SUCCESS
    assert controller.reconcile() == [(decision.decision_id, ActionResult.APPLIED)]
    assert sink.offloads[-1] == ("west", "applied", 1000)
