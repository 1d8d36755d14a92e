"""Rolling a cluster (issue 43, point 4): the restart order decides where each drain sends
its bundles. The first drain, with no broker restarted yet, sends them to the broker that
restarts last; later drains to brokers that already restarted; when those lack room, to the
brokers that restart latest (named as fallbacks), never over the target and always within
the placement rules. Over a whole roll in the pure model, no bundle moves more than twice
and the moves total at most (1 + 1/N) x bundles."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from balancer.core.moves.decide import decide_moves, target_ratio
from balancer.core.moves.model import (
    BrokerState,
    BundleState,
    IsolationPolicy,
    MovePlan,
    MoveReason,
    MoveSettings,
    PlacementRules,
)
from balancer.core.rollout import (
    MAX_MOVES_IN_ROLL,
    OrderError,
    drain_destinations,
    statefulset_order,
)
from tests.core.moves_fixtures import broker, cluster, decide

SETTINGS = MoveSettings()
B = [f"pulsar-broker-{i}.pulsar-broker.pulsar.svc:8080" for i in range(5)]
ORDER = tuple(reversed(B))  # b4, b3, b2, b1, b0


def test_the_default_order_is_a_statefulsets_highest_ordinal_first() -> None:
    ids = [f"pulsar-broker-{i}.pulsar-broker.pulsar.svc:8080" for i in (1, 10, 2, 0, 9)]
    assert statefulset_order(ids) == tuple(
        f"pulsar-broker-{i}.pulsar-broker.pulsar.svc:8080" for i in (10, 9, 2, 1, 0)
    )
    # A bare host (a StatefulSet pod's own name) works too.
    assert statefulset_order(["b-0:8080", "b-1:8080"]) == ("b-1:8080", "b-0:8080")


def test_an_id_without_an_ordinal_asks_for_the_order() -> None:
    with pytest.raises(OrderError, match=r"10\.0\.0\.7:8080"):
        statefulset_order(["b-0:8080", "10.0.0.7:8080"])
    with pytest.raises(OrderError, match="same ordinal"):
        statefulset_order(["a-0:8080", "b-0:8080"])


def test_the_first_drain_goes_to_the_broker_that_restarts_last() -> None:
    tiers = drain_destinations(ORDER, B, frozenset({ORDER[0]}))
    assert tiers is not None
    assert tiers[0] == {ORDER[-1]}  # nothing restarted yet: the last to restart
    # Then the others, the latest to restart first (each will move what it takes once more).
    assert tiers[1:] == tuple(frozenset({b}) for b in reversed(ORDER[1:-1]))


def test_later_drains_go_to_the_brokers_already_restarted() -> None:
    tiers = drain_destinations(ORDER, B, frozenset({ORDER[2]}))
    assert tiers is not None
    assert tiers[0] == {ORDER[0], ORDER[1]}
    assert tiers[1:] == (frozenset({ORDER[4]}), frozenset({ORDER[3]}))


def test_brokers_outside_the_order_never_stop_and_are_preferred() -> None:
    extra = "pulsar-broker-9.pulsar-broker.pulsar.svc:8080"  # joined after the roll started
    tiers = drain_destinations(ORDER, [*B, extra], frozenset({ORDER[0]}))
    assert tiers is not None and tiers[0] == {extra}
    # A broker of the order that is gone (scaled in) is no destination.
    tiers = drain_destinations(ORDER, B[1:], frozenset({ORDER[1]}))
    assert tiers is not None and all(B[0] not in t for t in tiers)


def test_a_drain_of_no_broker_in_the_order_has_no_preference() -> None:
    assert drain_destinations(ORDER, B, frozenset()) is None
    assert drain_destinations(ORDER, [*B, "x-0:1"], frozenset({"x-0:1"})) is None


def _plan(
    brokers: list[BrokerState],
    bundles: list[BundleState],
    draining: frozenset[str],
    order: tuple[str, ...],
    rules: PlacementRules | None = None,
) -> MovePlan:
    return decide(
        brokers, bundles, rules=rules, draining=draining,
        drain_destinations=drain_destinations(order, [b.broker for b in brokers], draining),
    )  # fmt: skip


def test_the_decision_sends_the_first_drain_to_the_last_broker_when_it_has_room() -> None:
    # b1 is the least loaded, but b0 restarts last.
    brokers, bundles = cluster({B[4]: [0.05] * 2, B[3]: [0.2], B[2]: [0.2], B[1]: [0.05],
                                B[0]: [0.15]})  # fmt: skip
    p = _plan(brokers, bundles, frozenset({B[4]}), ORDER)
    drains = [m for m in p.moves if m.reason is MoveReason.DRAIN]
    assert len(drains) == 2
    assert {m.destination for m in drains} == {B[0]}  # not the least loaded: the last one
    assert p.drain_fallback == ()


def test_without_room_on_the_preferred_brokers_the_rest_falls_back_named() -> None:
    # b4 drains 0.6 as 6 bundles; b0 (last to restart) can take only up to the target.
    brokers, bundles = cluster({B[4]: [0.1] * 6, B[3]: [0.5], B[2]: [0.5], B[1]: [0.5],
                                B[0]: [0.5]})  # fmt: skip
    p = _plan(brokers, bundles, frozenset({B[4]}), ORDER)
    drains = [m for m in p.moves if m.reason is MoveReason.DRAIN]
    assert len(drains) == 6 and p.drain_blocked == ()
    staying = [b.broker for b in brokers if b.broker != B[4]]
    target = min(
        (sum(p.loads_before[b] for b in staying) + 0.6) / 4 + SETTINGS.margin,
        SETTINGS.overload_ratio,
    )
    assert all(p.loads_after[b] <= target + 1e-9 for b in staying)
    to_last = [m for m in drains if m.destination == B[0]]
    fell_back = [m for m in drains if m.destination != B[0]]
    assert to_last and fell_back
    # Named: each bundle that went elsewhere, with where it went.
    assert sorted(p.drain_fallback) == sorted(
        (f"{m.namespace}/{m.bundle}", m.destination) for m in fell_back
    )
    # The fallbacks go to the latest to restart first: b1 before b2 before b3.
    assert {m.destination for m in fell_back} <= {B[1], B[2]}
    assert any(m.destination == B[1] for m in fell_back)


def test_the_placement_rules_hold_over_the_preference() -> None:
    # An isolation policy keeps t/ns on b3 and b2: b0 (preferred) is not allowed.
    rules = PlacementRules(
        isolation=(IsolationPolicy("iso", ("t/ns",), (B[4], B[3], B[2]), (), 0),)
    )
    brokers, bundles = cluster({B[4]: [0.05] * 2, B[3]: [0.2], B[2]: [0.3], B[1]: [0.2],
                                B[0]: [0.0]}, ns="t/ns")  # fmt: skip
    p = _plan(brokers, bundles, frozenset({B[4]}), ORDER, rules)
    drains = [m for m in p.moves if m.reason is MoveReason.DRAIN]
    assert len(drains) == 2
    assert {m.destination for m in drains} <= {B[3], B[2]}


def test_a_whole_roll_in_the_pure_model_moves_each_bundle_at_most_twice() -> None:
    n, per = 5, 8
    loads = {b: [0.5 / per] * per for b in B}  # each broker at 0.5
    brokers, bundles = cluster(loads)
    owner = {b.name: b.owner for b in bundles}
    moved: Counter[str] = Counter()
    cap = brokers[0].capacity

    def state(up: list[str]) -> tuple[list[BrokerState], list[BundleState]]:
        on = [BundleState(b.namespace, b.bundle, owner[b.name], msg_rate=b.msg_rate,
                          sessions=1, topics=1) for b in bundles]  # fmt: skip
        return (
            [broker(x, sum(s.msg_rate / 1000 for s in on if s.owner == x), cap) for x in up],
            [s for s in on if s.owner in up],
        )

    for stopping in ORDER:
        for _ in range(10):  # cycles until it owns nothing
            brokers_now, bundles_now = state(list(B))
            if not any(s.owner == stopping for s in bundles_now):
                break
            p = _plan(brokers_now, bundles_now, frozenset({stopping}), ORDER)
            for m in p.moves:
                if m.reason is MoveReason.DRAIN:
                    name = f"{m.namespace}/{m.bundle}"
                    owner[name] = m.destination
                    moved[name] += 1
            active = {b: v for b, v in p.loads_after.items() if b != stopping}
            assert max(active.values()) <= target_ratio(active, SETTINGS) + 1e-9
        assert stopping not in owner.values()  # restarted: it comes back owning nothing
    assert max(moved.values()) <= 2
    assert sum(moved.values()) <= (1 + 1 / n) * len(bundles)
    # Only the first broker's bundles moved twice (via the last broker).
    twice = {name for name, c in moved.items() if c == 2}
    first = {b.name for b in bundles if b.owner == ORDER[0]}
    assert twice <= first


def test_during_a_rolls_drain_only_an_overloaded_broker_is_relieved_to_preferred_ones() -> None:
    # b3 is overloaded beside an idle b2; but b2 restarts before b0: a bundle sent there now
    # moves again when it drains. During the roll's drain, b3 is relieved to b0 only, and
    # only down to the overload ratio (other balance moves wait for the roll's end).
    brokers, bundles = cluster({B[4]: [0.05], B[3]: [0.1] * 10, B[2]: [0.05], B[1]: [0.3],
                                B[0]: [0.3]})  # fmt: skip
    p = _plan(brokers, bundles, frozenset({B[4]}), ORDER)
    balance = [m for m in p.moves if m.reason is not MoveReason.DRAIN]
    assert balance and {m.destination for m in balance} == {B[0]}
    assert p.loads_after[B[3]] <= SETTINGS.overload_ratio + 1e-9
    assert p.loads_after[B[3]] > SETTINGS.overload_ratio - 0.1 - 1e-9  # no further
    # Without a roll the same cycle fills the idle b2 and evens b3 out to the target.
    free = decide_moves(
        "c", brokers, bundles, rules=PlacementRules(), settings=SETTINGS, now_ms=10**9,
        window_end_ms=10**9, draining=frozenset({B[4]}),
    )  # fmt: skip
    assert B[2] in {m.destination for m in free.moves if m.reason is not MoveReason.DRAIN}


def test_a_bundle_the_roll_moved_twice_gets_no_balance_move_but_is_still_drained() -> None:
    brokers, bundles = cluster({B[1]: [0.4, 0.3], B[0]: [0.0]})
    twice = [replace(b, moves_in_roll=MAX_MOVES_IN_ROLL) for b in bundles]
    free = decide_moves("c", brokers, bundles, rules=PlacementRules(), settings=SETTINGS,
                        now_ms=10**9, window_end_ms=10**9)  # fmt: skip
    assert free.moves  # b0 idle beside b1: filled
    held = decide_moves("c", brokers, twice, rules=PlacementRules(), settings=SETTINGS,
                        now_ms=10**9, window_end_ms=10**9)  # fmt: skip
    assert held.moves == ()
    drained = decide_moves("c", brokers, twice, rules=PlacementRules(), settings=SETTINGS,
                           now_ms=10**9, window_end_ms=10**9,
                           draining=frozenset({B[1]}))  # fmt: skip
    assert len([m for m in drained.moves if m.reason is MoveReason.DRAIN]) == 2
