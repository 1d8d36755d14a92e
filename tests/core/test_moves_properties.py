"""Properties of the move decision over generated clusters (hypothesis)."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from balancer.core.broker_load import BrokerCapacity, bundle_load_ratio
from balancer.core.moves.decide import decide_moves, is_balanced
from balancer.core.moves.model import (
    BrokerState,
    BundleState,
    IsolationPolicy,
    MovePlan,
    MoveSettings,
    PlacementRules,
)
from balancer.core.moves.placement import isolation_allowed
from tests.core.moves_fixtures import bundle

NOW_MS = 10**10
NAMESPACES = ("t/a", "t/b", "t/iso", "t/g1", "t/g2")


@st.composite
def clusters(
    draw: st.DrawFn,
) -> tuple[list[BrokerState], list[BundleState], PlacementRules, MoveSettings]:
    n = draw(st.integers(1, 7))
    brokers: list[BrokerState] = []
    names = [f"{'p' if i % 3 == 0 else 'h'}{i}:8080" for i in range(n)]
    for name in names:
        cap = BrokerCapacity(draw(st.sampled_from([500.0, 1000.0, 2000.0])), 1e9)
        brokers.append(
            BrokerState(
                broker=name,
                load_ratio=0.0,
                capacity=cap,
                topic_count=draw(st.integers(0, 10)),
                active=draw(st.booleans()) if n > 2 else True,
                failure_domain=draw(st.sampled_from([None, "z1", "z2"])),
            )
        )
    bundles: list[BundleState] = []
    for i in range(draw(st.integers(0, 25))):
        owner = draw(st.sampled_from([b for b in brokers if b.active] or brokers))
        ns = draw(st.sampled_from(NAMESPACES))
        moved = draw(st.sampled_from([None, NOW_MS - 60_000, NOW_MS - 10**8]))
        bundles.append(
            bundle(
                ns,
                i,
                owner.broker,
                draw(st.floats(0.0, 600.0)),
                sessions=draw(st.integers(0, 50)),
                topics=draw(st.integers(0, 5)),
                last_moved_ms=moved,
            )
        )
    # each broker's load: its bundles' loads, plus some unexplained load (cpu)
    for k, b in enumerate(brokers):
        own = sum(
            bundle_load_ratio(x.msg_rate, x.throughput_bytes, b.capacity)
            for x in bundles
            if x.owner == b.broker
        )
        brokers[k] = replace(b, load_ratio=own + draw(st.floats(0.0, 0.2)))
    rules = PlacementRules(
        isolation=(IsolationPolicy("iso", ("t/iso",), primary=("p.*",), secondary=("h1",)),)
        if draw(st.booleans())
        else (),
        anti_affinity={"t/g1": "g", "t/g2": "g"} if draw(st.booleans()) else {},
        max_topics_per_broker=draw(st.sampled_from([12, 50_000])),
        failure_domains_enabled=draw(st.booleans()),
    )
    move_settings = MoveSettings(
        max_moves_per_cluster=draw(st.integers(0, 8)),
        max_moves_per_broker=draw(st.integers(1, 4)),
        min_bundle_load_ratio=draw(st.sampled_from([0.0, 0.01, 0.1])),
    )
    return brokers, bundles, rules, move_settings


def run(
    brokers: list[BrokerState], bundles: list[BundleState], rules: PlacementRules, s: MoveSettings
) -> MovePlan:
    return decide_moves(
        "c", brokers, bundles, rules=rules, settings=s, now_ms=NOW_MS, window_end_ms=NOW_MS
    )


PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(clusters())
def test_most_loaded_broker_never_gets_worse(c) -> None:  # type: ignore[no-untyped-def]
    brokers, bundles, rules, s = c
    p = run(brokers, bundles, rules, s)
    active = [b.broker for b in brokers if b.active]
    if active:
        assert max(p.loads_after[b] for b in active) <= max(p.loads_before[b] for b in active)
    for m in p.moves:
        assert max(m.source_load_after, m.destination_load_after) < m.source_load_before


@PROPS
@given(clusters())
def test_no_placement_rule_broken(c) -> None:  # type: ignore[no-untyped-def]
    brokers, bundles, rules, s = c
    p = run(brokers, bundles, rules, s)
    by_name = {b.broker: b for b in brokers}
    topics = {b.broker: b.topic_count for b in brokers}
    owner = {x.name: x.owner for x in bundles}
    for m in p.moves:
        dest = by_name[m.destination]
        assert dest.active and m.destination != m.source
        assert m.destination in isolation_allowed(m.namespace, brokers, rules)
        moved = next(x for x in bundles if x.namespace == m.namespace and x.bundle == m.bundle)
        topics[m.source] -= moved.topics
        topics[m.destination] += moved.topics
        assert topics[m.destination] <= rules.max_topics_per_broker
        group = rules.anti_affinity.get(m.namespace)
        if group:
            # the destination holds no more of the group's NAMESPACES than the source did
            # (without the bundle), unless failure domains come first
            held = {
                o: len(
                    {
                        x.namespace
                        for x in bundles
                        if x.name != moved.name
                        and rules.anti_affinity.get(x.namespace) == group
                        and owner[x.name] == o
                    }
                )
                for o in (m.source, m.destination)
            }
            assert held[m.destination] <= held[m.source] or (
                rules.failure_domains_enabled and any(by_name[b].failure_domain for b in by_name)
            )
        owner[moved.name] = m.destination


@PROPS
@given(clusters(), st.randoms(use_true_random=False))
def test_deterministic(c, rnd: random.Random) -> None:  # type: ignore[no-untyped-def]
    brokers, bundles, rules, s = c
    p = run(brokers, bundles, rules, s)
    shuffled_brokers, shuffled_bundles = list(brokers), list(bundles)
    rnd.shuffle(shuffled_brokers)
    rnd.shuffle(shuffled_bundles)
    assert run(shuffled_brokers, shuffled_bundles, rules, s) == p


@PROPS
@given(clusters())
def test_balanced_cluster_gets_no_move(c) -> None:  # type: ignore[no-untyped-def]
    brokers, bundles, rules, s = c
    p = run(brokers, bundles, rules, s)
    active = {b.broker: b.load_ratio for b in brokers if b.active}
    assert p.balanced_before == is_balanced(active, s)
    if p.balanced_before:
        assert p.moves == ()


@PROPS
@given(clusters())
def test_budgets_grace_and_no_bundle_moved_twice(c) -> None:  # type: ignore[no-untyped-def]
    brokers, bundles, rules, s = c
    p = run(brokers, bundles, rules, s)
    assert len(p.moves) <= s.max_moves_per_cluster
    per_broker: dict[str, int] = {}
    for m in p.moves:
        per_broker[m.source] = per_broker.get(m.source, 0) + 1
        per_broker[m.destination] = per_broker.get(m.destination, 0) + 1
        moved = next(x for x in bundles if x.namespace == m.namespace and x.bundle == m.bundle)
        assert moved.last_moved_ms is None or NOW_MS - moved.last_moved_ms >= s.grace_period_s * 1e3
        assert m.bundle_load_ratio >= s.min_bundle_load_ratio
    assert all(v <= s.max_moves_per_broker for v in per_broker.values())
    names = [(m.namespace, m.bundle) for m in p.moves]
    assert len(names) == len(set(names))
