"""`plan` and `apply` read the drain marks (issue 43, points 2 and 3): `apply` refuses a move
whose destination was marked draining since the plan was saved; `plan` shows the brokers
marked draining, and says the marks are unknown (without hanging) when Kafka is not
configured or does not answer."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from balancer.app.cli import build_parser, main
from balancer.app.commands.apply import apply_command
from balancer.app.commands.plan import EXIT_PROPOSALS
from balancer.core.drain_marks import new_mark
from balancer.kafka.drain_marks import KafkaDrainMarks
from balancer.sim import start_peer_group
from tests.app.test_plan_drain import CLUSTER, even_scenario, owned, write_config
from tests.kafka_broker import Broker


def with_kafka(config: Path, bootstrap: str) -> str:
    topic = f"marks-{uuid.uuid4().hex[:10]}"
    data = yaml.safe_load(config.read_text())
    data["kafka"] = {"bootstrap_servers": bootstrap, "drain_marks_topic": topic}
    config.write_text(yaml.safe_dump(data))
    return topic


def mark(kafka: Broker, topic: str, broker: str) -> None:
    with KafkaDrainMarks(bootstrap_servers=kafka.bootstrap_servers, topic=topic) as store:
        store.write([new_mark(CLUSTER, broker, by="test", at_ms=int(time.time() * 1000))])


@pytest.mark.kafka
def test_apply_refuses_a_move_to_a_broker_marked_draining_since_the_plan(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kafka: Broker
) -> None:
    with start_peer_group(even_scenario()) as group:
        config = write_config(group, tmp_path)
        topic = with_kafka(config, kafka.bootstrap_servers)
        c = group.model.cluster(CLUSTER)
        target = c.broker_address(0)
        plan = tmp_path / "drain.json"
        argv = ["plan", "--interval-s", "0", "--config", str(config), "--drain", target]
        assert main([*argv, "--save", str(plan)]) == EXIT_PROPOSALS
        capsys.readouterr()
        actions = json.loads(plan.read_text())["actions"]
        late = actions[0]["destination"]
        index = next(i for i in range(3) if c.broker_address(i) == late)
        to_late = [a for a in actions if a["destination"] == late]
        before = owned(group, index)
        mark(kafka, topic, late)  # marked draining after the plan was saved
        args = build_parser().parse_args(
            ["apply", str(plan), "--config", str(config), "--yes", "-o", "json"]
        )
        code = apply_command(args, sleep=group.clock.advance)
        report: dict[str, Any] = json.loads(capsys.readouterr().out)
        group.clock.advance(60)
        after = owned(group, index)
    stale = {i["id"]: i for i in report["items"] if i["status"] == "stale"}
    assert {a["id"] for a in to_late} == set(stale)
    assert all("is draining" in stale[a["id"]]["detail"] for a in to_late)
    assert code == 3, report  # those refused as stale, the rest applied
    assert set(after) <= set(before)  # the broker marked draining got no bundle


@pytest.mark.kafka
def test_plan_shows_the_brokers_marked_draining(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kafka: Broker
) -> None:
    with start_peer_group(even_scenario()) as group:
        config = write_config(group, tmp_path)
        topic = with_kafka(config, kafka.bootstrap_servers)
        marked = group.model.cluster(CLUSTER).broker_address(2)
        mark(kafka, topic, marked)
        code = main(["plan", "--interval-s", "0", "--config", str(config), "-o", "json"])
        out, err = capsys.readouterr()
        main(["plan", "--interval-s", "0", "--config", str(config)])
        text, _ = capsys.readouterr()
    assert code == EXIT_PROPOSALS, err
    doc = json.loads(out)
    assert doc["marked"] == [{"cluster": CLUSTER, "broker": marked}]
    assert doc["drain_marks"] == "read"
    assert doc["draining"] == [{"cluster": CLUSTER, "broker": marked}]
    assert {m["source"] for m in doc["moves"] if m["reason"] == "drain"} == {marked}
    assert f"{marked} (draining)" in text


@pytest.mark.parametrize("kafka_section", [False, True], ids=["no-kafka", "kafka-away"])
def test_plan_says_the_marks_are_unknown_when_kafka_is_absent_or_away(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kafka_section: bool
) -> None:
    with start_peer_group(even_scenario()) as group:
        config = write_config(group, tmp_path)
        if kafka_section:
            with_kafka(config, "127.0.0.1:1")  # nothing listens there
        code = main(["plan", "--interval-s", "0", "--config", str(config), "-o", "json"])
        out, err = capsys.readouterr()
    assert code in (0, 1), err  # a plan, whatever the marks
    doc = json.loads(out)
    assert doc["marked"] == [] and doc["draining"] == []
    assert doc["drain_marks"].startswith("unknown (")
    assert ("no kafka section" in doc["drain_marks"]) is not kafka_section
