"""`plan` polls brokers through the collector's rounds (issue 41 point 2): the brokers of a
cluster are asked at once, and a broker that does not answer by the round's deadline (the
collector's, `collector.interval_s`) fails its cluster with a timeout naming the broker
instead of holding `plan` for the admin client's whole timeout each sample."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from balancer.app.commands.plan import live_plan
from balancer.app.config import BalancerConfig
from balancer.sim import start_peer_group

E2E_SCENARIO = Path("tests/e2e/scenario.yaml")  # east and west, two brokers each
WAIT_S = 10.0  # how long a held broker-stats request waits at most (a test never needs it)


def config_for(group: Any, **sections: Any) -> BalancerConfig:
    return BalancerConfig.from_mapping(
        {
            "clusters": [{"name": n, "admin_url": u} for n, u in group.admin_urls.items()],
            **sections,
        }
    )


def hold_broker_stats(group: Any, hold: Any) -> None:
    """Run `hold(cluster, broker index)` in the simulator's handler of every
    broker-stats/topics request, before it is answered."""
    count = group.model.count_request

    def counting(cluster: str, route: str, broker: int | None = None) -> None:
        count(cluster, route, broker)
        if route == "broker_stats" and broker is not None:
            hold(cluster, broker)

    group.model.count_request = counting


def test_the_brokers_of_a_cluster_are_asked_at_once() -> None:
    """Both brokers of east must be in their broker-stats request together to get past the
    barrier: asked one after the other, the first would wait it out and east would fail."""
    barrier = threading.Barrier(2, timeout=WAIT_S)
    with start_peer_group(E2E_SCENARIO) as group:
        hold_broker_stats(group, lambda c, b: barrier.wait() if c == "east" else None)
        live = live_plan(
            config_for(group), samples=2, interval_s=0, sleep=lambda s: None, allows=lambda n: True
        )
    assert live.errors == {}
    assert {o.cluster for o in live.plan.offloads} == {"east"}


def test_a_broker_silent_past_the_round_deadline_fails_its_cluster_naming_it() -> None:
    """A broker that answers only after the round's deadline: its cluster is left out whole
    with a timeout naming the broker, and the other cluster is planned. (The request waits
    far less than the client's timeout: before, `plan` waited for it and planned east.)"""
    released = threading.Event()
    with start_peer_group(E2E_SCENARIO) as group:
        slow = group.broker_urls["east"][1].split("://", 1)[1]
        hold_broker_stats(
            group, lambda c, b: released.wait(WAIT_S) if (c, b) == ("east", 1) else None
        )
        config = config_for(group, collector={"interval_s": 0.5})
        try:
            live = live_plan(
                config, samples=2, interval_s=0, sleep=lambda s: None, allows=lambda n: True
            )
        finally:
            released.set()
    assert list(live.errors) == ["east"]
    error = live.errors["east"]
    assert slow in error and "timed out" in error and "0.5 s" in error, error
    assert live.plan.offloads == () and {s.cluster for s in live.plan.splits} == {"west"}
