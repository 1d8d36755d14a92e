"""Builders shared by the move decision's tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from balancer.core.broker_load import BrokerCapacity
from balancer.core.bundles import BundleRange
from balancer.core.moves.decide import decide_moves
from balancer.core.moves.model import (
    BrokerState,
    BundleState,
    MovePlan,
    MoveSettings,
    PlacementRules,
)

CAP = BrokerCapacity(max_msg_rate=1000.0, max_throughput_bytes=1e9)  # 10 msg/s = 0.01


def broker(name: str, load: float, cap: BrokerCapacity = CAP, **kw: object) -> BrokerState:
    return BrokerState(broker=name, load_ratio=load, capacity=cap, **kw)  # type: ignore[arg-type]


def bundle(ns: str, i: int, owner: str, msg_rate: float, **kw: object) -> BundleState:
    """Bundle i of 256 equal ranges of namespace `ns`; msg_rate 100 is 0.1 on CAP."""
    lower = i * 0x01000000
    upper = min(lower + 0x01000000, 0xFFFFFFFF)
    return BundleState(ns, BundleRange(lower, upper), owner, msg_rate=msg_rate, **kw)  # type: ignore[arg-type]


def cluster(
    owned: dict[str, list[float]], ns: str = "t/ns"
) -> tuple[list[BrokerState], list[BundleState]]:
    """Brokers whose load is the sum of their bundles' loads (msg rates given as load x 1000)."""
    brokers, bundles, i = [], [], 0
    for name, loads in owned.items():
        brokers.append(broker(name, sum(loads)))
        for load in loads:
            bundles.append(bundle(ns, i, name, load * 1000.0, sessions=1, topics=1))
            i += 1
    return brokers, bundles


def decide(
    brokers: Sequence[BrokerState],
    bundles: Sequence[BundleState],
    *,
    rules: PlacementRules | None = None,
    settings: MoveSettings | None = None,
    **kw: Any,
) -> MovePlan:
    """`decide_moves` on cluster "c" at a fixed time; keywords go through (draining, ...)."""
    return decide_moves(
        "c", brokers, bundles, rules=rules or PlacementRules(), settings=settings or MoveSettings(),
        now_ms=10**9, window_end_ms=10**9, **kw,
    )  # fmt: skip
