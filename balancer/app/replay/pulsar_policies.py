"""Pulsar's own load managers as replay policies (`balancer.core.replay.pulsar_*`, each
naming the Java class it copies), driven by the engine like `ours`: each on its own
`ReplayLayout`, started from the recording's first round."""

from __future__ import annotations

from balancer.app.config import BalancerConfig
from balancer.app.replay.engine import ReplayPolicy

# Filled once the core's Pulsar policies are in (issue 44: wt-rpol).
PULSAR_POLICIES: tuple[str, ...] = ()


def pulsar_policy(name: str, config: BalancerConfig) -> ReplayPolicy:
    raise ValueError(f"no Pulsar policy named {name!r}")
