"""A peer group of two clusters, each the home of one namespace of tenant `acme`: what the
shared configuration store tests (sim, census) run against."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from balancer.sim import RunningPeerGroup, parse_scenario, start_peer_group

TWO_HOMES: dict[str, Any] = {
    "name": "two-homes",
    "seed": 1,
    "clusters": [
        {"name": "east", "peers": ["west"]},
        {"name": "west", "peers": ["east"]},
    ],
    "namespaces": [
        {"name": "acme/orders", "cluster": "east", "bundles": 2, "topic_groups": [{"name": "o"}]},
        {"name": "acme/audit", "cluster": "west", "bundles": 2, "topic_groups": [{"name": "a"}]},
    ],
}


@contextmanager
def two_homes() -> Iterator[RunningPeerGroup]:
    with start_peer_group(parse_scenario(TWO_HOMES)) as running:
        yield running
