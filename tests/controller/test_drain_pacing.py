"""The controller's drain pace (issue 43, point 2): a draining broker is emptied at most
`drain_moves_in_flight_per_broker` moves in flight at a time and `drain_moves_per_minute`
drain moves per cluster in any minute; time is the planner's `now_ms` (injected)."""

from __future__ import annotations

from collections.abc import Mapping

from balancer.controller.broker_board import BrokerLoadBoard, BrokerSample
from balancer.controller.move_planning import MovePlanner, RulesCache
from balancer.core.broker_load import BrokerCapacity
from balancer.core.bundles import BundleRange
from balancer.core.load import BundleLoad
from balancer.core.moves.model import IsolationPolicy, MovePlan, MoveReason, MoveSettings

NS = "t/ns"
RANGES = [BundleRange(i * 0x01000000, (i + 1) * 0x01000000) for i in range(40)]
CAPACITY = BrokerCapacity(max_msg_rate=100_000.0, max_throughput_bytes=1e12)


class NoRules:
    def isolation_policies(self, cluster: str) -> tuple[IsolationPolicy, ...]:
        return ()

    def failure_domains(self, cluster: str) -> Mapping[str, tuple[str, ...]]:
        return {}

    def anti_affinity_group(self, namespace: str, *, cluster: str | None = None) -> str | None:
        return None

    def runtime_configuration(self, cluster: str) -> Mapping[str, str]:
        return {}


class Rig:
    """Brokers a:1 and d:1 (draining) own 12 bundles each, b:1 and c:1 own 8 each; every
    bundle 1,000 msg/s. Polls are recorded with the ownership the moves left."""

    def __init__(self, draining: frozenset[str], *, in_flight: int, per_minute: int) -> None:
        self.board = BrokerLoadBoard(retain_ms=3_600_000)
        self.in_flight: dict[str, int] = {}
        self.owner: dict[int, str] = {}
        for i in range(40):
            self.owner[i] = "a:1" if i < 12 else "d:1" if i < 24 else "b:1" if i < 32 else "c:1"
        self.planner = MovePlanner(
            self.board,
            RulesCache(NoRules(), ttl_s=60, max_topics_per_broker=50_000, monotonic=lambda: 0.0),
            settings=MoveSettings(grace_period_s=0),
            capacity_of=lambda c, b: CAPACITY,
            window_s=60,
            last_moves_ms=lambda c: {},
            draining_of=lambda c: draining,
            moves_in_flight_from=lambda c: self.in_flight,
            drain_moves_in_flight_per_broker=in_flight,
            drain_moves_per_minute=per_minute,
        )

    def cycle(self, now_ms: int) -> MovePlan:
        for broker in ("a:1", "b:1", "c:1", "d:1"):
            owned = frozenset(f"{NS}/{RANGES[i]}" for i, o in self.owner.items() if o == broker)
            self.board.record(BrokerSample("c", broker, now_ms, None, owned))
        bundles = [
            BundleLoad(
                cluster="c",
                namespace=NS,
                bundle=RANGES[i],
                window_end_ms=now_ms,
                msg_rate_in=500.0,
                msg_rate_out=500.0,
                topic_count=1,
                session_count=1,
            )
            for i in range(40)
        ]
        plan = self.planner.plan("c", bundles, window_end_ms=now_ms, now_ms=now_ms)
        assert plan is not None
        for m in plan.moves:
            self.owner[RANGES.index(m.bundle)] = m.destination
        return plan


def drains(plan: MovePlan) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in plan.moves:
        assert m.destination not in plan.draining
        if m.reason is MoveReason.DRAIN:
            out[m.source] = out.get(m.source, 0) + 1
    return out


def test_moves_in_flight_per_draining_broker_are_honoured() -> None:
    rig = Rig(frozenset({"a:1"}), in_flight=3, per_minute=100)
    t0 = 600_000
    assert drains(rig.cycle(t0)) == {"a:1": 3}
    rig.in_flight = {"a:1": 3}  # none of them owned at its destination yet
    assert drains(rig.cycle(t0 + 10_000)) == {}
    rig.in_flight = {"a:1": 1}  # two settled
    assert drains(rig.cycle(t0 + 20_000)) == {"a:1": 2}
    rig.in_flight = {"b:1": 5}  # moves out of other brokers do not count
    assert drains(rig.cycle(t0 + 30_000)) == {"a:1": 3}


def test_drain_moves_per_minute_per_cluster_are_honoured() -> None:
    rig = Rig(frozenset({"a:1", "d:1"}), in_flight=3, per_minute=5)
    t0 = 600_000
    first = drains(rig.cycle(t0))
    assert sum(first.values()) == 5 and max(first.values()) <= 3
    assert drains(rig.cycle(t0 + 30_000)) == {}  # the minute's 5 are used
    later = drains(rig.cycle(t0 + 60_000))  # the first five are a minute old
    assert sum(later.values()) == 5 and max(later.values()) <= 3


def test_a_drain_runs_to_the_end_and_every_bundle_left_the_draining_broker() -> None:
    rig = Rig(frozenset({"a:1"}), in_flight=4, per_minute=8)
    t = 600_000
    for _ in range(10):
        rig.cycle(t)
        t += 30_000
    assert "a:1" not in rig.owner.values()
