"""Unknown outcomes against the simulator, over real HTTP: a split or offload that Pulsar got
but did not answer in time (the FaultInjector's latency past the client's read timeout) or
whose connection dropped. The controller reads Pulsar's state back, never records `failed`
for what Pulsar applied, and never sends the action twice.

Scaffolding (scenario, rig, reports) is shared with test_controller.py.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from balancer.app.summary import actions_of
from balancer.controller.clock import FakeClock
from balancer.controller.metrics_bridge import attach_metrics
from balancer.controller.outcome import Outcome
from balancer.core.results import ActionResult
from balancer.core.split import SplitAlgorithm
from balancer.ops.exporter import BalancerMetrics
from balancer.pulsar import OffloadState, PulsarPeerGroup, Timeouts
from balancer.sim import RunningPeerGroup, parse_scenario, start_peer_group
from tests.controller.test_controller import (
    FIRST,
    HOT_NS,
    SCENARIO,
    Rig,
    _offload_decision,
    decide,
    make_client,
    report,
)

READ_TIMEOUT_S = 0.3
SLOW_S = 2.0  # the split endpoint answers this late: far past the read timeout


@pytest.fixture
def sim() -> Iterator[RunningPeerGroup]:
    with start_peer_group(parse_scenario(SCENARIO)) as running:
        yield running


@pytest.fixture
def client(sim: RunningPeerGroup) -> Iterator[PulsarPeerGroup]:
    timeouts = Timeouts(connect_s=2.0, read_s=READ_TIMEOUT_S, write_s=2.0, pool_s=2.0)
    with make_client(sim, timeouts=timeouts) as group:
        yield group


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path, FakeClock())


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    """Bounded wait for something the simulator does on its own time (its injected delay)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def metric(registry: CollectorRegistry, result: str, name: str = "splits") -> float:
    labels = {"cluster": "east", "result": result}
    if name == "splits":
        labels["reason"] = "MsgRate"
    value = registry.get_sample_value(f"pulsar_balancer_{name}_total", labels)
    return value or 0.0


def test_split_that_times_out_is_unknown_then_applied_and_never_sent_again(
    sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig
) -> None:
    registry = CollectorRegistry()
    controller = rig.controller(client)
    attach_metrics(
        controller, BalancerMetrics(registry, limits=lambda _c, _n: None, process_metrics=False)
    )
    seen: list[Outcome] = []
    controller.add_listener(seen.append)
    handler = rig.handler(controller)
    sim.faults.configure(latency_s=SLOW_S, only_paths=("/split",))

    handler.handle(report(sim, 1, 60_000))
    (first,) = handler.last_outcomes
    assert first.result is ActionResult.UNKNOWN, first.detail
    assert first.pulsar["error"] == "OutcomeUnknownError"
    assert first.read_back is ActionResult.UNKNOWN and "read_back" not in first.pulsar
    (entry,) = controller.journal.entries()
    assert entry.result == "unknown"
    assert metric(registry, "unknown") == 1 and metric(registry, "failed") == 0
    splits, _, unknown = actions_of(seen)  # what the run summary would list now
    assert splits == [] and [u["decision_id"] for u in unknown] == [first.decision_id]

    # Pulsar applies it once its delay is over; the client did not send it a second time.
    wait_for(lambda: len(sim.model.splits) == 1, "the slow split to land")
    assert sim.model.requests(route="split") == 1
    sim.faults.clear()

    # The next batch rechecks first: applied. Its own decision on the parent is stale.
    rig.clock.advance(10)
    handler.handle(report(sim, 2, 120_000))
    assert [o.result for o in handler.last_outcomes] == [ActionResult.STALE]
    settled_entry = controller.journal.get(first.decision_id)
    assert settled_entry is not None and settled_entry.result == "applied", settled_entry
    settled = [o for o in seen if o.rechecked]
    assert [o.result for o in settled] == [ActionResult.APPLIED]
    assert settled[0].decision is first.decision and settled[0].children >= 2  # for the summary
    assert metric(registry, "applied") == 1 and metric(registry, "failed") == 0
    splits, _, unknown = actions_of(seen)
    assert [s["bundle"] for s in splits] == [str(FIRST)] and unknown == []
    assert metric(registry, "decided") == 2  # the recheck is not a new decision
    assert [a.decision_id for a in controller.stats.snapshot().applied] == [first.decision_id]
    audit = rig.audit_records()
    assert [r["result"] for r in audit if r.get("rechecked")] == ["applied"]
    handler.close()

    # A restart on the same journal: nothing left to check, nothing split again.
    restarted = rig.handler(rig.controller(client))
    restarted.handle(report(sim, 3, 180_000))
    assert [o.result for o in restarted.last_outcomes] == [ActionResult.STALE]
    assert restarted.controller.journal.unknown() == []
    assert len(sim.model.splits) == 1 and sim.model.requests(route="split") == 1
    restarted.close()


class ReadsAfterPulsarApplied:
    """Reads the layout back only once the slow split has landed in the simulator."""

    def __init__(self, client: PulsarPeerGroup, sim: RunningPeerGroup) -> None:
        self.client, self.sim, self.split_sent = client, sim, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def split_bundle(self, *args: Any, **kwargs: Any) -> None:
        self.split_sent = True
        self.client.split_bundle(*args, **kwargs)

    def get_bundles(self, namespace: str) -> Any:
        if self.split_sent:
            wait_for(lambda: len(self.sim.model.splits) == 1, "the slow split to land")
        return self.client.get_bundles(namespace)


def test_split_that_times_out_but_shows_in_the_layout_is_applied_at_once(
    sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig
) -> None:
    handler = rig.handler(rig.controller(ReadsAfterPulsarApplied(client, sim)))
    sim.faults.configure(latency_s=SLOW_S, only_paths=("/split",))
    handler.handle(report(sim, 1, 60_000))
    (outcome,) = handler.last_outcomes
    assert outcome.result is ActionResult.APPLIED, outcome.detail
    assert "read back" in outcome.detail and outcome.children >= 2
    (entry,) = handler.controller.journal.entries()
    assert entry.result == "applied"
    assert handler.stats.snapshot().counters.get(("split", "failed", "MsgRate")) is None
    assert sim.model.requests(route="split") == 1 and len(sim.model.splits) == 1
    handler.close()


def test_dropped_split_is_rechecked_then_failed_and_split_once_later(
    sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig
) -> None:
    handler = rig.handler(rig.controller(client))
    # The simulator drops the connection before applying: Pulsar never split.
    sim.faults.configure(drop_connection_rate=1.0, only_paths=("/split",))
    handler.handle(report(sim, 1, 60_000))
    (first,) = handler.last_outcomes
    assert first.result is ActionResult.UNKNOWN, first.detail
    assert sim.model.requests(route="split") == 1  # a reset after sending: not re-sent
    assert sim.model.splits == []
    sim.faults.clear()

    # Within the settle time the bundle is left alone: no second split on top of one in flight.
    rig.clock.advance(30)
    handler.handle(report(sim, 2, 120_000))
    (blocked,) = handler.last_outcomes
    assert blocked.result is ActionResult.DUPLICATE and "not known yet" in blocked.detail
    assert sim.model.requests(route="split") == 1

    # Past it, the unchanged bundle means "never applied": failed, and a new decision splits.
    rig.clock.advance(31)
    handler.handle(report(sim, 3, 180_000))
    entry = handler.controller.journal.get(first.decision_id)
    assert entry is not None and entry.result == "failed" and "not applied" in (entry.detail or "")
    assert [o.result for o in handler.last_outcomes] == [ActionResult.APPLIED]
    assert len(sim.model.splits) == 1 and sim.model.requests(route="split") == 2
    handler.close()


def test_offload_trigger_that_times_out_is_read_back_from_the_status(
    sim: RunningPeerGroup, client: PulsarPeerGroup, rig: Rig
) -> None:
    topic = f"persistent://{HOT_NS}/o-0"
    sim.clock.advance(3600)
    controller = rig.controller(client)
    # Only the PUT trigger is slow: the status GET on the same path answers at once.
    sim.faults.configure(latency_s=SLOW_S, only_paths=("/offload",), only_methods=("PUT",))
    decision = _offload_decision(topic)
    outcome = controller.apply_offload(decision)
    assert outcome.result is ActionResult.UNKNOWN, outcome.detail
    assert "offload status NOT_RUN" in outcome.detail

    wait_for(
        lambda: client.offload_status(topic).state is OffloadState.RUNNING,
        "the slow trigger to land",
    )
    sim.faults.clear()
    rig.clock.advance(5)
    assert controller.reconcile() == []  # read back RUNNING: started, followed on
    entry = controller.journal.get(decision.decision_id)
    assert entry is not None and entry.result == "started"
    assert sim.model.requests(route="offload") == 1  # the trigger went out once
    # The next window's decision finds it running.
    again = controller.apply_offload(_offload_decision(topic, 120_000))
    assert again.result is ActionResult.ALREADY_RUNNING
    sim.clock.advance(sim.model.scenario.broker.offload_duration_s + 1)
    assert dict(controller.reconcile()) == {decision.decision_id: ActionResult.APPLIED}
    entry = controller.journal.get(decision.decision_id)
    assert entry is not None and entry.result == "applied"
    controller.close()


def _sim_with_split_algorithms(algorithms: list[str]) -> Any:
    doc = copy.deepcopy(SCENARIO)
    doc["broker"]["supported_split_algorithms"] = algorithms
    return start_peer_group(parse_scenario(doc))


def test_a_broker_refusing_specified_positions_is_failed_named_and_metered(rig: Rig) -> None:
    pulsar_2_10 = ["range_equally_divide", "topic_count_equally_divide"]
    with _sim_with_split_algorithms(pulsar_2_10) as sim, make_client(sim) as client:
        registry = CollectorRegistry()
        controller = rig.controller(client)
        attach_metrics(
            controller, BalancerMetrics(registry, limits=lambda _c, _n: None, process_metrics=False)
        )
        handler = rig.handler(controller)
        handler.handle(report(sim, 1, 60_000))
        (outcome,) = handler.last_outcomes
        assert outcome.result is ActionResult.FAILED
        assert "supportedNamespaceBundleSplitAlgorithms" in outcome.detail
        assert outcome.pulsar["status"] == 412
        assert outcome.algorithm_refused is SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE
        assert "algorithm_refused" not in outcome.pulsar
        (audited,) = [r for r in rig.audit_records() if r.get("result") == "failed"]
        assert audited["algorithm_refused"] == "specified_positions_divide"
        refused = registry.get_sample_value(
            "pulsar_balancer_split_algorithm_refused_total",
            {"cluster": "east", "algorithm": "specified_positions_divide"},
        )
        assert refused == 1
        assert sim.model.splits == [] and sim.model.requests(route="split") == 1
        handler.close()


def test_a_flow_or_qps_decision_applies_on_a_broker_without_flow_or_qps(rig: Rig) -> None:
    """Pulsar 2.10 lacks flow_or_qps_equally_divide: the boundaries go as positions."""
    supported = ["range_equally_divide", "topic_count_equally_divide", "specified_positions_divide"]
    with _sim_with_split_algorithms(supported) as sim, make_client(sim) as client:
        decision = replace(decide(sim, rig), algorithm=SplitAlgorithm.FLOW_OR_QPS_EQUALLY_DIVIDE)
        controller = rig.controller(client)
        assert controller.apply_split(decision).result is ActionResult.APPLIED
        (record,) = sim.model.splits
        assert record.algorithm == "specified_positions_divide"
        assert record.boundaries == decision.boundaries
        controller.close()
