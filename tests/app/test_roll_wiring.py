"""A roll the operator never finished (issue 43, point 4): once every broker of its order has
restarted (each mark cleared by the restart rule after the roll started), the balancer that
holds the writer lease restores Pulsar's shedder and auto-split itself, as `roll finish`
would; a standby never does; and while the roll runs, the planner is given its order."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import pytest

from balancer.app.drain_wiring import DrainMarksView
from balancer.controller.rollout import start_rollout
from balancer.core.drain_marks import RESTART_RULE_BY, changed, new_mark
from balancer.kafka.drain_marks import KafkaDrainMarks
from tests.kafka_broker import Broker

pytestmark = pytest.mark.kafka

ORDER = ("b-2:8080", "b-1:8080", "b-0:8080")
SHED, SPLIT = "loadBalancerSheddingEnabled", "loadBalancerAutoBundleSplitEnabled"


class Config:
    """Pulsar's dynamic configuration (the switches start on, Pulsar's defaults)."""

    def __init__(self) -> None:
        self.values = {SHED: "true", SPLIT: "true"}
        self.overridden: set[str] = set()  # keys set in the configuration store

    def runtime_configuration(self, cluster: str) -> Mapping[str, str]:
        return dict(self.values)

    def set_dynamic_configuration(self, cluster: str, name: str, value: str) -> None:
        self.values[name] = value
        self.overridden.add(name)

    def dynamic_configuration(self, cluster: str) -> Mapping[str, str]:
        return {name: self.values[name] for name in self.overridden}

    def delete_dynamic_configuration(self, cluster: str, name: str) -> None:
        self.overridden.discard(name)
        self.values[name] = "true"  # broker.conf's (Pulsar's default)


def _view(store: KafkaDrainMarks, config: Config, *, holder: bool) -> DrainMarksView:
    return DrainMarksView(
        store, listed_brokers=lambda _c: ORDER, may_write=lambda: holder,
        refresh_s=0.0, now_ms=lambda: 10_000, config_admin=config,
    )  # fmt: skip


def _restarted(store: KafkaDrainMarks, broker: str, at_ms: int) -> None:
    mark = new_mark("east", broker, by="preStop", at_ms=at_ms)
    store.write([mark, changed(mark, "cleared", by=RESTART_RULE_BY, at_ms=at_ms + 1)])


def test_the_lease_holder_finishes_a_roll_once_every_broker_restarted(kafka: Broker) -> None:
    topic = f"marks-{uuid.uuid4().hex[:10]}"
    config = Config()
    with KafkaDrainMarks(bootstrap_servers=kafka.bootstrap_servers, topic=topic) as cli:
        start_rollout(cli, config, "east", ORDER, by="ops", now_ms=1_000)
        assert config.values == {SHED: "false", SPLIT: "false"}
        _restarted(cli, ORDER[0], 500)  # a restart from before the roll does not count
        _restarted(cli, ORDER[1], 2_000)
    with (
        KafkaDrainMarks(bootstrap_servers=kafka.bootstrap_servers, topic=topic) as mine,
        KafkaDrainMarks(bootstrap_servers=kafka.bootstrap_servers, topic=topic) as theirs,
    ):
        holder, standby = _view(mine, config, holder=True), _view(theirs, config, holder=False)
        holder.check("east")
        assert holder.rollout_order("east") == ORDER  # the planner's order while it rolls
        assert config.values == {SHED: "false", SPLIT: "false"}  # not every broker back
        _restarted(mine, ORDER[0], 3_000)
        _restarted(mine, ORDER[2], 4_000)
        standby.check("east")
        assert config.values == {SHED: "false", SPLIT: "false"}  # a standby never writes
        holder.check("east")
        assert config.values == {SHED: "true", SPLIT: "true"}
        assert holder.rollout_order("east") == ()  # finished
        rollout = mine.rollout("east")
        assert rollout is not None and rollout.state == "finished"
