"""Issue 32: controller errors and unread clusters show in metrics and on /readyz.

The app is built (not started): its readiness checks and batch handler are the real ones.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from balancer.app.config import BalancerConfig
from balancer.app.wiring import BalancerApp
from balancer.collector.service import Collector
from balancer.collector.targets import Target
from tests.app.test_lone_hot_run import report


@pytest.fixture
def app(tmp_path: Path) -> Iterator[BalancerApp]:
    config = BalancerConfig.embedded_default(
        bootstrap_servers=["127.0.0.1:9"],
        clusters=[("east", "http://127.0.0.1:9"), ("west", "http://127.0.0.1:9")],
        state_dir=tmp_path,
    )
    built = BalancerApp(config)
    try:
        yield built
    finally:
        built.stop()


def _value(app: BalancerApp, name: str) -> float | None:
    return app.registry.get_sample_value(name)


def test_controller_errors_are_counted_and_fail_readiness_after_n_in_a_row(
    app: BalancerApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = {"on": True}
    real_handle = app.controller.handle

    def handle(batch_report: object) -> None:
        if failing["on"]:
            raise OSError(28, "No space left on device")
        real_handle(batch_report)  # type: ignore[arg-type]

    monkeypatch.setattr(app.controller, "handle", handle)
    limit = app.config.controller.unready_after_errors
    assert limit == 3
    for batch in range(limit - 1):
        app.handler.handle(report(batch, 100.0))
        assert app.controller_ok()
    app.handler.handle(report(limit - 1, 100.0))
    assert not app.controller_ok()
    assert _value(app, "pulsar_balancer_controller_errors_total") == limit
    assert _value(app, "pulsar_balancer_controller_consecutive_errors") == limit
    failing["on"] = False  # the volume was freed: the next batch succeeds
    app.handler.handle(report(limit, 100.0))
    assert app.controller_ok()
    assert _value(app, "pulsar_balancer_controller_consecutive_errors") == 0
    assert _value(app, "pulsar_balancer_controller_errors_total") == limit


class _Sink:
    def send(self, *, key: bytes, value: bytes, events: int = 1) -> None:
        pass

    def flush(self) -> None:
        pass


def test_a_cluster_not_read_for_n_intervals_is_named_on_readyz(app: BalancerApp) -> None:
    interval_s = app.config.collector.interval_s
    max_age_s = app.config.collector.unread_intervals * interval_s
    east, west = app._cluster_read_check("east"), app._cluster_read_check("west")
    assert east() and west()  # within the start's grace
    app._started_wall_s = time.time() - max_age_s - 1  # started long ago, nothing read
    assert not east() and not west()
    app.collector = Collector(
        targets=[Target("east"), Target("west")],
        fetch=lambda t: [],  # an answer with no topics is still an answer read
        sink=_Sink(),
    )
    app.collector.poll_once([Target("east")])
    assert east() and not west()
