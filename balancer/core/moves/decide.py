"""The move decision: which bundles go to which brokers so that every broker is within its
target, in the fewest moves and with the least load and sessions moved.

Purely computational, with no side effects; time is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from balancer.core.decisions import SplitDecision
from balancer.core.moves.model import (
    BrokerState,
    BundleState,
    MovePlan,
    MoveSettings,
    PlacementRules,
)


def is_balanced(loads: Mapping[str, float], settings: MoveSettings) -> bool:
    """Every broker within `mean +- margin` and none over `overload_ratio` (see MoveSettings)."""
    raise NotImplementedError


def decide_moves(
    cluster: str,
    brokers: Sequence[BrokerState],
    bundles: Sequence[BundleState],
    *,
    rules: PlacementRules,
    settings: MoveSettings,
    now_ms: int,
    window_end_ms: int,
    splits: Sequence[SplitDecision] = (),
) -> MovePlan:
    """The moves of one cluster for one window. `splits` are the split decisions of the same
    cycle: each parent bundle is replaced by its children (on the parent's owner, with the
    loads the split computed), and children may be given destinations (reason SPLIT_CHILD)."""
    raise NotImplementedError
