"""One cluster of three brokers with one namespace of four bundles: what the broker route
tests (simulator and client) run against. A test asks for another cluster with
`@pytest.mark.parametrize("group", [doc], indirect=True)`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from balancer.sim import RunningPeerGroup, parse_scenario, start_peer_group

NS = "t/ns"
FIRST = "0x00000000_0x40000000"  # the namespace's first bundle


def one_namespace(
    name: str, *, seed: int, topics: int, namespace: dict[str, Any] | None = None, **cluster: Any
) -> dict[str, Any]:
    """Cluster `a` of three brokers (`cluster` keys added) and namespace NS on it: four
    bundles, `topics` topics of 100 msg/s in each (`namespace` keys added)."""
    return {
        "name": name,
        "seed": seed,
        "clusters": [{"name": "a", "brokers": 3, **cluster}],
        "namespaces": [
            {
                "name": NS,
                "cluster": "a",
                "bundles": 4,
                **(namespace or {}),
                "topic_groups": [{"name": "x", "count": topics, "total_msg_rate_in": 100 * topics}],
            }
        ],
    }


@contextmanager
def started(request: pytest.FixtureRequest, default: dict[str, Any]) -> Iterator[RunningPeerGroup]:
    """The group of the test's `group` parameter, else of `default`."""
    doc = getattr(request, "param", None) or default
    with start_peer_group(parse_scenario(doc)) as group:
        yield group
