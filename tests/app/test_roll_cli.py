"""`pulsar-balancer roll` (issue 43, point 4) against the simulator and the tests' Kafka-
protocol broker: start records the order and the switches' values on Kafka, then pauses
Pulsar's shedder and auto-split (`BrokersBase.updateDynamicConfiguration` in the simulator);
finish restores them as they were, also when whatever started the roll crashed in between."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from balancer.app.cli import main
from balancer.controller.rollout import finish_rollout, start_rollout
from balancer.kafka.drain_marks import KafkaDrainMarks
from balancer.pulsar import ClusterEndpoint, PulsarPeerGroup
from balancer.sim.group import RunningPeerGroup
from tests.app.marks_cli import read_store, write_marks_config
from tests.kafka_broker import Broker
from tests.sim.broker_group import one_namespace, started

pytestmark = pytest.mark.kafka

SHED, SPLIT = "loadBalancerSheddingEnabled", "loadBalancerAutoBundleSplitEnabled"


@pytest.fixture
def group(request: pytest.FixtureRequest) -> Iterator[RunningPeerGroup]:
    with started(request, one_namespace("roll-cli", seed=3, topics=10)) as g:
        yield g


@pytest.fixture
def admin(group: RunningPeerGroup) -> Iterator[PulsarPeerGroup]:
    with PulsarPeerGroup([ClusterEndpoint("a", group.admin_urls["a"])]) as client:
        yield client


@pytest.fixture
def topic() -> str:
    return f"marks-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def config(tmp_path: Path, group: RunningPeerGroup, kafka: Broker, topic: str) -> Path:
    return write_marks_config(tmp_path, group.admin_urls["a"], kafka, topic)


def _store(kafka: Broker, topic: str) -> KafkaDrainMarks:
    return read_store(kafka, topic)


def _switches(admin: PulsarPeerGroup) -> tuple[str, str]:
    runtime = admin.runtime_configuration("a")
    return runtime[SHED], runtime[SPLIT]


def test_start_pauses_and_finish_restores_the_switches(
    config: Path, admin: PulsarPeerGroup, kafka: Broker, topic: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    order = list(reversed(admin.list_brokers("a")))
    assert _switches(admin) == ("true", "true")
    argv = ["roll", "start", "--config", str(config), "--order", ",".join(order), "--by", "ops"]
    assert main(argv) == 0
    assert _switches(admin) == ("false", "false")
    with _store(kafka, topic) as store:
        rollout = store.rollout("a")
        assert rollout is not None and rollout.rolling
        assert rollout.order == tuple(order) and rollout.started_by == "ops"
        assert rollout.paused == {SHED: "true", SPLIT: "true"}
    # Run twice (a Job retried): nothing changes, the values to restore stay "true".
    assert main(argv) == 0
    with _store(kafka, topic) as store:
        again = store.rollout("a")
        assert again is not None and again.paused == {SHED: "true", SPLIT: "true"}
    capsys.readouterr()
    assert main(["roll", "status", "--config", str(config), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["rollout"]["state"] == "rolling"
    assert main(["roll", "finish", "--config", str(config)]) == 0
    assert _switches(admin) == ("true", "true")
    with _store(kafka, topic) as store:
        done = store.rollout("a")
        assert done is not None and done.state == "finished"
    assert main(["roll", "finish", "--config", str(config)]) == 0  # nothing left: no change
    assert _switches(admin) == ("true", "true")


def test_a_switch_that_was_off_stays_off_after_the_roll(
    config: Path, admin: PulsarPeerGroup
) -> None:
    admin.set_dynamic_configuration("a", SHED, "false")  # the operator had it off
    order = ",".join(admin.list_brokers("a"))
    assert main(["roll", "start", "--config", str(config), "--order", order]) == 0
    assert main(["roll", "finish", "--config", str(config)]) == 0
    assert _switches(admin) == ("false", "true")


def test_a_switch_from_broker_conf_is_left_without_an_override_after_the_roll(
    config: Path, admin: PulsarPeerGroup, kafka: Broker, topic: str
) -> None:
    # Neither switch overridden (broker.conf's values): the finish deletes the overrides the
    # pause made (`BrokersBase.deleteDynamicConfiguration`), so a later change of broker.conf
    # applies again; the switch the operator had overridden keeps its override.
    admin.set_dynamic_configuration("a", SPLIT, "true")
    assert admin.dynamic_configuration("a") == {SPLIT: "true"}
    order = ",".join(admin.list_brokers("a"))
    assert main(["roll", "start", "--config", str(config), "--order", order]) == 0
    with _store(kafka, topic) as store:
        rollout = store.rollout("a")
        assert rollout is not None and rollout.unset == (SHED,)
    assert admin.dynamic_configuration("a") == {SHED: "false", SPLIT: "false"}
    assert main(["roll", "finish", "--config", str(config)]) == 0
    assert admin.dynamic_configuration("a") == {SPLIT: "true"}
    assert _switches(admin) == ("true", "true")
    assert main(["roll", "finish", "--config", str(config)]) == 0  # nothing left to do
    assert admin.dynamic_configuration("a") == {SPLIT: "true"}


def test_the_default_order_needs_ordinals_and_a_broker_must_be_listed(
    config: Path, admin: PulsarPeerGroup, capsys: pytest.CaptureFixture[str]
) -> None:
    # The simulator's ids are 127.0.0.1:port: no StatefulSet ordinal to order them by.
    assert main(["roll", "start", "--config", str(config)]) == 2
    assert "give the restart order" in capsys.readouterr().err
    assert main(["roll", "start", "--config", str(config), "--order", "127.0.0.1:1"]) == 2
    assert "does not list 127.0.0.1:1" in capsys.readouterr().err
    assert _switches(admin) == ("true", "true")  # nothing paused


class _CrashAfterFirstWrite:
    """Pulsar's admin as seen by a `roll start` that dies after pausing the shedder."""

    def __init__(self, admin: PulsarPeerGroup) -> None:
        self.admin = admin
        self.writes = 0

    def runtime_configuration(self, cluster: str) -> Mapping[str, str]:
        return self.admin.runtime_configuration(cluster)

    def dynamic_configuration(self, cluster: str) -> Mapping[str, str]:
        return self.admin.dynamic_configuration(cluster)

    def delete_dynamic_configuration(self, cluster: str, name: str) -> None:
        self.admin.delete_dynamic_configuration(cluster, name)

    def set_dynamic_configuration(self, cluster: str, name: str, value: str) -> None:
        if self.writes == 1:
            raise KeyboardInterrupt("killed")  # the process dies mid-way
        self.writes += 1
        self.admin.set_dynamic_configuration(cluster, name, value)


def test_a_crash_in_the_middle_is_restored_by_a_later_finish(
    config: Path, admin: PulsarPeerGroup, kafka: Broker, topic: str
) -> None:
    order = tuple(admin.list_brokers("a"))
    with _store(kafka, topic) as store, pytest.raises(KeyboardInterrupt):
        start_rollout(store, _CrashAfterFirstWrite(admin), "a", order, by="job", now_ms=1)
    assert _switches(admin) == ("false", "true")  # half paused, the process gone
    # A new process (the retried Job, or the operator): starting again must not take the
    # paused shedder for the value to restore.
    with _store(kafka, topic) as store:
        _, started_now = start_rollout(store, admin, "a", order, by="job", now_ms=2)
        assert started_now is False
    assert _switches(admin) == ("false", "false")  # the rest of the pause done
    # Another new process finishes: both back as they were before the first start.
    with _store(kafka, topic) as store:
        restored = finish_rollout(store, admin, "a", by="ops", now_ms=3)
        assert restored is not None
    assert _switches(admin) == ("true", "true")
