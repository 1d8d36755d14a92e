"""Drain progress (issue 43, point 2): bundles left per draining broker, drains started and
finished, as the planner feeds them each cycle and the exporter shows them."""

from __future__ import annotations

from itertools import pairwise

from prometheus_client import CollectorRegistry

from balancer.controller.drain_progress import DrainProgress
from balancer.ops.exporter import BalancerMetrics
from tests.controller.test_drain_pacing import Rig

HB = "pulsar/east/a:1/0x00000000_0xffffffff"


def test_bundles_left_started_and_finished() -> None:
    p = DrainProgress()
    owners = {"t/ns/0x0_0x1": "a:1", "t/ns/0x1_0x2": "a:1", "t/ns/0x2_0x3": "b:1", HB: "a:1"}
    read = {"a:1", "b:1"}
    p.observe("east", frozenset({"a:1"}), owners, read)
    assert p.bundles_left("east") == {"a:1": 2}  # the heartbeat never moves
    assert p.take_counts("east") == (1, 0)
    # a:1's poll failed: its count stays, nothing finished.
    p.observe("east", frozenset({"a:1"}), {"t/ns/0x2_0x3": "b:1"}, {"b:1"})
    assert p.bundles_left("east") == {"a:1": 2}
    assert p.take_counts("east") == (0, 0)
    p.observe("east", frozenset({"a:1"}), {HB: "a:1", "t/ns/0x0_0x1": "b:1"}, read)
    assert p.bundles_left("east") == {"a:1": 0}
    assert p.take_counts("east") == (0, 1)
    p.observe("east", frozenset({"a:1"}), {HB: "a:1"}, read)
    assert p.take_counts("east") == (0, 0)  # finished once
    p.observe("east", frozenset(), {HB: "a:1"}, read)  # unmarked
    assert p.bundles_left("east") == {}
    p.observe("east", frozenset({"a:1"}), {"t/ns/0x0_0x1": "a:1"}, read)  # marked anew
    assert p.take_counts("east") == (1, 0)


def test_the_planner_feeds_progress_until_the_broker_is_empty() -> None:
    rig = Rig(frozenset({"a:1"}), in_flight=4, per_minute=8)
    t = 600_000
    seen = []
    for _ in range(6):
        rig.cycle(t)
        seen.append(rig.planner.drain_progress.bundles_left("c")["a:1"])
        t += 30_000
    # a:1 owned 12: the poll of each cycle shows what the previous cycles' moves left.
    assert seen[0] == 12 and seen[-1] == 0
    assert all(a >= b for a, b in pairwise(seen))
    assert rig.planner.drain_progress.take_counts("c") == (1, 1)


def test_the_exporter_shows_drain_progress() -> None:
    registry = CollectorRegistry()
    metrics = BalancerMetrics(registry, limits=lambda c, n: None, process_metrics=False)
    metrics.register_cluster("east")
    metrics.move_path.set_drains("east", {"a:1": 5, "c:1": 2}, 2, 0)
    metrics.move_path.set_drains("east", {"a:1": 3}, 0, 1)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("pulsar_balancer_drain_bundles_left", cluster="east", broker="a:1") == 3
    assert value("pulsar_balancer_drain_bundles_left", cluster="east", broker="c:1") is None
    assert value("pulsar_balancer_drain_started_total", cluster="east") == 2
    assert value("pulsar_balancer_drain_finished_total", cluster="east") == 1
