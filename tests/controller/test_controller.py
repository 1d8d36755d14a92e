"""The controller against the simulated peer group, over real HTTP on 127.0.0.1.

The simulator records every split and offload it applied, so "applied once" is checked on
Pulsar's side, not on the controller's word.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import pytest

from balancer.controller.apply import Controller
from balancer.controller.audit import AuditLog
from balancer.controller.breaker import Breakers, BreakerState
from balancer.controller.clock import FakeClock
from balancer.controller.handler import ControllerHandler
from balancer.controller.journal import Journal
from balancer.controller.outcome import Outcome
from balancer.controller.rate_limits import ActionLimits
from balancer.controller.settings import ControllerSettings
from balancer.core.bundles import BundleRange, NamespaceBundles
from balancer.core.decisions import OffloadDecision, SplitDecision, offload_decision_id
from balancer.core.detect import DetectionSettings
from balancer.core.load import BundleLoad, roll_up
from balancer.core.report import BatchReport
from balancer.core.results import ActionResult
from balancer.core.thresholds import NamespacePolicy, Thresholds
from balancer.pulsar import (
    ClientSettings,
    ClusterEndpoint,
    OffloadState,
    OffloadStatus,
    PulsarPeerGroup,
    RetryPolicy,
    TokenSource,
)
from balancer.sim import RunningPeerGroup, parse_scenario, start_peer_group
from tests.reports import batch_report

LEDGER_BYTES = 10_000_000
HOT_NS = "shop/orders"
SCENARIO: dict[str, Any] = {
    "name": "controller",
    "seed": 5,
    "broker": {
        "ledger_max_size_bytes": LEDGER_BYTES,
        "stats_update_interval_s": 0,
        "offload_duration_s": 30,
    },
    "clusters": [{"name": "east", "brokers": 2, "peers": ["west"]}, {"name": "west"}],
    "namespaces": [
        {
            "name": HOT_NS,
            "cluster": "east",
            "topic_groups": [{"name": "o", "count": 60, "total_msg_rate_in": 240_000}],
        },
        {
            "name": "shop/legacy",
            "cluster": "east",
            "topic_groups": [{"name": "l", "count": 60, "total_msg_rate_in": 240_000}],
        },
        {
            "name": "shop/west",
            "cluster": "west",
            "topic_groups": [{"name": "w", "count": 60, "total_msg_rate_in": 240_000}],
        },
    ],
}
FIRST = BundleRange(0x00000000, 0x40000000)


@pytest.fixture
def sim() -> Iterator[RunningPeerGroup]:
    with start_peer_group(parse_scenario(SCENARIO)) as running:
        yield running


def make_client(sim: RunningPeerGroup, **kwargs: Any) -> PulsarPeerGroup:
    return PulsarPeerGroup(
        [ClusterEndpoint(name, url) for name, url in sim.admin_urls.items()],
        ClientSettings(
            retry=RetryPolicy(max_attempts=2, base_delay_s=0.0, max_delay_s=0.0),
            sleep=lambda _s: None,
            **kwargs,
        ),
    )


@pytest.fixture
def client(sim: RunningPeerGroup) -> Iterator[PulsarPeerGroup]:
    with make_client(sim) as group:
        yield group


@dataclass
class Rig:
    tmp: Path
    clock: FakeClock

    def controller(
        self,
        admin: Any,
        *,
        mode: Literal["dry-run", "apply"] = "apply",
        deny: tuple[str, ...] = (),
        allow: tuple[str, ...] = ("*",),
        failure_threshold: int = 3,
        per_namespace: int = 100,
    ) -> Controller:
        return Controller(
            admin,
            settings=ControllerSettings(
                mode=mode, allow_namespaces=allow, deny_namespaces=deny, unload_after_split=True
            ),
            journal=Journal(self.tmp / "journal.sqlite3"),
            audit=AuditLog(self.tmp / "audit.jsonl"),
            limits=ActionLimits(
                splits_per_minute=100,
                splits_per_minute_per_namespace=per_namespace,
                offloads_per_minute=100,
                offloads_per_minute_per_namespace=per_namespace,
                clock=self.clock,
            ),
            breakers=Breakers(failure_threshold=failure_threshold, cooloff_s=60, clock=self.clock),
            clock=self.clock,
        )

    def handler(self, controller: Controller, *, hit_count: int = 1) -> ControllerHandler:
        return ControllerHandler(
            controller,
            thresholds=Thresholds(NamespacePolicy(offload_threshold_bytes=5 * LEDGER_BYTES)),
            detection=DetectionSettings(hit_count_threshold=hit_count, cooldown_ms=0),
        )

    def audit_records(self) -> list[dict[str, Any]]:
        lines = (self.tmp / "audit.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path, FakeClock())


def load_of(
    sim: RunningPeerGroup,
    namespace: str,
    bundle: BundleRange,
    window_end_ms: int,
    cluster: str = "east",
) -> BundleLoad:
    ns = sim.model.namespaces[namespace]
    topics = tuple(sim.model.topic_loads(ns, bundle))
    return roll_up(
        cluster=cluster,
        namespace=namespace,
        bundle=bundle,
        window_end_ms=window_end_ms,
        topics=topics,
    )


def report(
    sim: RunningPeerGroup,
    batch_id: int,
    window_end_ms: int,
    bundles: Sequence[tuple[str, BundleRange, str]] = ((HOT_NS, FIRST, "east"),),
) -> BatchReport:
    return batch_report(
        batch_id,
        window_end_ms,
        tuple(load_of(sim, ns, b, window_end_ms, c) for ns, b, c in bundles),
    )


def decide(
    sim: RunningPeerGroup,
    rig: Rig,
    namespace: str = HOT_NS,
    bundle: BundleRange = FIRST,
    window_end_ms: int = 60_000,
    cluster: str = "east",
) -> SplitDecision:
    """A split decision computed by the real detector, without acting."""
    handler = rig.handler(rig.controller(object(), mode="dry-run"))
    from balancer.core.detect import detect

    result = detect(
        bundles=[load_of(sim, namespace, bundle, window_end_ms, cluster)],
        window_end_ms=window_end_ms,
        now_ms=0,
        thresholds=handler.thresholds,
        settings=handler.detection,
        state=handler.state,
    )
    handler.close()
    (decision,) = result.splits
    return decision


def results(outcomes: Sequence[Outcome]) -> list[ActionResult]:
    return [o.result for o in outcomes]


def test_dry_run_touches_nothing(sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig) -> None:
    handler = rig.handler(rig.controller(client, mode="dry-run"), hit_count=3)
    for i in range(3):
        handler.handle(report(sim, i, 60_000 * (i + 1)))
    assert results(handler.last_outcomes) == [ActionResult.DRY_RUN]
    assert sim.model.splits == [] and sim.model.noop_splits == []
    assert sim.model.requests(route="split") == 0 and sim.model.requests(route="bundles") == 0
    (record,) = rig.audit_records()
    assert record["result"] == "dry_run" and record["decision"]["boundaries"]
    assert handler.controller.journal.entries() == []
    (planned,) = handler.stats.snapshot().planned
    assert planned.target == f"{HOT_NS}/{FIRST}" and planned.detail.startswith("would split at")
    assert handler.stats.snapshot().applied == ()
    handler.close()


def test_apply_splits_at_the_decided_boundaries(
    sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig
) -> None:
    handler = rig.handler(rig.controller(client))
    handler.handle(report(sim, 1, 60_000))
    (outcome,) = handler.last_outcomes
    assert outcome.result is ActionResult.APPLIED, outcome.detail
    (record,) = sim.model.splits
    decision_boundaries = tuple(
        int(b, 16) for b in rig.audit_records()[0]["decision"]["boundaries"]
    )
    assert record.parent == FIRST and record.boundaries == decision_boundaries
    assert record.algorithm == "specified_positions_divide" and record.unloaded
    assert len(record.children) >= 2
    layout = client.get_bundles(HOT_NS)
    assert all(b in layout.boundaries for b in decision_boundaries) and not layout.has(FIRST)
    (entry,) = handler.controller.journal.entries()
    assert entry.result == "applied" and entry.batch_id == "1"
    (applied,) = handler.stats.snapshot().applied
    assert applied.target == f"{HOT_NS}/{FIRST}"
    assert handler.stats.snapshot().counters[("split", "applied", "MsgRate")] == 1
    handler.close()


def test_stale_when_the_bundle_changed_or_is_gone(
    sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig
) -> None:
    decision = decide(sim, rig)
    client.split_bundle(HOT_NS, FIRST, algorithm="range_equally_divide")  # someone else
    controller = rig.controller(client)
    outcome = controller.apply_split(decision)
    assert outcome.result is ActionResult.STALE
    gone = replace(decision, decision_id="split-gone", namespace="shop/nowhere")
    assert controller.apply_split(gone).result is ActionResult.STALE
    assert len(sim.model.splits) == 1  # only the other party's split
    assert controller.stats.snapshot().counters[("split", "stale", "MsgRate")] == 2
    assert controller.journal.entries() == []  # stale before any intent
    controller.close()


def _offload_decision(topic: str, window_end_ms: int = 60_000) -> OffloadDecision:
    return OffloadDecision(
        decision_id=offload_decision_id(cluster="east", topic=topic, window_end_ms=window_end_ms),
        cluster="east",
        namespace=HOT_NS,
        topic=topic,
        storage_size_bytes=10 * LEDGER_BYTES,
        offloaded_size_bytes=0,
        threshold_bytes=2 * LEDGER_BYTES,
        window_end_ms=window_end_ms,
    )


def test_offload_applies_the_size_rule(
    sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig
) -> None:
    topic = f"persistent://{HOT_NS}/o-0"
    sim.clock.advance(3600)
    ledgers = client.internal_stats(topic).ledgers_with_sizes()
    assert len(ledgers) > 4
    controller = rig.controller(client)
    outcome = controller.apply_offload(_offload_decision(topic))
    # 204 = started (PersistentTopic.triggerOffload): no bytes until the status says SUCCESS.
    assert outcome.result is ActionResult.STARTED, outcome.detail
    assert outcome.bytes_offloaded == 0
    assert client.offload_status(topic).state is OffloadState.RUNNING
    # Keep 2 ledgers' worth: the point is the newest closed ledger that must stay.
    assert outcome.pulsar["message_id"]["ledgerId"] == ledgers[-2].ledger_id
    # The next window's decision finds it running and does nothing.
    again = controller.apply_offload(_offload_decision(topic, 120_000))
    assert again.result is ActionResult.ALREADY_RUNNING
    assert sim.model.requests(route="offload") == 1
    assert controller.reconcile() == []  # still RUNNING in the simulator
    sim.clock.advance(sim.model.scenario.broker.offload_duration_s + 1)
    settled: list[Any] = []
    controller.add_listener(settled.append)
    assert controller.reconcile() == [(outcome.decision_id, ActionResult.APPLIED)]
    assert settled[0].bytes_offloaded == outcome.pulsar["bytes_to_offload"] > 0
    controller.close()


class RacingAdmin:
    """Says NOT_RUN while an offload is in fact running: the trigger then meets a 409."""

    def __init__(self, client: PulsarPeerGroup) -> None:
        self.client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def offload_status(self, topic: str) -> OffloadStatus:
        return OffloadStatus(OffloadState.NOT_RUN, "")


def test_offload_409_is_already_running_recorded_not_retried(
    sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig
) -> None:
    topic = f"persistent://{HOT_NS}/o-1"
    sim.clock.advance(3600)
    ledgers = client.internal_stats(topic).ledgers
    from balancer.pulsar import MessageId

    client.trigger_offload(topic, MessageId(ledgers[-1].ledger_id, 0))  # someone else
    controller = rig.controller(RacingAdmin(client))
    decision = _offload_decision(topic)
    outcome = controller.apply_offload(decision)
    assert outcome.result is ActionResult.ALREADY_RUNNING and outcome.pulsar["status"] == 409
    entry = controller.journal.get(decision.decision_id)
    assert entry is not None and entry.result == "already_running"
    assert controller.apply_offload(decision).result is ActionResult.DUPLICATE
    assert sim.model.requests(route="offload") == 2  # ours once, never retried
    assert controller.breaker_states()["east"].state is BreakerState.CLOSED
    controller.close()


def test_replayed_batch_and_restart_apply_nothing_twice(
    sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig
) -> None:
    first = report(sim, 7, 60_000)
    handler = rig.handler(rig.controller(client))
    handler.handle(first)
    handler.handle(first)  # replayed batch
    assert results(handler.last_outcomes) == [ActionResult.APPLIED]
    assert handler.stats.snapshot().batches_replayed == 1
    handler.close()

    restarted = rig.handler(rig.controller(client))  # same journal file
    restarted.handle(first)
    assert restarted.stats.snapshot().batches_replayed == 1
    # The same window under a new batch id: same decision id, recognised.
    renumbered = replace(first, batch_id=8)
    restarted.handle(renumbered)
    assert results(restarted.last_outcomes) == [ActionResult.DUPLICATE]
    assert len(sim.model.splits) == 1
    assert sim.model.requests(route="split") == 1
    restarted.close()


class CrashAfterSplit:
    """The split reaches Pulsar, then the process dies before recording the outcome."""

    def __init__(self, client: PulsarPeerGroup) -> None:
        self.client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def split_bundle(self, *args: Any, **kwargs: Any) -> None:
        self.client.split_bundle(*args, **kwargs)
        raise SystemExit("killed")


def test_crash_between_intent_and_outcome_is_reconciled(
    sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig
) -> None:
    decision = decide(sim, rig)
    crashing = rig.controller(CrashAfterSplit(client))
    with pytest.raises(SystemExit):
        crashing.apply_split(decision)
    (pending,) = crashing.journal.pending()
    assert pending.decision_id == decision.decision_id
    crashing.close()

    # A second intent whose call never left: the crash came right after the journal write.
    other = BundleRange(0x40000000, 0x80000000)
    never_sent = decide(sim, rig, bundle=other)
    journal = Journal(rig.tmp / "journal.sqlite3")
    journal.record_intent(
        decision_id=never_sent.decision_id,
        kind="split",
        cluster="east",
        namespace=HOT_NS,
        target=other.key(HOT_NS),
        action_key="k",
        payload={"call": {"bundle": str(other), "boundaries": list(never_sent.boundaries)}},
        batch_id="9",
        at_ms=1,
    )
    journal.close()

    restarted = rig.controller(client)
    settled = dict(restarted.reconcile())
    assert settled == {
        decision.decision_id: ActionResult.APPLIED,
        never_sent.decision_id: ActionResult.ABANDONED,
    }
    assert restarted.journal.pending() == []
    assert restarted.apply_split(decision).result is ActionResult.DUPLICATE
    assert len(sim.model.splits) == 1  # nothing re-applied
    assert client.get_bundles(HOT_NS).has(other)
    restarted.close()


def test_circuit_breaker_opens_under_503_and_recovers(
    sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig
) -> None:
    controller = rig.controller(client, failure_threshold=3)
    layout = NamespaceBundles.initial(HOT_NS, 4)
    decisions = [decide(sim, rig, bundle=b) for b in layout.bundles]
    sim.faults.configure(error_rate_503=1.0)
    failed = [controller.apply_split(d) for d in decisions[:3]]
    assert results(failed) == [ActionResult.FAILED] * 3
    assert failed[0].pulsar["status"] == 503
    status = controller.breaker_states()["east"]
    assert status.state is BreakerState.OPEN and status.times_opened == 1
    before = sim.model.requests()
    paused = controller.apply_split(decisions[3])
    assert paused.result is ActionResult.BREAKER_OPEN
    assert sim.model.requests() == before  # nothing sent while open
    sim.faults.clear()
    rig.clock.advance(61)
    assert controller.apply_split(decisions[3]).result is ActionResult.APPLIED
    assert controller.breaker_states()["east"].state is BreakerState.CLOSED
    assert len(sim.model.splits) == 1
    controller.close()


def test_deny_listed_namespace_is_untouched(
    sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig
) -> None:
    handler = rig.handler(rig.controller(client, deny=("shop/leg*",), allow=("shop/*",)))
    handler.handle(report(sim, 1, 60_000, [("shop/legacy", FIRST, "east")]))
    assert results(handler.last_outcomes) == [ActionResult.DENIED]
    assert sim.model.requests() == 0 and sim.model.splits == []
    handler.close()


def test_rate_limit_per_namespace(sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig) -> None:
    controller = rig.controller(client, per_namespace=1)
    a = decide(sim, rig, bundle=FIRST)
    b = decide(sim, rig, bundle=BundleRange(0x40000000, 0x80000000))
    assert controller.apply_split(a).result is ActionResult.APPLIED
    assert controller.apply_split(b).result is ActionResult.RATE_LIMITED
    rig.clock.advance(60)
    b2 = replace(b, decision_id="split-later")
    assert controller.apply_split(b2).result is ActionResult.APPLIED
    assert len(sim.model.splits) == 2
    controller.close()


def test_routes_to_the_cluster_that_owns_the_namespace(
    sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig
) -> None:
    handler = rig.handler(rig.controller(client))  # the client enters through east
    handler.handle(report(sim, 1, 60_000, [("shop/west", FIRST, "west")]))
    assert results(handler.last_outcomes) == [ActionResult.APPLIED]
    (record,) = sim.model.splits
    assert record.cluster == "west" and record.namespace == "shop/west"
    handler.close()


TOKEN = "eyJhbGciOiJIUzI1NiJ9.c3VwZXItc2VjcmV0.c2lnbmF0dXJl"


@pytest.fixture
def secured_sim() -> Iterator[RunningPeerGroup]:
    with start_peer_group(parse_scenario(SCENARIO), required_token=TOKEN) as running:
        yield running


def test_audit_log_and_journal_hold_no_token(
    secured_sim: RunningPeerGroup, rig: Rig, tmp_path: Path
) -> None:
    sim, token = secured_sim, TOKEN
    token_file = tmp_path / "token"
    token_file.write_text(token)
    endpoints = [
        ClusterEndpoint(name, url, token=TokenSource(file=token_file))
        for name, url in sim.admin_urls.items()
    ]
    retry = RetryPolicy(max_attempts=1)
    with PulsarPeerGroup(endpoints, ClientSettings(retry=retry, sleep=lambda _s: None)) as client:
        handler = rig.handler(rig.controller(client))
        handler.handle(report(sim, 1, 60_000))
        sim.faults.configure(error_rate_503=1.0)
        gone = decide(sim, rig, bundle=BundleRange(0x40000000, 0x80000000))
        assert handler.controller.apply_split(gone).result is ActionResult.FAILED
        handler.close()
    audit = (rig.tmp / "audit.jsonl").read_text()
    assert len(audit.splitlines()) == 2 and '"result": "failed"' in audit
    assert '"result": "applied"' in audit  # the token was sent: the secured sim accepted it
    assert token not in audit and "c3VwZXItc2VjcmV0" not in audit
    assert token.encode() not in (rig.tmp / "journal.sqlite3").read_bytes()
