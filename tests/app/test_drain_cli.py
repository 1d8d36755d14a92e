"""`pulsar-balancer drain` (issue 43, points 2 and 3) against the simulator and the tests'
Kafka-protocol broker: marks, unmarks, lists; `--wait` exits 0 once the broker owns no
bundle, 3 on timeout naming the bundles left, 2 on error; safe to run twice."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from balancer.app.cli import build_parser, main
from balancer.app.commands.drain import drain_command
from balancer.app.drain_wiring import BalancerLiveness
from balancer.core.moves.placement import is_system_namespace
from balancer.kafka.drain_marks import KafkaDrainMarks
from balancer.pulsar import ClusterEndpoint, PulsarPeerGroup
from balancer.sim.group import RunningPeerGroup
from tests.app.marks_cli import read_store, write_marks_config
from tests.kafka_broker import Broker
from tests.sim.broker_group import NS, one_namespace, started

pytestmark = pytest.mark.kafka


@pytest.fixture
def group(request: pytest.FixtureRequest) -> Iterator[RunningPeerGroup]:
    with started(request, one_namespace("drain-cli", seed=7, topics=20)) as g:
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


def _marks(kafka: Broker, topic: str) -> KafkaDrainMarks:
    return read_store(kafka, topic)


def _owner_of_most(admin: PulsarPeerGroup) -> tuple[str, list[str]]:
    owned = {}
    for b in admin.list_brokers("a"):
        bundles = admin.owned_bundles("a", b).items()
        owned[b] = [n for n, s in bundles if not is_system_namespace(s.namespace)]
    broker = max(owned, key=lambda b: len(owned[b]))
    assert owned[broker], "the scenario leaves some broker with bundles"
    return broker, owned[broker]


def _down(_config: object) -> BalancerLiveness:
    return BalancerLiveness("up", "stub: a balancer is running")


def _run(argv: list[str], **kwargs: Any) -> int:
    args = build_parser().parse_args(["drain", *argv])
    kwargs.setdefault("probe", _down)
    return drain_command(args, **kwargs)


def test_a_broker_the_cluster_does_not_list_is_an_error(
    config: Path, kafka: Broker, topic: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["drain", "--config", str(config), "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "does not list 127.0.0.1:1" in err and "Traceback" not in err
    assert _marks(kafka, topic).marks() == ()  # nothing written
    assert main(["drain", "--config", str(config), "--undo", "127.0.0.1:1"]) == 2
    assert main(["drain", "--config", str(config), "--cluster", "nope", "127.0.0.1:1"]) == 2


def test_mark_list_and_undo(
    config: Path, admin: PulsarPeerGroup, kafka: Broker, topic: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    broker = admin.list_brokers("a")[0]
    assert main(["drain", "--config", str(config), "--by", "ops", broker]) == 0
    assert _marks(kafka, topic).draining("a") == {broker}
    capsys.readouterr()
    assert main(["drain", "--config", str(config), "--list", "-o", "json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)["marks"]
    assert (listed["broker"], listed["state"], listed["marked_by"]) == (broker, "draining", "ops")
    assert main(["drain", "--config", str(config), "--undo", broker]) == 0
    assert _marks(kafka, topic).draining("a") == frozenset()
    assert main(["drain", "--config", str(config), "--list"]) == 0
    assert "cleared" in capsys.readouterr().out


def test_wait_times_out_with_exit_3_naming_the_bundles_left(
    config: Path, admin: PulsarPeerGroup, capsys: pytest.CaptureFixture[str]
) -> None:
    broker, bundles = _owner_of_most(admin)
    slept: list[float] = []
    code = _run(["--config", str(config), "--wait", "--timeout-s", "0", broker], sleep=slept.append)
    assert code == 3
    out = capsys.readouterr().out
    assert f"{broker} still owns {len(bundles)} bundle(s)" in out
    assert all(b in out for b in bundles)


def test_wait_exits_0_once_the_broker_owns_nothing_and_is_safe_to_run_twice(
    config: Path, admin: PulsarPeerGroup, kafka: Broker, topic: str
) -> None:
    broker, bundles = _owner_of_most(admin)
    others = [b for b in admin.list_brokers("a") if b != broker]
    moved: list[str] = []

    def balancer_moves_one(_seconds: float) -> None:
        # What the balancer does meanwhile: one bundle off the draining broker per cycle.
        name = bundles[len(moved)]
        admin.unload_bundle(NS, name.rsplit("/", 1)[1], destination_broker=others[0])
        moved.append(name)

    code = _run(
        ["--config", str(config), "--wait", "--timeout-s", "3600", "--interval-s", "1", broker],
        sleep=balancer_moves_one,
    )
    assert code == 0
    assert moved == bundles  # it waited until the last one had gone
    assert _marks(kafka, topic).draining("a") == {broker}
    # The hook runs again (a retried preStop): still 0, and the mark is not written twice.
    assert _run(["--config", str(config), "--wait", broker], sleep=balancer_moves_one) == 0
    assert _marks(kafka, topic).records_read == 1


def test_wait_with_kafka_unreachable_is_an_error(
    tmp_path: Path, group: RunningPeerGroup, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = {
        "kafka": {"bootstrap_servers": "127.0.0.1:9"},
        "clusters": [{"name": "a", "admin_url": group.admin_urls["a"]}],
    }
    path = tmp_path / "balancer.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["drain", "--config", str(path), "--wait", "127.0.0.1:1"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_wait_with_no_balancer_running_says_so_and_still_times_out(
    config: Path, admin: PulsarPeerGroup, capsys: pytest.CaptureFixture[str]
) -> None:
    # This config runs no writer lease (dry-run): without one, the command cannot be the
    # single writer, so it does not drain by itself; it says why and waits.
    broker, _ = _owner_of_most(admin)

    def down(_config: object) -> BalancerLiveness:
        return BalancerLiveness("down", "no balancer holds the writer lease of group g")

    code = _run(
        ["--config", str(config), "--wait", "--timeout-s", "0", broker],
        sleep=lambda _s: None,
        probe=down,
    )
    assert code == 3
    err = capsys.readouterr().err
    assert "balancer down: no balancer holds the writer lease" in err
    assert "cannot drain by itself (the config runs no writer lease" in err
