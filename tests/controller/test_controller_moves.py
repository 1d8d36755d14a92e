"""The controller's move path against a small in-test fake of `MovePort`: every result, the
journal across a restart, rechecks, dry-run, the lease and the rate limit.

The fake keeps who owns what and counts every unload, so "never re-sent" is checked on the
fake Pulsar's side, not on the controller's word.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pytest

from balancer.controller.apply import Controller
from balancer.controller.audit import AuditLog
from balancer.controller.breaker import Breakers
from balancer.controller.clock import FakeClock
from balancer.controller.journal import Journal
from balancer.controller.metrics_bridge import attach_metrics
from balancer.controller.outcome import Outcome
from balancer.controller.ports import AdminPort, MovePort
from balancer.controller.rate_limits import ActionLimits
from balancer.controller.settings import ControllerSettings
from balancer.core.bundles import BundleRange
from balancer.core.decisions import DecisionKind
from balancer.core.lease import LeaseStatus
from balancer.core.moves.model import MoveDecision, MoveReason, move_decision_id
from balancer.core.results import MOVE_RESULTS, ActionResult
from balancer.pulsar.errors import (
    ConflictError,
    OutcomeUnknownError,
    PreconditionFailedError,
    PulsarAdminError,
    ServerError,
)

NS = "shop/orders"
BUNDLE = BundleRange(0x00000000, 0x40000000)
NAME = f"{NS}/{BUNDLE}"
SRC, DST, OTHER = "b1:8080", "b2:8080", "b3:8080"


class FakeMover:
    """Who owns what, and what an unload does to it (`then`): "transfer" (the extensible load
    manager: the destination owns it when the call returns), "unowned" (the modular one: 204
    before any lookup), "elsewhere" (a lookup put it on OTHER), "back" (on its source again),
    or an error to raise (with `applied_anyway`: the unload happened before the error)."""

    def __init__(self) -> None:
        self.owner: dict[str, str] = {NAME: SRC}
        self.brokers = (SRC, DST, OTHER)
        self.then = "transfer"
        self.error: PulsarAdminError | None = None
        self.applied_anyway = False
        self.unloads: list[tuple[str, str, str | None, str | None]] = []
        self.reads = 0

    def unload_bundle(
        self,
        namespace: str,
        bundle: BundleRange | str,
        *,
        cluster: str | None = None,
        destination_broker: str | None = None,
    ) -> None:
        self.unloads.append((namespace, str(bundle), cluster, destination_broker))
        if self.error is None or self.applied_anyway:
            name = f"{namespace}/{bundle}"
            owner = {"transfer": destination_broker, "elsewhere": OTHER, "back": SRC}
            new = owner.get(self.then)
            if new is None:
                self.owner.pop(name, None)
            else:
                self.owner[name] = new
        if self.error is not None:
            raise self.error

    def owned_bundles(self, cluster: str, broker: str) -> Mapping[str, object]:
        self.reads += 1
        return {
            n: {"broker_assignment": "shared", "is_controlled": False, "is_active": True}
            for n, b in self.owner.items()
            if b == broker
        }

    def list_brokers(self, cluster: str) -> tuple[str, ...]:
        return self.brokers

    def lookup(self, name: str, broker: str) -> None:
        """A client's lookup placed the unowned bundle on `broker`."""
        self.owner[name] = broker


class Lease:
    def __init__(self, held: bool) -> None:
        self.held = held

    def status(self) -> LeaseStatus:
        return LeaseStatus(held=self.held, holder=None, detail="standby: lease held by x:1")


class Rig:
    def __init__(self, tmp_path: Path, mover: FakeMover, *, mode: str = "apply") -> None:
        self.tmp_path = tmp_path
        self.mover = mover
        self.clock = FakeClock()
        self.mode = mode
        self.audit = io.StringIO()

    def controller(self, **settings: Any) -> Controller:
        return Controller(
            cast(AdminPort, object()),  # splits and offloads are not used here
            settings=ControllerSettings(mode=self.mode, **settings),  # type: ignore[arg-type]
            journal=Journal(self.tmp_path / "journal.sqlite3"),
            audit=AuditLog(stream=self.audit),
            limits=ActionLimits(
                splits_per_minute=10,
                splits_per_minute_per_namespace=10,
                offloads_per_minute=10,
                offloads_per_minute_per_namespace=10,
                moves_per_minute=2,
                moves_per_minute_per_namespace=2,
                clock=self.clock,
            ),
            breakers=Breakers(failure_threshold=3, cooloff_s=60, clock=self.clock),
            clock=self.clock,
            mover=cast(MovePort, self.mover),
        )

    def audit_records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.audit.getvalue().splitlines()]


def move(window_end_ms: int = 60_000, bundle: BundleRange = BUNDLE) -> MoveDecision:
    return MoveDecision(
        decision_id=move_decision_id(
            cluster="east", namespace=NS, bundle=bundle, window_end_ms=window_end_ms
        ),
        cluster="east",
        namespace=NS,
        bundle=bundle,
        source=SRC,
        destination=DST,
        reason=MoveReason.OVERLOADED,
        bundle_load_ratio=0.2,
        msg_rate=5000.0,
        throughput_bytes=1e6,
        sessions=42,
        source_load_before=0.95,
        source_load_after=0.75,
        destination_load_before=0.2,
        destination_load_after=0.4,
        window_end_ms=window_end_ms,
    )


@pytest.fixture
def mover() -> FakeMover:
    return FakeMover()


@pytest.fixture
def rig(tmp_path: Path, mover: FakeMover) -> Rig:
    return Rig(tmp_path, mover)


def test_a_transfer_is_applied_once_the_destination_owns_it(rig: Rig, mover: FakeMover) -> None:
    ctl = rig.controller()
    outcome = ctl.handle(move())
    assert outcome.result is ActionResult.APPLIED, outcome.detail
    assert outcome.kind is DecisionKind.MOVE and outcome.reason == "overloaded"
    assert "owned by the destination b2:8080" in outcome.detail
    assert outcome.sessions_moved == 42
    assert mover.unloads == [(NS, str(BUNDLE), "east", DST)]
    (entry,) = ctl.journal.entries()
    assert entry.kind == "move" and entry.target == NAME and entry.result == "applied"
    assert entry.payload["call"]["destination_broker"] == DST
    assert ctl.last_moves("east") == {NAME: entry.intent_at_ms}
    (record,) = rig.audit_records()
    assert record["result"] == "applied" and record["decision"]["destination"] == DST
    assert ctl.stats.snapshot().applied[0].target == NAME


def test_landed_elsewhere_records_where(rig: Rig, mover: FakeMover) -> None:
    mover.then = "elsewhere"
    outcome = rig.controller().handle(move())
    assert outcome.result is ActionResult.LANDED_ELSEWHERE
    assert "owned by b3:8080, not the destination b2:8080" in outcome.detail
    assert outcome.pulsar["owner"] == OTHER and outcome.sessions_moved == 42


def test_a_204_put_back_on_its_source_landed_elsewhere(rig: Rig, mover: FakeMover) -> None:
    mover.then = "back"
    outcome = rig.controller().handle(move())
    assert outcome.result is ActionResult.LANDED_ELSEWHERE
    assert "placed it back on its source b1:8080" in outcome.detail


def test_unowned_after_the_204_is_unknown_then_applied_by_reconcile(
    rig: Rig, mover: FakeMover
) -> None:
    mover.then = "unowned"  # the modular load manager: 204 before the next lookup
    ctl = rig.controller()
    seen: list[Outcome] = []
    ctl.add_listener(seen.append)
    outcome = ctl.handle(move())
    assert outcome.result is ActionResult.UNKNOWN, outcome.detail
    assert "not owned by any broker yet" in outcome.detail
    assert ctl.journal.has_unsettled()
    # Still unowned at the next batch: stays unknown, nothing re-sent.
    rig.clock.advance(10)
    assert ctl.reconcile() == []
    mover.lookup(NAME, DST)
    rig.clock.advance(10)
    assert ctl.reconcile() == [(outcome.decision_id, ActionResult.APPLIED)]
    assert seen[-1].rechecked and seen[-1].result is ActionResult.APPLIED
    assert seen[-1].sessions_moved == 42 and seen[-1].decision == move()
    assert len(mover.unloads) == 1
    assert not ctl.journal.has_unsettled()


def test_unowned_past_move_settle_s_is_failed(rig: Rig, mover: FakeMover) -> None:
    mover.then = "unowned"
    ctl = rig.controller(move_settle_s=120.0)
    decision_id = ctl.handle(move()).decision_id
    rig.clock.advance(121)
    ((settled_id, result),) = ctl.reconcile()
    assert (settled_id, result) == (decision_id, ActionResult.FAILED)
    assert "past controller.move_settle_s" in (ctl.journal.get(decision_id).detail or "")
    assert len(mover.unloads) == 1


def test_no_answer_still_on_the_source_is_unknown_never_resent(rig: Rig, mover: FakeMover) -> None:
    mover.error = OutcomeUnknownError("read timeout")
    ctl = rig.controller()
    outcome = ctl.handle(move())
    assert outcome.result is ActionResult.UNKNOWN
    assert "may still be in flight" in outcome.detail
    # The same decision again (a replayed batch) and a new one on the bundle: not sent.
    assert ctl.handle(move()).result is ActionResult.DUPLICATE
    assert ctl.handle(move(120_000)).result is ActionResult.DUPLICATE
    rig.clock.advance(400)  # past move_settle_s, still on its source: it never happened
    assert ctl.reconcile() == [(outcome.decision_id, ActionResult.FAILED)]
    assert len(mover.unloads) == 1


def test_no_answer_but_applied_reads_back_applied(rig: Rig, mover: FakeMover) -> None:
    mover.error = OutcomeUnknownError("connection reset")
    mover.applied_anyway = True
    outcome = rig.controller().handle(move())
    assert outcome.result is ActionResult.APPLIED
    assert outcome.read_back is ActionResult.APPLIED


def test_409_inactive_destination_is_failed(rig: Rig, mover: FakeMover) -> None:
    mover.error = ConflictError(
        "conflict", status=409,
        reason="Not allowed unload namespace bundle to inactive destination broker",
    )  # fmt: skip
    ctl = rig.controller()
    outcome = ctl.handle(move())
    assert outcome.result is ActionResult.FAILED
    assert "destination b2:8080 inactive" in outcome.detail
    assert not ctl.journal.has_unsettled()


def test_412_unknown_bundle_is_stale(rig: Rig, mover: FakeMover) -> None:
    mover.error = PreconditionFailedError("precondition", status=412, reason="bundle not found")
    outcome = rig.controller().handle(move())
    assert outcome.result is ActionResult.STALE
    assert "no longer exists" in outcome.detail


def test_5xx_still_on_the_source_is_read_back_failed(rig: Rig, mover: FakeMover) -> None:
    mover.error = ServerError("boom", status=500)
    ctl = rig.controller()
    outcome = ctl.handle(move())
    assert outcome.result is ActionResult.FAILED and outcome.read_back is ActionResult.FAILED
    assert "still owned by its source" in outcome.detail
    assert not ctl.journal.has_unsettled()


def test_a_bundle_that_left_its_source_is_stale_and_nothing_sent(
    rig: Rig, mover: FakeMover
) -> None:
    mover.owner[NAME] = OTHER  # Pulsar's own shedder moved it meanwhile
    ctl = rig.controller()
    outcome = ctl.handle(move())
    assert outcome.result is ActionResult.STALE
    assert mover.unloads == [] and ctl.journal.entries() == []


def test_dry_run_records_and_sends_nothing(tmp_path: Path, mover: FakeMover) -> None:
    rig = Rig(tmp_path, mover, mode="dry-run")
    ctl = rig.controller()
    outcome = ctl.handle(move())
    assert outcome.result is ActionResult.DRY_RUN
    assert mover.unloads == [] and mover.reads == 0
    (planned,) = ctl.stats.snapshot().planned
    assert planned.detail == "would move from b1:8080 to b2:8080 (overloaded)"
    assert rig.audit_records()[0]["result"] == "dry_run"


def test_without_the_lease_nothing_is_sent(rig: Rig, mover: FakeMover) -> None:
    ctl = rig.controller()
    ctl.lease = Lease(held=False)
    outcome = ctl.handle(move())
    assert outcome.result is ActionResult.NO_LEASE
    assert mover.unloads == [] and ctl.journal.entries() == []


def test_a_lease_lapsed_before_the_call_closes_the_intent(rig: Rig, mover: FakeMover) -> None:
    ctl = rig.controller()

    class Lapsing:
        asked = 0

        def status(self) -> LeaseStatus:
            Lapsing.asked += 1
            return LeaseStatus(held=Lapsing.asked == 1, holder=None, detail="lease expired")

    ctl.lease = Lapsing()
    assert ctl.handle(move()).result is ActionResult.NO_LEASE
    assert mover.unloads == []
    (entry,) = ctl.journal.entries()
    assert entry.result == "no_lease" and ctl.last_moves("east") == {}


def test_the_allow_list_denies(rig: Rig, mover: FakeMover) -> None:
    ctl = rig.controller(allow_namespaces=("acme/*",))
    assert ctl.handle(move()).result is ActionResult.DENIED
    assert mover.unloads == []


def test_moves_per_minute_per_cluster(rig: Rig, mover: FakeMover) -> None:
    ctl = rig.controller()
    bundles = [BundleRange(i * 0x10000000, (i + 1) * 0x10000000) for i in range(3)]
    for b in bundles:
        mover.owner[f"{NS}/{b}"] = SRC
    results = [ctl.handle(move(bundle=b)).result for b in bundles]
    assert results == [ActionResult.APPLIED, ActionResult.APPLIED, ActionResult.RATE_LIMITED]
    assert len(mover.unloads) == 2
    rig.clock.advance(61)
    assert ctl.handle(move(120_000, bundles[2])).result is ActionResult.APPLIED


def test_the_breaker_open_sends_nothing(rig: Rig, mover: FakeMover) -> None:
    ctl = rig.controller()
    for _ in range(3):
        ctl.breakers.for_cluster("east").record_failure()
    assert ctl.handle(move()).result is ActionResult.BREAKER_OPEN
    assert mover.unloads == [] and mover.reads == 0


def test_an_intent_left_open_by_a_crash_is_settled_from_ownership(
    rig: Rig, mover: FakeMover
) -> None:
    """The process died after the unload went out and before its outcome was journaled."""
    ctl = rig.controller()

    def die(*args: Any, **kwargs: Any) -> None:
        FakeMover.unload_bundle(mover, *args, **kwargs)
        raise SystemExit("SIGKILL")  # nothing after the call is recorded

    mover.then = "unowned"
    mover.unload_bundle = die  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        ctl.handle(move())
    (entry,) = ctl.journal.pending()
    ctl.journal.close()
    # The restarted process: a new controller on the same journal file.
    mover.unload_bundle = FakeMover.unload_bundle.__get__(mover)  # type: ignore[method-assign]
    again = rig.controller()
    assert again.last_moves("east") == {NAME: entry.intent_at_ms}  # grace period survives
    assert again.handle(move()).result is ActionResult.DUPLICATE
    assert again.reconcile() == [(entry.decision_id, ActionResult.UNKNOWN)]  # nobody owns it
    mover.lookup(NAME, DST)
    assert again.reconcile() == [(entry.decision_id, ActionResult.APPLIED)]
    assert len(mover.unloads) == 1  # never re-sent
    assert again.last_moves("east") == {NAME: entry.intent_at_ms}


def test_an_intent_whose_bundle_is_still_on_its_source_is_abandoned(
    rig: Rig, mover: FakeMover
) -> None:
    ctl = rig.controller()
    ctl.journal.record_intent(
        decision_id="move-x", kind="move", cluster="east", namespace=NS, target=NAME,
        action_key="k", payload={"call": {"source": SRC, "destination_broker": DST}},
        batch_id=None, at_ms=rig.clock.now_ms(),
    )  # fmt: skip
    assert ctl.reconcile() == [("move-x", ActionResult.ABANDONED)]
    assert mover.unloads == []


def test_a_journal_reopened_keeps_the_last_moves(tmp_path: Path, mover: FakeMover) -> None:
    rig = Rig(tmp_path, mover)
    ctl = rig.controller()
    ctl.handle(move())
    rig.clock.advance(3600)
    mover.owner[NAME] = SRC
    ctl.handle(move(3_660_000))
    last = ctl.journal.last_moves("east")
    ctl.close()
    assert Journal(tmp_path / "journal.sqlite3").last_moves("east") == last
    assert last == {NAME: rig.clock.now_ms()}
    assert Journal(tmp_path / "journal.sqlite3").last_moves("west") == {}


def test_no_mover_fails_the_move(tmp_path: Path) -> None:
    rig = Rig(tmp_path, FakeMover())
    ctl = rig.controller()
    ctl.mover = None
    outcome = ctl.handle(move())
    assert outcome.result is ActionResult.FAILED and "cannot unload" in outcome.detail


class Sink:
    def __init__(self) -> None:
        self.moves: list[tuple[str, ActionResult, int]] = []
        self.refusals: list[tuple[str, Any]] = []
        self.breakers: dict[str, bool] = {}

    def record_split(self, *args: Any, **kwargs: Any) -> None: ...

    def record_split_algorithm_refused(self, *args: Any) -> None: ...

    def record_offload(self, *args: Any, **kwargs: Any) -> None: ...

    def record_move(self, cluster: str, result: ActionResult, sessions_moved: int = 0) -> None:
        self.moves.append((cluster, result, sessions_moved))

    def record_move_refusal(self, cluster: str, refusal: Any) -> None:
        self.refusals.append((cluster, refusal))

    def set_breaker(self, cluster: str, open: bool) -> None:
        self.breakers[cluster] = open


def test_the_metrics_count_moves_and_their_sessions(rig: Rig, mover: FakeMover) -> None:
    ctl = rig.controller()
    sink = Sink()
    attach_metrics(ctl, sink)
    ctl.handle(move())
    assert sink.moves == [("east", ActionResult.APPLIED, 42)]
    assert all(r in MOVE_RESULTS for _, r, _ in sink.moves)
