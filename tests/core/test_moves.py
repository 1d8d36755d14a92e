"""The move decision on the issue's scenarios."""

from __future__ import annotations

import pytest

from balancer.core.broker_load import BrokerCapacity
from balancer.core.bundles import BundleRange
from balancer.core.decisions import SplitDecision, SplitInputs, SplitReason
from balancer.core.limits import BundleLimits
from balancer.core.moves.decide import decide_moves, is_balanced
from balancer.core.moves.model import (
    BlockReason,
    IsolationPolicy,
    MoveReason,
    MoveSettings,
    PlacementRules,
    move_decision_id,
)
from balancer.core.split import ChildLoad, SplitAlgorithm
from tests.core.moves_fixtures import CAP, broker, bundle, cluster

S = MoveSettings()
R = PlacementRules()


def plan(brokers, bundles, rules=R, settings=S, now_ms=10**9, splits=()):  # type: ignore[no-untyped-def]
    return decide_moves(
        "c",
        brokers,
        bundles,
        rules=rules,
        settings=settings,
        now_ms=now_ms,
        window_end_ms=60_000,
        splits=splits,
    )


def test_is_balanced() -> None:
    assert is_balanced({}, S)
    assert is_balanced({"a": 0.5, "b": 0.45, "c": 0.55}, S)
    assert not is_balanced({"a": 0.9, "b": 0.9}, S)  # over the overload ratio
    assert not is_balanced({"a": 0.7, "b": 0.3}, S)  # 0.7 > mean 0.5 + 0.1
    # idle beside busy: 0.2 < mean 0.3333 - 0.1 while the others are over the mean
    assert not is_balanced({"a": 0.4, "b": 0.4, "c": 0.2}, S)


def test_balanced_cluster_gets_no_move() -> None:
    brokers, bundles = cluster({"a:1": [0.2, 0.2], "b:1": [0.2, 0.15], "c:1": [0.3, 0.1]})
    p = plan(brokers, bundles)
    assert p.moves == () and p.balanced_before and p.balanced_after


def test_restarted_broker_gets_bundles() -> None:
    brokers, bundles = cluster({"a:1": [0.1] * 6, "b:1": [0.1] * 6, "c:1": []})
    p = plan(brokers, bundles)
    assert not p.balanced_before and p.balanced_after
    assert {m.destination for m in p.moves} == {"c:1"}
    # mean 0.4: c needs 0.3 to be within the margin, the fewest moves that get it there
    assert len(p.moves) == 3
    assert p.loads_after["c:1"] == pytest.approx(0.3)
    assert all(m.reason in (MoveReason.ABOVE_MEAN, MoveReason.IDLE_BROKER) for m in p.moves)


def test_five_to_ten_brokers() -> None:
    owned = {f"b{i}:1": [0.1] * 6 for i in range(5)} | {f"n{i}:1": [] for i in range(5)}
    brokers, bundles = cluster(owned)
    p = plan(brokers, bundles, settings=MoveSettings(max_moves_per_cluster=20))
    assert p.balanced_after
    # mean 0.3: every new broker needs 0.2 (two bundles), the fewest moves to get there
    assert len(p.moves) == 10
    assert max(p.loads_after.values()) == pytest.approx(0.4)
    assert min(p.loads_after.values()) == pytest.approx(0.2)


def test_one_hot_broker_with_many_small_bundles() -> None:
    brokers, bundles = cluster({"hot:1": [0.05] * 19, "a:1": [0.3], "b:1": [0.3]})
    p = plan(
        brokers, bundles, settings=MoveSettings(max_moves_per_broker=20, max_moves_per_cluster=20)
    )
    assert p.loads_before["hot:1"] == pytest.approx(0.95)
    assert p.moves[0].reason is MoveReason.OVERLOADED
    assert p.balanced_after
    assert {m.source for m in p.moves} == {"hot:1"}


def test_one_bundle_carries_the_load() -> None:
    brokers, bundles = cluster({"a:1": [0.9], "b:1": [0.0]})
    p = plan(brokers, bundles)
    assert p.moves == ()
    assert [(b.broker, b.reason) for b in p.blocked] == [("a:1", BlockReason.SINGLE_BUNDLE)]


def test_brokers_of_different_capacity() -> None:
    big = BrokerCapacity(max_msg_rate=4000.0, max_throughput_bytes=4e9)
    brokers = [broker("small:1", 0.8), broker("big:1", 0.0, cap=big)]
    bundles = [bundle("t/ns", i, "small:1", 200.0) for i in range(4)]  # 0.2 each on small
    p = plan(brokers, bundles)
    # each bundle weighs 0.05 on the big broker: moving 3 gives small 0.2 and big 0.15
    assert [m.destination for m in p.moves] == ["big:1"] * 3
    assert p.moves[0].destination_load_after == pytest.approx(0.05)
    assert p.loads_after == pytest.approx({"small:1": 0.2, "big:1": 0.15})


def test_isolation_policy() -> None:
    policy = IsolationPolicy("iso", namespaces=("t/iso.*",), primary=("p.*",), secondary=("s.*",))
    rules = PlacementRules(isolation=(policy,))
    brokers = [
        broker("p1:1", 0.8),
        broker("p2:1", 0.0),
        broker("s1:1", 0.0),
        broker("x1:1", 0.0),
        broker("x2:1", 0.9),
    ]
    bundles = [bundle("t/iso", i, "p1:1", 200.0) for i in range(4)]
    bundles += [bundle("t/other", i, "x2:1", 300.0) for i in range(3)]
    p = plan(brokers, bundles, rules=rules)
    for m in p.moves:
        assert m.destination in ({"p2:1"} if m.namespace == "t/iso" else {"x1:1", "s1:1"})
    assert any(m.namespace == "t/iso" for m in p.moves)


def test_isolation_fails_over_to_secondaries() -> None:
    policy = IsolationPolicy(
        "iso", ("t/iso",), primary=("p.*",), secondary=("s.*",), min_primary_brokers=2
    )
    rules = PlacementRules(isolation=(policy,))
    brokers = [broker("p1:1", 0.8), broker("p2:1", 0.0, active=False), broker("s1:1", 0.0)]
    bundles = [bundle("t/iso", i, "p1:1", 200.0) for i in range(4)]
    p = plan(brokers, bundles, rules=rules)
    assert p.moves and {m.destination for m in p.moves} == {"s1:1"}


def test_anti_affinity_spreads_the_group() -> None:
    rules = PlacementRules(anti_affinity={"t/a": "g", "t/b": "g"}, failure_domains_enabled=True)
    brokers = [
        broker("a:1", 0.8),
        broker("b:1", 0.0),
        broker("c:1", 0.0),
        broker("d:1", 0.0, failure_domain="z2"),
        broker("e:1", 0.0, failure_domain="z2"),
    ]
    bundles = [
        bundle("t/a", 0, "a:1", 400.0),
        bundle("t/b", 0, "a:1", 400.0),
        bundle("t/b", 1, "b:1", 1.0),
        bundle("t/b", 2, "c:1", 1.0),
    ]
    # b and c are in the default domain, which holds 2 of the group (plus a's): z2 holds 0
    p = plan(brokers, bundles, rules=rules)
    assert p.moves and all(m.destination in {"d:1", "e:1"} for m in p.moves)


def test_grace_period_and_budget() -> None:
    brokers, bundles = cluster({"a:1": [0.3, 0.3, 0.3], "b:1": []})
    recent = [
        b.__class__(**{**{f: getattr(b, f) for f in b.__slots__}, "last_moved_ms": 10**9})
        for b in bundles
    ]
    p = plan(brokers, recent, now_ms=10**9 + 60_000)
    assert p.moves == () and p.blocked[0].reason is BlockReason.GRACE_PERIOD
    p = plan(brokers, recent, now_ms=10**9 + 1_800_000)
    assert p.moves
    p = plan(brokers, bundles, settings=MoveSettings(max_moves_per_cluster=0))
    assert p.moves == () and p.blocked[0].reason is BlockReason.BUDGET


def test_too_small() -> None:
    brokers, bundles = cluster({"a:1": [0.005] * 100, "b:1": []})
    brokers[0] = broker("a:1", 0.9)
    p = plan(brokers, bundles)
    assert p.moves == () and p.blocked[0].reason is BlockReason.TOO_SMALL


def test_max_topics() -> None:
    brokers, bundles = cluster({"a:1": [0.3, 0.3, 0.3], "b:1": []})
    brokers[1] = broker("b:1", 0.0, topic_count=50_000)
    p = plan(brokers, bundles)
    assert p.moves == () and p.blocked[0].reason is BlockReason.NO_DESTINATION


def test_split_children_move_in_the_same_plan() -> None:
    brokers = [broker("a:1", 0.9), broker("b:1", 0.0)]
    parent = bundle("t/ns", 0, "a:1", 900.0)
    lo, hi = parent.bundle.lower, parent.bundle.upper
    mid = (lo + hi) // 2
    children = (
        ChildLoad(BundleRange(lo, mid), 1, 450.0, 0.0, 3),
        ChildLoad(BundleRange(mid, hi), 1, 450.0, 0.0, 2),
    )
    split = SplitDecision(
        decision_id="split-1",
        cluster="c",
        namespace="t/ns",
        bundle=parent.bundle,
        algorithm=SplitAlgorithm.BALANCED_FLOW_DIVIDE,
        boundaries=(mid,),
        children=children,
        reasons=(SplitReason.MSG_RATE,),
        window_end_ms=60_000,
        inputs=SplitInputs(900.0, 0.0, 2, 5, 1.0, 3, BundleLimits(), 1, 128),
    )
    p = plan(brokers, [parent], splits=[split])
    assert len(p.moves) == 1
    m = p.moves[0]
    assert (m.reason, m.after_split, m.bundle) == (
        MoveReason.SPLIT_CHILD,
        "split-1",
        BundleRange(mid, hi),
    )
    assert m.decision_id == move_decision_id(
        cluster="c", namespace="t/ns", bundle=m.bundle, window_end_ms=60_000
    )
    assert p.balanced_after


def test_inactive_broker_is_never_a_destination() -> None:
    brokers, bundles = cluster({"a:1": [0.3, 0.3, 0.3], "b:1": [], "c:1": []})
    brokers[1] = broker("b:1", 0.0, active=False)
    p = plan(brokers, bundles)
    assert p.moves and {m.destination for m in p.moves} == {"c:1"}


def test_capacity_constant() -> None:
    assert CAP.max_msg_rate == 1000.0


def test_an_isolation_pattern_naming_host_and_port_picks_that_broker_among_one_hosts() -> None:
    from balancer.core.broker_load import BrokerCapacity
    from balancer.core.moves.model import BrokerState, IsolationPolicy, PlacementRules
    from balancer.core.moves.placement import isolation_allowed

    capacity = BrokerCapacity(max_msg_rate=1.0, max_throughput_bytes=1.0)
    brokers = [BrokerState(f"127.0.0.1:{port}", 0.1, capacity) for port in (8080, 8081, 8082)]
    rules = PlacementRules(
        isolation=(IsolationPolicy("p", ("t/iso",), primary=(r"127\.0\.0\.1:8081",)),)
    )
    assert isolation_allowed("t/iso", brokers, rules) == {"127.0.0.1:8081"}
    assert isolation_allowed("t/other", brokers, rules) == {"127.0.0.1:8080", "127.0.0.1:8082"}
