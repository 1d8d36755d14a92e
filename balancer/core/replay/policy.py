"""What a replayed policy is: a name, a description, and a step per closed window that
decides its actions on its own layout, applies them to it, and returns them.

The engine (`balancer.app.replay`) drives every policy alike, per closed window in event-time
order:
1. `layout.follow(context)` for each cluster whose round context is new (namespaces created
   and brokers gone in the recording apply to every policy);
2. `actions = policy.step(window, layout)`: the policy reads the window's topic loads rolled
   up onto ITS layout (`layout.bundle_loads(window)`, `layout.broker_loads(window)`), decides,
   changes the layout (`apply_split`, `apply_move`) and returns what it did, each action
   stamped with the window's end (event time) and its `sessions_moved`;
3. `layout.sample(window)`: the window as the changed layout carries it, for the report.

A policy keeps its own state between windows (hit counts, cooldowns, histories); it never
reads a clock: `window.window_end_ms` is the time.

Purely computational, with no side effects.
"""

from __future__ import annotations

from typing import Protocol

from balancer.core.bundles import BundleRange
from balancer.core.replay.layout import ReplayLayout
from balancer.core.replay.result import ReplayAction
from balancer.core.replay.window import ReplayWindow


class Policy(Protocol):
    """A policy replayed over a recording."""

    @property
    def name(self) -> str: ...  # POLICY_OURS, POLICY_PULSAR_*, or a name given with --config

    @property
    def description(self) -> str: ...  # for the report: what ran, with which settings

    def step(self, window: ReplayWindow, layout: ReplayLayout) -> list[ReplayAction]:
        """Decide on one closed window, apply the actions to `layout`, return them in the
        order applied."""
        ...


def sessions_in(window: ReplayWindow, cluster: str, bundle_key: str) -> int:
    """Producers + consumers of the window's topics in a bundle: the clients an unload of it
    reconnects (`ReplayAction.sessions_moved`)."""
    namespace, _, text = bundle_key.rpartition("/")
    load = window.bundle_load(cluster, namespace, BundleRange.parse(text))
    return load.session_count if load is not None else 0
