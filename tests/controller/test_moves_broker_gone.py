"""Against the simulator over HTTP: a broker that leaves the cluster while a move is unsettled
(issue 41, point 12). The simulator answers as Pulsar does (`balancer.sim.broker_stops`):
the broker is no longer listed, its port refuses connections, its bundles are owned by
nobody until a lookup places them on an active broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from balancer.controller.apply import Controller
from balancer.controller.audit import AuditLog
from balancer.controller.breaker import Breakers
from balancer.controller.clock import FakeClock
from balancer.controller.journal import Journal
from balancer.controller.rate_limits import ActionLimits
from balancer.controller.settings import ControllerSettings
from balancer.core.moves.model import MoveDecision, MoveReason, move_decision_id
from balancer.core.results import ActionResult
from balancer.pulsar import PulsarPeerGroup
from balancer.sim import RunningPeerGroup
from tests.controller.test_controller import make_client
from tests.controller.test_moves_integration import CLUSTER, RESTART, broker_id, owners, start

# Simulated seconds from an unload to the clients' lookup: long enough that the move is
# `unknown` (nobody owns the bundle) when the broker leaves.
LOOKUP_DELAY_S = 600.0


@pytest.fixture
def sim() -> Iterator[RunningPeerGroup]:
    yield from start(RESTART, reconnect_delay_s=LOOKUP_DELAY_S)


@pytest.fixture
def client(sim: RunningPeerGroup) -> Iterator[PulsarPeerGroup]:
    with make_client(sim) as group:
        yield group


def controller(tmp_path: Path, client: PulsarPeerGroup, clock: FakeClock) -> Controller:
    return Controller(
        client,
        settings=ControllerSettings(mode="apply", move_settle_s=300.0),
        journal=Journal(tmp_path / "journal.sqlite3"),
        audit=AuditLog(tmp_path / "audit.jsonl"),
        limits=ActionLimits(
            splits_per_minute=10,
            splits_per_minute_per_namespace=10,
            offloads_per_minute=10,
            offloads_per_minute_per_namespace=10,
            moves_per_minute=10,
            moves_per_minute_per_namespace=10,
            clock=clock,
        ),
        breakers=Breakers(failure_threshold=100, cooloff_s=60, clock=clock),
        clock=clock,
        mover=client,
    )


def a_move(sim: RunningPeerGroup, destination: int) -> MoveDecision:
    """A bundle of broker 1 (not the leader) to `destination`."""
    name = next(n for n, b in sorted(owners(sim).items()) if b == broker_id(sim, 1))
    namespace, bundle = name.rsplit("/", 1)
    ns = sim.model.namespaces[namespace]
    rng = next(b for b in ns.layout.bundles if str(b) == bundle)
    return MoveDecision(
        decision_id=move_decision_id(
            cluster=CLUSTER, namespace=namespace, bundle=rng, window_end_ms=60_000
        ),
        cluster=CLUSTER, namespace=namespace, bundle=rng, source=broker_id(sim, 1),
        destination=broker_id(sim, destination), reason=MoveReason.OVERLOADED,
        bundle_load_ratio=0.1, msg_rate=100.0, throughput_bytes=1e5, sessions=3,
        source_load_before=0.9, source_load_after=0.8, destination_load_before=0.1,
        destination_load_after=0.2, window_end_ms=60_000,
    )  # fmt: skip


def test_the_simulator_shows_a_broker_that_left(sim: RunningPeerGroup) -> None:
    gone = broker_id(sim, 2)
    url = sim.broker_urls[CLUSTER][2]
    sim.stop_broker(CLUSTER, 2)
    listed = httpx.get(f"{sim.admin_urls[CLUSTER]}/admin/v2/brokers/{CLUSTER}").json()
    assert gone not in listed and len(listed) == 2
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/admin/v2/brokers/{CLUSTER}/{gone}/ownedNamespaces")
    with pytest.raises(ValueError, match="already stopped"):
        sim.stop_broker(CLUSTER, 2)


def test_a_move_whose_destination_left_settles_failed(
    sim: RunningPeerGroup, client: PulsarPeerGroup, tmp_path: Path
) -> None:
    clock = FakeClock(sim.model.now_ms())
    ctl = controller(tmp_path, client, clock)
    decision = a_move(sim, destination=2)
    outcome = ctl.handle(decision)
    assert outcome.result is ActionResult.UNKNOWN, outcome.detail  # 204, owned by nobody
    sim.stop_broker(CLUSTER, 2)  # scaled down before the clients looked the bundle up
    clock.advance(30)
    sim.model.clock.advance(30)
    assert ctl.reconcile() == [(decision.decision_id, ActionResult.FAILED)]
    entry = ctl.journal.get(decision.decision_id)
    assert entry is not None and "left the cluster" in (entry.detail or "")
    assert len(sim.model.brokers.moves) == 1  # never re-sent
    # The clients' lookup, when it comes, places the bundle on an active broker.
    sim.model.clock.advance(LOOKUP_DELAY_S)
    sim.model.brokers.settle()
    name = decision.bundle.key(decision.namespace)
    assert owners(sim)[name] in (broker_id(sim, 0), broker_id(sim, 1))


def test_a_move_whose_source_left_settles_from_the_brokers_there(
    sim: RunningPeerGroup, client: PulsarPeerGroup, tmp_path: Path
) -> None:
    clock = FakeClock(sim.model.now_ms())
    ctl = controller(tmp_path, client, clock)
    decision = a_move(sim, destination=2)
    assert ctl.handle(decision).result is ActionResult.UNKNOWN
    sim.stop_broker(CLUSTER, 1)  # the source restarts under a new address
    clock.advance(30)
    sim.model.clock.advance(30)
    assert ctl.reconcile() == []  # nobody owns it yet: the lookup is still to come
    sim.model.clock.advance(LOOKUP_DELAY_S)
    sim.model.brokers.settle()  # the lookup takes the kept destination
    assert ctl.reconcile() == [(decision.decision_id, ActionResult.APPLIED)]
