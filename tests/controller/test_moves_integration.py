"""Moving bundles, end to end in one process: the simulator over real HTTP, the collector
reading every broker's load report into the `BrokerLoadBoard`, the handler as `run` wires it
(`build_handler`), fed the windows' bundle loads as the stream would.

The simulator records every unload with a destination (`model.brokers.moves`) and who owns
each bundle, so "moved once, to the broker that had room" is checked on Pulsar's side.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from balancer.app.config import BalancerConfig
from balancer.app.controller_wiring import build_handler
from balancer.collector.admin import admin_fetch, polling_plan
from balancer.collector.service import Collector
from balancer.controller.broker_board import BrokerLoadBoard
from balancer.controller.clock import FakeClock
from balancer.controller.handler import ControllerHandler
from balancer.core.broker_load import USAGE_INTERVAL_MS, LoadSource
from balancer.core.decisions import DecisionKind
from balancer.core.load import BundleLoad, roll_up
from balancer.core.moves.decide import is_balanced
from balancer.core.results import ActionResult
from balancer.pulsar import PulsarPeerGroup
from balancer.pulsar.auth import TlsSettings
from balancer.pulsar.retry import RetryPolicy
from balancer.pulsar.routing import ClusterEndpoint
from balancer.pulsar.settings import ClientSettings
from balancer.sim import RunningPeerGroup, load_scenario, parse_scenario, start_peer_group
from tests.controller.test_controller import make_client
from tests.reports import batch_report

RESTART = Path("conf/scenarios/broker-restart.yaml")
CLUSTER = "standalone"
WINDOW_S = 60
IDLE = 2  # the restarted broker's index in broker-restart.yaml


class NullSink:
    """The collector's Kafka producer: the stats events are not needed here."""

    def send(self, *, key: bytes, value: bytes, events: int = 1) -> None: ...

    def flush(self) -> None: ...


@dataclass
class MoveRig:
    """The pieces `run` wires, on manual clocks: the controller's and the simulator's move
    together, one window at a time."""

    sim: RunningPeerGroup
    client: PulsarPeerGroup
    tmp: Path
    mode: str = "apply"
    moves: dict[str, Any] = field(default_factory=dict)
    controller: dict[str, Any] = field(default_factory=dict)  # more `controller:` keys
    admin_urls: dict[str, str] | None = None  # default: the simulator's (http) admin URLs
    clock: FakeClock = field(init=False)
    config: BalancerConfig = field(init=False)
    board: BrokerLoadBoard = field(init=False)
    collector: Collector = field(init=False)
    handler: ControllerHandler = field(init=False)
    batches: int = 0

    def __post_init__(self) -> None:
        self.clock = FakeClock(self.sim.model.now_ms())
        self.config = BalancerConfig.from_mapping(
            {
                "clusters": [
                    {"name": n, "admin_url": u}
                    for n, u in (self.admin_urls or self.sim.admin_urls).items()
                ],
                "spark": {"window_s": WINDOW_S, "slide_s": WINDOW_S},
                "collector": {"interval_s": WINDOW_S},
                "detection": {"hit_count_threshold": 2, "cooldown_s": 0},
                "controller": {
                    "mode": self.mode,
                    "journal_path": str(self.tmp / "journal.sqlite3"),
                    "audit_log_path": str(self.tmp / "audit.jsonl"),
                    "writer_lease": {"enabled": False},
                    **self.controller,
                },
                "moves": self.moves,
            }
        )
        self.board = BrokerLoadBoard(retain_ms=3 * WINDOW_S * 1000)
        targets, listers = polling_plan(self.config.clusters, self.client)
        self.collector = Collector(
            targets=targets,
            fetch=admin_fetch(self.client, load_reports=self.config.moves.read_load_reports),
            sink=NullSink(),
            clock_ms=self.clock.now_ms,
            broker_listers=listers,
            broker_loads=self.board,
        )
        self.handler = build_handler(self.config, self.client, clock=self.clock, board=self.board)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.sim.model.clock.advance(seconds)

    def window(self, bundles: tuple[BundleLoad, ...] | None = None) -> None:
        """One window: time passes, the collector polls every broker, the window closes."""
        self.advance(WINDOW_S)
        assert self.collector.poll_once() == []
        end_ms = self.clock.now_ms()
        self.batches += 1
        loads = bundles if bundles is not None else bundle_loads(self.sim, end_ms)
        self.handler.handle(batch_report(self.batches, end_ms, loads))

    def broker_loads(self) -> dict[str, float]:
        """Each broker's load now, from the collector's newest poll (as the planner sees it):
        two usage samples after the last unloads (a broker samples cpu and bandwidth once a
        minute, each sample the minute before it: `balancer.sim.broker_loads`)."""
        self.advance(1)  # the clients' lookups after the last unloads
        self.collector.poll_once()
        for _ in range(2):
            self.advance(USAGE_INTERVAL_MS / 1000)
            self.collector.poll_once()
        now_ms = self.clock.now_ms()
        mover = self.handler.mover
        assert mover is not None
        mover._moved.clear()  # the board's fresh reports, not the projection of a plan
        plan = mover.plan(
            CLUSTER, bundle_loads(self.sim, now_ms), window_end_ms=now_ms, now_ms=now_ms
        )
        assert plan is not None
        return dict(plan.loads_before)

    def outcomes(self, kind: DecisionKind = DecisionKind.MOVE) -> list[Any]:
        return [o for o in self.handler.last_outcomes if o.kind is kind]


def bundle_loads(sim: RunningPeerGroup, window_end_ms: int) -> tuple[BundleLoad, ...]:
    """Every bundle's load now, as the stream's window would give it."""
    out = []
    for ns in sim.model.namespaces.values():
        for bundle in ns.layout.bundles:
            out.append(
                roll_up(
                    cluster=ns.cluster,
                    namespace=ns.name,
                    bundle=bundle,
                    window_end_ms=window_end_ms,
                    topics=tuple(sim.model.topic_loads(ns, bundle)),
                )
            )
    return tuple(out)


def owners(sim: RunningPeerGroup) -> dict[str, str]:
    """Bundle `tenant/ns/range` -> the broker id that owns it in the simulator."""
    cluster = sim.model.cluster(CLUSTER)
    return {
        f"{ns.name}/{b}": cluster.broker_address(ns.owners[b])
        for ns in sim.model.namespaces.values()
        for b in ns.layout.bundles
        if b not in ns.unowned
    }


def broker_id(sim: RunningPeerGroup, index: int) -> str:
    return str(sim.model.cluster(CLUSTER).broker_address(index))


def start(scenario: Path | Any, **cluster: Any) -> Iterator[RunningPeerGroup]:
    loaded = load_scenario(scenario) if isinstance(scenario, Path) else scenario
    if cluster:
        (spec,) = loaded.clusters
        loaded = loaded.model_copy(update={"clusters": [spec.model_copy(update=cluster)]})
    with start_peer_group(loaded) as running:
        yield running


@pytest.fixture
def sim() -> Iterator[RunningPeerGroup]:
    yield from start(RESTART)


@pytest.fixture
def client(sim: RunningPeerGroup) -> Iterator[PulsarPeerGroup]:
    with make_client(sim) as group:
        yield group


def journal_moves(rig: MoveRig) -> list[Any]:
    return [e for e in rig.handler.controller.journal.entries() if e.kind == "move"]


def run_windows(rig: MoveRig, windows: int) -> None:
    for _ in range(windows):
        rig.window()


def test_apply_balances_the_restarted_broker(
    sim: RunningPeerGroup, client: PulsarPeerGroup, tmp_path: Path
) -> None:
    rig = MoveRig(sim, client, tmp_path)
    idle = broker_id(sim, IDLE)
    assert idle not in owners(sim).values()
    before = rig.broker_loads()
    assert not is_balanced(before, rig.config.moves.settings()), before

    run_windows(rig, 4)
    rig.advance(1)
    rig.handler.controller.reconcile()

    moved = sim.model.brokers.moves
    assert moved, "no unload with a destination reached the simulator"
    assert {m.destination for m in moved} == {IDLE}
    assert all(m.outcome == "landed" and m.landed == IDLE for m in moved)
    assert idle in owners(sim).values()
    # Each decision sent once; every move journaled applied (no unknown left).
    entries = journal_moves(rig)
    assert len(entries) == len(moved)
    assert {e.result for e in entries} == {"applied"}, [(e.result, e.detail) for e in entries]
    # No bundle moved twice within the grace period (1800 s > the 4 windows).
    names = [f"{m.namespace}/{m.bundle}" for m in moved]
    assert len(names) == len(set(names)), names
    after = rig.broker_loads()
    assert is_balanced(after, rig.config.moves.settings()), after
    assert max(after.values()) < max(before.values())
    rig.handler.close()


def test_apply_balances_behind_an_https_admin_url_with_plain_ports_open(tmp_path: Path) -> None:
    """Issue 41, point 2: each broker keeps its plain web port (its id) beside a TLS one, and
    the admin URL is https. Every broker's load report is read, and each move's ownership
    checks reach the broker at its webServiceUrlTls: the moves land and are journaled
    applied (at `https://<id>` every report fell back and every move ended failed)."""
    for sim in start(RESTART, tls_web_port=True):
        assert sim.tls_ca_file is not None
        endpoint = ClusterEndpoint(
            CLUSTER, sim.tls_admin_urls[CLUSTER], tls=TlsSettings(ca_bundle=sim.tls_ca_file)
        )
        settings = ClientSettings(
            retry=RetryPolicy(max_attempts=2, base_delay_s=0.0, max_delay_s=0.0),
            sleep=lambda _s: None,
        )
        with PulsarPeerGroup([endpoint], settings) as client:
            rig = MoveRig(sim, client, tmp_path, admin_urls=sim.tls_admin_urls)
            run_windows(rig, 4)
            rig.advance(1)
            rig.handler.controller.reconcile()
            now_ms = rig.clock.now_ms()
            windows = rig.board.window(
                CLUSTER, start_ms=now_ms - 2 * WINDOW_S * 1000, end_ms=now_ms
            )
            assert sorted(w.broker for w in windows if w.reports) == sorted(
                broker_id(sim, i) for i in range(3)
            )
            moved = sim.model.brokers.moves
            assert moved and all(m.outcome == "landed" and m.landed == IDLE for m in moved)
            entries = journal_moves(rig)
            assert len(entries) == len(moved)
            assert {e.result for e in entries} == {"applied"}, [
                (e.result, e.detail) for e in entries
            ]
            rig.handler.close()


def test_dry_run_sends_no_unload(
    sim: RunningPeerGroup, client: PulsarPeerGroup, tmp_path: Path
) -> None:
    rig = MoveRig(sim, client, tmp_path, mode="dry-run")
    start_owners = owners(sim)
    run_windows(rig, 1)
    planned = rig.outcomes()
    assert planned and {o.result for o in planned} == {ActionResult.DRY_RUN}
    run_windows(rig, 1)
    assert sim.model.brokers.moves == []
    assert sim.model.requests(route="unload") == 0
    assert owners(sim) == start_owners
    rig.handler.close()


@pytest.mark.parametrize("probability", [1.0])
def test_a_move_placed_elsewhere_is_landed_elsewhere_and_not_resent(
    tmp_path: Path, probability: float
) -> None:
    """The modular load manager may lose the destination (apache/pulsar#24884): the move is
    `landed_elsewhere`, never sent again, and the bundle is not moved again in its grace."""
    for sim in start(RESTART, move_elsewhere_probability=probability):
        with make_client(sim) as client:
            rig = MoveRig(sim, client, tmp_path)
            run_windows(rig, 3)
            rig.advance(1)
            rig.handler.controller.reconcile()
            moved = sim.model.brokers.moves
            assert moved and all(m.outcome == "landed_elsewhere" for m in moved)
            entries = journal_moves(rig)
            assert len(entries) == len(moved)
            assert {e.result for e in entries} == {"landed_elsewhere"}
            names = [f"{m.namespace}/{m.bundle}" for m in moved]
            assert len(names) == len(set(names)), names
            rig.handler.close()


def test_the_extensible_load_manager_transfers_on_the_load_it_publishes(tmp_path: Path) -> None:
    """No load report (the route answers 500): each broker's load is what its load manager
    publishes in broker-stats/metrics (BrokerLoadData.toMetrics), never the configured
    guess; the unload is a transfer, owned by the destination on return."""
    for sim in start(RESTART, load_manager="extensible"):
        with make_client(sim) as client:
            # The scenario's ~55k msg/s in (+ out) on two brokers: well over 40% of this.
            rig = MoveRig(
                sim,
                client,
                tmp_path,
                moves={"broker_capacity": {"max_msg_rate": 150_000, "max_throughput_mbytes": 200}},
            )
            run_windows(rig, 3)
            assert rig.handler.mover is not None
            loads = rig.handler.mover.last_loads[CLUSTER].brokers
            assert {b.source for b in loads} == {LoadSource.METRICS}
            moved = sim.model.brokers.moves
            assert moved and {m.destination for m in moved} == {IDLE}
            assert all(m.load_manager == "extensible" and m.outcome == "landed" for m in moved)
            # A transfer answers once the destination owns it: applied at once, no unknown.
            entries = journal_moves(rig)
            assert len(entries) == len(moved)
            assert {e.result for e in entries} == {"applied"}
            names = [f"{m.namespace}/{m.bundle}" for m in moved]
            assert len(names) == len(set(names))
            after = rig.broker_loads()
            assert is_balanced(after, rig.config.moves.settings()), after
            rig.handler.close()


# One hot bundle on one of two brokers: only its children can be moved (a lone bundle
# carrying the load is a split, not a move).
ONE_HOT_BUNDLE: dict[str, Any] = {
    "name": "split-and-move",
    "seed": 35,
    "clusters": [
        {
            "name": CLUSTER,
            "brokers": 2,
            "idle_brokers": [1],
            "broker_capacity": {"nic_limit_mbit": 1000, "cpu_cores": 4},
        }
    ],
    "namespaces": [
        {
            "name": "public/hot",
            "cluster": CLUSTER,
            "bundles": 1,
            "topic_groups": [
                {"name": "t", "count": 100, "total_msg_rate_in": 30_000, "avg_msg_size_bytes": 1024}
            ],
        }
    ],
}


@pytest.fixture
def hot_sim() -> Iterator[RunningPeerGroup]:
    yield from start(parse_scenario(ONE_HOT_BUNDLE))


def hot_split_config(rig: MoveRig, *, unload_after_split: bool = False) -> None:
    """The hot bundle over the split limit. Without `unload_after_split` the children stay on
    the parent's broker (the hot one) until moved; with it, Pulsar places them itself."""
    data = rig.config.model_dump(mode="json")
    data["thresholds"] = {"defaults": {"max_msg_rate": 12_000}}
    data["controller"]["unload_after_split"] = unload_after_split
    rig.config = BalancerConfig.from_mapping(data)
    rig.handler = build_handler(rig.config, rig.client, clock=rig.clock, board=rig.board)


def first_window_without_moves(rig: MoveRig) -> None:
    """The detector's first hit (a split needs two windows): no move planned yet, so the
    second window decides the split and the moves together."""
    mover, rig.handler.mover = rig.handler.mover, None
    rig.window()
    rig.handler.mover = mover
    assert sim_moves(rig) == [] and rig.outcomes(DecisionKind.SPLIT) == []


def sim_moves(rig: MoveRig) -> list[Any]:
    return list(rig.sim.model.brokers.moves)


@pytest.mark.parametrize("unload_after_split", [False, True])
def test_a_split_and_a_move_of_its_child_in_one_window(
    hot_sim: RunningPeerGroup, tmp_path: Path, unload_after_split: bool
) -> None:
    """The split is applied first, then its children's moves follow in the same window.
    Whatever `unload_after_split` says, a split whose window has a move plan keeps its
    children on the parent's broker (the plan counted them there): no child move is stale."""
    sim = hot_sim
    with make_client(sim) as client:
        rig = MoveRig(sim, client, tmp_path)
        hot_split_config(rig, unload_after_split=unload_after_split)
        first_window_without_moves(rig)
        rig.window()
        (split,) = rig.outcomes(DecisionKind.SPLIT)
        assert split.result is ActionResult.APPLIED, split.detail
        (record,) = sim.splits("public/hot")
        children = [o for o in rig.outcomes() if o.decision.after_split == split.decision_id]
        assert children, "no child of the split was moved in the split's window"
        assert {o.decision.bundle for o in children} <= set(record.children)
        rig.advance(1)
        rig.handler.controller.reconcile()
        sent = {(m.namespace, m.bundle): m for m in sim.model.brokers.moves}
        journal = {e.decision_id: e for e in journal_moves(rig)}
        (unloads,) = [s.unloaded for s in sim.model.splits]
        assert not unloads, "the split unloaded the children the plan places"
        for child in children:
            d = child.decision
            assert child.result in (ActionResult.APPLIED, ActionResult.UNKNOWN), child.detail
            assert sent[(d.namespace, d.bundle)].landed == 1
            assert journal[child.decision_id].result == "applied"
        assert len(sent) == len(sim.model.brokers.moves)  # each child sent at most once
        rig.handler.close()


def test_a_child_whose_split_did_not_apply_is_not_moved(
    hot_sim: RunningPeerGroup, tmp_path: Path
) -> None:
    sim = hot_sim
    client = make_client(sim)
    rig = MoveRig(sim, client, tmp_path)
    hot_split_config(rig)
    # Every split is refused by Pulsar (500): its children do not exist.
    first_window_without_moves(rig)
    sim.model.faults.configure(error_rate_500=1.0, only_paths=("/split",))
    rig.window()
    splits = rig.outcomes(DecisionKind.SPLIT)
    assert splits and all(o.result is not ActionResult.APPLIED for o in splits)
    split_ids = {o.decision_id for o in splits}
    skipped = rig.handler.stats.snapshot().counters.get(("move", "skipped", "split_not_applied"))
    assert skipped, "no child move was skipped"
    sent = {f"{m.namespace}/{m.bundle}" for m in sim.model.brokers.moves}
    for o in rig.outcomes():
        assert o.decision.after_split not in split_ids
    parents = {f"{o.decision.namespace}/{o.decision.bundle}" for o in splits}
    assert not (sent & parents)
    rig.handler.close()
    client.close()
