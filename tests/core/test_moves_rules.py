"""The move decision against Pulsar's placement rules as its source applies them (issue 41,
points 1, 3, 4, 5): one move per bundle range in flight, anti-affinity counted in namespaces
with pinned bundles included, group names compared as equalsIgnoreCase, failure domains only
when enabled, min_limit 0, unreadable isolation patterns, system namespaces."""

from __future__ import annotations

from balancer.core.moves.decide import decide_moves
from balancer.core.moves.model import (
    BlockReason,
    BrokerState,
    BundleState,
    IsolationPolicy,
    MovePlan,
    MoveSettings,
    PlacementRules,
)
from balancer.core.moves.placement import (
    is_system_namespace,
    isolation_allowed,
    same_group,
    unreadable_patterns,
)
from tests.core.moves_fixtures import broker, bundle


def plan(
    brokers: list[BrokerState],
    bundles: list[BundleState],
    *,
    rules: PlacementRules | None = None,
    busy_ranges: frozenset[str] = frozenset(),
) -> MovePlan:
    return decide_moves(
        "c",
        brokers,
        bundles,
        rules=rules or PlacementRules(),
        settings=MoveSettings(),
        now_ms=10**9,
        window_end_ms=10**9,
        busy_ranges=busy_ranges,
    )


def test_a_range_with_a_move_in_flight_is_not_moved() -> None:
    brokers = [broker("a:1", 0.8), broker("b:1", 0.0)]
    bundles = [bundle("t/ns", i, "a:1", 200.0) for i in range(4)]
    busy = frozenset(str(b.bundle) for b in bundles)
    p = plan(brokers, bundles, busy_ranges=busy)
    assert p.moves == ()
    assert [b.reason for b in p.blocked] == [BlockReason.RANGE_IN_FLIGHT]
    # One range free: that one moves.
    p = plan(brokers, bundles, busy_ranges=busy - {str(bundles[2].bundle)})
    assert [m.bundle for m in p.moves] == [bundles[2].bundle]


def test_one_move_per_range_in_a_cycle() -> None:
    # Two namespaces with the same four ranges (as every default 4-bundle namespace has).
    brokers = [broker("a:1", 1.6), broker("b:1", 0.0), broker("c:1", 0.0)]
    bundles = [bundle(ns, i, "a:1", 200.0) for ns in ("t/one", "t/two") for i in range(4)]
    p = plan(brokers, bundles)
    ranges = [str(m.bundle) for m in p.moves]
    assert len(p.moves) >= 4
    assert len(ranges) == len(set(ranges))


def test_pinned_bundles_count_for_anti_affinity() -> None:
    # t/peer is outside the allow-list (pinned) and in t/a's group, on b:1, the least loaded.
    rules = PlacementRules(anti_affinity={"t/a": "g", "t/peer": "g"})
    brokers = [broker("a:1", 0.8), broker("b:1", 0.05), broker("c:1", 0.1)]
    bundles = [
        bundle("t/a", 0, "a:1", 400.0),
        bundle("t/x", 1, "a:1", 400.0),
        bundle("t/peer", 2, "b:1", 50.0, pinned=True),
        bundle("t/y", 3, "c:1", 100.0),
    ]
    p = plan(brokers, bundles, rules=rules)
    moved = {m.namespace: m.destination for m in p.moves}
    assert moved.get("t/a") != "b:1"
    assert "t/peer" not in moved
    assert any(m.namespace == "t/a" and m.destination == "c:1" for m in p.moves) or (
        "t/a" not in moved
    )


def test_anti_affinity_counts_namespaces_not_bundles() -> None:
    rules = PlacementRules(anti_affinity={"t/a": "g", "t/b": "g", "t/c": "g", "t/d": "g"})
    brokers = [broker("a:1", 0.9), broker("b:1", 0.03), broker("c:1", 0.02)]
    bundles = [
        bundle("t/a", 0, "a:1", 400.0),
        bundle("t/x", 9, "a:1", 500.0, pinned=True),
        # t/a's own namespace counts where its other bundles are (too small to move)
        bundle("t/a", 8, "a:1", 1.0),
        # three bundles of ONE namespace on b:1; one bundle of each of TWO on c:1
        *(bundle("t/b", i, "b:1", 10.0, pinned=True) for i in (1, 2, 3)),
        bundle("t/c", 4, "c:1", 10.0, pinned=True),
        bundle("t/d", 5, "c:1", 10.0, pinned=True),
    ]
    p = plan(brokers, bundles, rules=rules)
    [to] = [m.destination for m in p.moves if m.namespace == "t/a"]
    # 1 namespace of the group on b:1 (as on a:1), 2 on c:1 (though c:1 has fewer bundles)
    assert to == "b:1"


def test_group_names_compare_ignoring_case() -> None:
    assert same_group("Orders", "oRDERS")
    assert not same_group("orders", "orders2") and not same_group("  ", "  ")
    rules = PlacementRules(anti_affinity={"t/a": "Grp", "t/b": "grp"})
    brokers = [broker("a:1", 0.8), broker("b:1", 0.0), broker("c:1", 0.1)]
    bundles = [
        bundle("t/a", 0, "a:1", 400.0),
        bundle("t/x", 1, "a:1", 400.0),
        bundle("t/b", 2, "b:1", 1.0),
        bundle("t/y", 3, "c:1", 99.0),
    ]
    p = plan(brokers, bundles, rules=rules)
    assert all(m.destination != "b:1" for m in p.moves if m.namespace == "t/a")


def test_failure_domains_only_when_enabled() -> None:
    brokers = [
        broker("a:1", 0.8, failure_domain="z1"),
        broker("b:1", 0.0, failure_domain="z1"),
        broker("x:1", 0.3, failure_domain="z1"),
        broker("c:1", 0.0, failure_domain="z2"),
    ]
    bundles = [
        bundle("t/a", 0, "a:1", 400.0),
        bundle("t/z", 1, "a:1", 400.0, pinned=True),
        bundle("t/a", 8, "a:1", 1.0),
        bundle("t/p", 2, "x:1", 300.0),
        bundle("t/w", 3, "c:1", 1.0),
    ]
    groups = {"t/a": "g", "t/p": "g"}

    def dest(enabled: bool) -> str:
        rules = PlacementRules(anti_affinity=groups, failure_domains_enabled=enabled)
        return next(m.destination for m in plan(brokers, bundles, rules=rules).moves
                    if m.namespace == "t/a")  # fmt: skip

    # Disabled (Pulsar's default): brokers only, b:1 and c:1 hold none of the group (a:1
    # holds t/a itself, x:1 t/p): b:1 first by name.
    assert dest(False) == "b:1"
    # Enabled: z1 holds two namespaces of the group (a:1, x:1), z2 none.
    assert dest(True) == "c:1"


def test_min_limit_zero_never_fails_over_to_secondaries() -> None:
    def allowed(min_limit: int) -> frozenset[str]:
        policy = IsolationPolicy(
            "iso", ("t/iso",), primary=("p.*",), secondary=("s.*",), min_primary_brokers=min_limit
        )
        brokers = [broker("p1:1", 0.8), broker("p2:1", 0.0, active=False), broker("s1:1", 0.0)]
        return isolation_allowed("t/iso", brokers, PlacementRules(isolation=(policy,)))

    assert allowed(0) == {"p1:1"}  # MinAvailablePolicy: 1 primary < 0 is false
    assert allowed(1) == {"p1:1"}
    assert allowed(2) == {"p1:1", "s1:1"}


def test_patterns_python_cannot_read_make_the_rules_unreadable() -> None:
    policy = IsolationPolicy("iso", (r"\Qt/iso\E",), primary=(r"\p{Alpha}+1",))
    other = IsolationPolicy("ok", ("t/ok",), primary=("[a-z&&[^s]]1",))
    assert unreadable_patterns([policy, other]) == ("[a-z&&[^s]]1", r"\Qt/iso\E", r"\p{Alpha}+1")
    rules = PlacementRules(isolation=(policy,))
    brokers = [broker("p1:1", 0.8), broker("s1:1", 0.0)]
    # Today such a pattern matched nothing: p1 and s1 were shared brokers for every namespace.
    assert isolation_allowed("t/free", brokers, rules) == frozenset()
    bundles = [bundle("t/free", i, "p1:1", 200.0) for i in range(4)]
    assert plan(brokers, bundles, rules=rules).moves == ()


def test_system_namespaces_never_move() -> None:
    for ns in ("pulsar/system", "pulsar/c1/10.0.0.1:8080", "pulsar/10.0.0.1:8080",
               "sla-monitor/c1/10.0.0.1:8080"):  # fmt: skip
        assert is_system_namespace(ns), ns
    assert not is_system_namespace("pulsar/functions") and not is_system_namespace("t/ns")
    brokers = [broker("a:1", 0.8), broker("b:1", 0.0)]
    bundles = [
        bundle("pulsar/system", 0, "a:1", 300.0),
        bundle("pulsar/a:1", 1, "a:1", 300.0),
        bundle("t/ns", 2, "a:1", 200.0),
    ]
    p = plan(brokers, bundles)
    assert [m.namespace for m in p.moves] == ["t/ns"]
