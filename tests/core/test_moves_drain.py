"""Draining brokers in the move decision (issue 43, points 1 and 2): every bundle leaves, to
brokers that stay, within the placement rules and the target computed without the draining
brokers; bundles that cannot go are named with a reason; system namespaces stay."""

from __future__ import annotations

from balancer.core.bundles import BundleRange
from balancer.core.decisions import SplitDecision, SplitInputs, SplitReason
from balancer.core.limits import BundleLimits
from balancer.core.moves.decide import decide_moves, target_ratio
from balancer.core.moves.model import (
    BrokerState,
    BundleState,
    DrainBlock,
    IsolationPolicy,
    MovePlan,
    MoveReason,
    MoveSettings,
    PlacementRules,
)
from balancer.core.split import ChildLoad, SplitAlgorithm
from tests.core.moves_fixtures import broker, bundle, cluster, decide

SETTINGS = MoveSettings()


def plan(
    brokers: list[BrokerState],
    bundles: list[BundleState],
    draining: frozenset[str],
    *,
    rules: PlacementRules | None = None,
    busy_ranges: frozenset[str] = frozenset(),
) -> MovePlan:
    return decide(brokers, bundles, rules=rules, busy_ranges=busy_ranges, draining=draining)


def owners_after(bundles: list[BundleState], p: MovePlan) -> dict[str, str]:
    owner = {b.name: b.owner for b in bundles}
    for m in p.moves:
        owner[f"{m.namespace}/{m.bundle}"] = m.destination
    return owner


def test_every_bundle_leaves_and_no_destination_ends_over_target() -> None:
    # 100 small bundles on the broker to drain, four others moderately loaded; a balanced
    # cluster (no balance move would take anything off a:1 on its own).
    brokers, bundles = cluster(
        {
            "a:1": [0.004] * 100,
            "b:1": [0.1, 0.2],
            "c:1": [0.3],
            "d:1": [0.35],
            "e:1": [0.25],
        }
    )
    p = plan(brokers, bundles, frozenset({"a:1"}))
    drained = [m for m in p.moves if m.source == "a:1"]
    assert len(drained) == 100
    assert all(m.reason is MoveReason.DRAIN for m in drained)
    assert all(m.destination != "a:1" for m in p.moves)
    assert p.drain_blocked == ()
    assert p.draining == ("a:1",)
    assert "a:1" not in owners_after(bundles, p).values()
    # The target as if a:1 were gone: its 0.4 lands on the four others.
    staying = {b: p.loads_before[b] for b in ("b:1", "c:1", "d:1", "e:1")}
    mean_after = (sum(staying.values()) + 0.4) / 4
    target = min(mean_after + SETTINGS.margin, SETTINGS.overload_ratio)
    assert all(p.loads_after[b] <= target + 1e-9 for b in staying)
    assert len({m.decision_id for m in p.moves}) == len(p.moves)  # no bundle moved twice


def test_a_draining_broker_is_never_the_destination_of_a_balance_move() -> None:
    # b:1 is the only idle broker: without the drain mark it gets a:1's excess.
    brokers, bundles = cluster({"a:1": [0.3, 0.3, 0.3], "b:1": [], "c:1": [0.3]})
    assert any(m.destination == "b:1" for m in plan(brokers, bundles, frozenset()).moves)
    p = plan(brokers, bundles, frozenset({"b:1"}))
    assert p.moves and all(m.destination != "b:1" for m in p.moves)
    assert all(m.reason is not MoveReason.DRAIN for m in p.moves)  # b:1 owns nothing
    # The target counts only the brokers that stay.
    staying = {b: v for b, v in p.loads_after.items() if b != "b:1"}
    assert max(staying.values()) <= target_ratio(staying, SETTINGS) + 1e-9


def test_a_draining_broker_gets_no_split_child() -> None:
    # b:1 is the idle broker a split child would go to without the drain mark.
    brokers = [broker("a:1", 0.9), broker("b:1", 0.0), broker("c:1", 0.1)]
    parent = bundle("t/ns", 0, "a:1", 900.0)
    other = bundle("t/ns", 1, "c:1", 100.0)
    lo, hi = parent.bundle.lower, parent.bundle.upper
    mid = (lo + hi) // 2
    split = SplitDecision(
        decision_id="split-1",
        cluster="c",
        namespace="t/ns",
        bundle=parent.bundle,
        algorithm=SplitAlgorithm.BALANCED_FLOW_DIVIDE,
        boundaries=(mid,),
        children=(
            ChildLoad(BundleRange(lo, mid), 1, 450.0, 0.0, 3),
            ChildLoad(BundleRange(mid, hi), 1, 450.0, 0.0, 2),
        ),
        reasons=(SplitReason.MSG_RATE,),
        window_end_ms=60_000,
        inputs=SplitInputs(900.0, 0.0, 2, 5, 1.0, 3, BundleLimits(), 1, 128),
    )

    def split_plan(draining: frozenset[str]) -> MovePlan:
        return decide_moves(
            "c",
            brokers,
            [parent, other],
            rules=PlacementRules(),
            settings=SETTINGS,
            now_ms=10**9,
            window_end_ms=10**9,
            splits=[split],
            draining=draining,
        )

    assert [m.destination for m in split_plan(frozenset()).moves] == ["b:1"]
    p = split_plan(frozenset({"b:1"}))
    assert [(m.reason, m.destination) for m in p.moves] == [(MoveReason.SPLIT_CHILD, "c:1")]


def test_isolation_is_respected_and_a_bundle_with_no_allowed_broker_is_named() -> None:
    # iso/ns may only go to primaries h1 and h2; draining h1 leaves h2 as the one place.
    # other/ns (shared) may not go to h2 (a primary): it goes to the shared h3.
    policy = IsolationPolicy(name="p", namespaces=("iso/.*",), primary=("h1", "h2"))
    brokers = [broker("h1:1", 0.2), broker("h2:1", 0.1), broker("h3:1", 0.1)]
    bundles = [
        bundle("iso/ns", 0, "h1:1", 100.0, topics=1),
        bundle("other/ns", 1, "h1:1", 100.0, topics=1),
    ]
    rules = PlacementRules(isolation=(policy,))
    p = plan(brokers, bundles, frozenset({"h1:1"}), rules=rules)
    assert {(m.namespace, m.destination) for m in p.moves} == {
        ("iso/ns", "h2:1"),
        ("other/ns", "h3:1"),
    }
    # Draining both primaries: iso/ns has nowhere to go (no secondary), and says so.
    p = plan(brokers, bundles, frozenset({"h1:1", "h2:1"}), rules=rules)
    assert [(m.namespace, m.destination) for m in p.moves] == [("other/ns", "h3:1")]
    assert [(b.bundle, b.broker, b.reason) for b in p.drain_blocked] == [
        (bundles[0].name, "h1:1", DrainBlock.NO_DESTINATION)
    ]


def test_anti_affinity_spreads_the_drained_bundles() -> None:
    # Two namespaces of one group on a:1; b:1 already has a third of the group: the drained
    # ones go to c:1 and d:1 (fewest of the group), not b:1, though b:1 is the least loaded.
    brokers = [broker("a:1", 0.2), broker("b:1", 0.0), broker("c:1", 0.2), broker("d:1", 0.2)]
    bundles = [
        bundle("t/g1", 0, "a:1", 100.0),
        bundle("t/g2", 1, "a:1", 100.0),
        bundle("t/g3", 2, "b:1", 0.0),
        bundle("t/x", 3, "c:1", 200.0),
        bundle("t/y", 4, "d:1", 200.0),
    ]
    rules = PlacementRules(anti_affinity={"t/g1": "g", "t/g2": "g", "t/g3": "g"})
    p = plan(brokers, bundles, frozenset({"a:1"}), rules=rules)
    dest = {m.namespace: m.destination for m in p.moves if m.reason is MoveReason.DRAIN}
    assert set(dest) == {"t/g1", "t/g2"}
    assert "b:1" not in dest.values()
    assert sorted(dest.values()) == ["c:1", "d:1"]


def test_no_room_is_named_and_no_destination_is_pushed_over_target() -> None:
    # b:1 is nearly full: the 0.5 bundle of a:1 would push it over 85 %.
    brokers, bundles = cluster({"a:1": [0.5, 0.05], "b:1": [0.7]})
    p = plan(brokers, bundles, frozenset({"a:1"}))
    assert [(m.bundle, m.destination) for m in p.moves] == [(bundles[1].bundle, "b:1")]
    assert [(b.bundle, b.reason) for b in p.drain_blocked] == [
        (bundles[0].name, DrainBlock.NO_ROOM)
    ]
    assert p.loads_after["b:1"] <= SETTINGS.overload_ratio + 1e-9


def test_system_namespaces_stay_and_pinned_or_busy_bundles_are_named() -> None:
    brokers = [broker("a:1", 0.3), broker("b:1", 0.0)]
    heartbeat = bundle("pulsar/a:1", 0, "a:1", 10.0)
    pinned = bundle("t/denied", 1, "a:1", 100.0, pinned=True)
    busy = bundle("t/ns", 2, "a:1", 100.0)
    free = bundle("t/ns", 3, "a:1", 100.0)
    p = plan(
        brokers,
        [heartbeat, pinned, busy, free],
        frozenset({"a:1"}),
        busy_ranges=frozenset({str(busy.bundle)}),
    )
    assert [m.bundle for m in p.moves] == [free.bundle]
    assert {(b.bundle, b.reason) for b in p.drain_blocked} == {
        (pinned.name, DrainBlock.NOT_MOVABLE),
        (busy.name, DrainBlock.RANGE_IN_FLIGHT),
    }
    assert heartbeat.name not in {b.bundle for b in p.drain_blocked}


def test_a_drain_ignores_the_grace_period_size_floor_and_cycle_budget() -> None:
    brokers, bundles = cluster({"a:1": [0.001] * 60, "b:1": [0.1], "c:1": [0.1]})
    recent = [
        BundleState(b.namespace, b.bundle, b.owner, msg_rate=b.msg_rate, last_moved_ms=10**9 - 1)
        for b in bundles
    ]
    p = plan(brokers, recent, frozenset({"a:1"}))
    assert sum(m.reason is MoveReason.DRAIN for m in p.moves) == 60  # > max_moves_per_cluster


def test_unknown_draining_ids_are_ignored() -> None:
    brokers, bundles = cluster({"a:1": [0.1], "b:1": [0.1]})
    p = plan(brokers, bundles, frozenset({"gone:1"}))
    assert p.moves == () and p.draining == ()
