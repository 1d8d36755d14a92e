"""`drain --wait` with the balancer down (issue 43, point 3) against the simulator and the
tests' Kafka-protocol broker: it takes the writer lease and drains the broker by itself
through the controller's rules (the placement rules, the journal, each move verified), exits
0 once the broker owns nothing, every bundle moved once; two concurrent `drain --wait`
processes never send a move twice (only the lease holder acts)."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from balancer.app.cli import build_parser
from balancer.app.commands.drain import drain_command
from balancer.app.config import load_config
from balancer.app.self_drain import SelfDrain
from balancer.controller.journal import Journal
from balancer.core.drain_marks import new_mark
from balancer.core.lease import LeaseStatus
from balancer.core.moves.placement import is_system_namespace
from balancer.kafka.drain_marks import KafkaDrainMarks
from balancer.pulsar import ClusterEndpoint, PulsarPeerGroup
from balancer.sim import RunningPeerGroup, parse_scenario, start_peer_group
from tests.kafka_broker import Broker

pytestmark = pytest.mark.kafka

ISO = "t/iso-1"


def isolated_scenario() -> dict[str, Any]:
    """Four brokers: `t/iso-1` isolated to brokers 0 and 1 (an isolation policy), `t/ns` on
    the two shared brokers."""
    return {
        "name": "self-drain",
        "seed": 5,
        "clusters": [
            {
                "name": "a",
                "brokers": 4,
                "isolation_policies": [
                    {"name": "iso", "namespaces": ["t/iso.*"], "primary": [0, 1], "min_limit": 1}
                ],
            }
        ],
        "namespaces": [
            {
                "name": "t/ns",
                "cluster": "a",
                "bundles": 8,
                "topic_groups": [{"name": "x", "count": 40, "total_msg_rate_in": 4000}],
            },
            {
                "name": ISO,
                "cluster": "a",
                "bundles": 8,
                "topic_groups": [{"name": "y", "count": 40, "total_msg_rate_in": 4000}],
            },
        ],
    }


@pytest.fixture
def group() -> Iterator[RunningPeerGroup]:
    with start_peer_group(parse_scenario(isolated_scenario())) as g:
        yield g


def write_config(tmp_path: Path, group: RunningPeerGroup, kafka: Broker) -> Path:
    name = f"self-drain-{uuid.uuid4().hex[:8]}"
    doc: dict[str, Any] = {
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers, "drain_marks_topic": name},
        "clusters": [{"name": "a", "admin_url": group.admin_urls["a"]}],
        "controller": {
            "mode": "apply",
            "journal_path": str(tmp_path / "journal.sqlite3"),
            "audit_log_path": str(tmp_path / "audit.jsonl"),
            "writer_lease": {"group": name, "topic": name, "lease_s": 10, "safety_margin_s": 2},
        },
        "moves": {"enabled": True, "drain_moves_in_flight_per_broker": 2},
    }
    path = tmp_path / "balancer.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def owned(group: RunningPeerGroup, broker: int) -> list[str]:
    return sorted(
        f"{ns.name}/{b}"
        for ns, b in group.model.brokers.owned("a", broker)
        if not is_system_namespace(ns.name)
    )


def iso_owners(group: RunningPeerGroup) -> set[int]:
    """The brokers owning a bundle of the isolated namespace (an unloaded bundle waiting for
    its clients' next lookup is nobody's)."""
    with group.model.lock:
        group.model.brokers.settle()
        ns = group.model.namespaces[ISO]
        return {owner for b, owner in ns.owners.items() if b not in ns.unowned}


def clients_reconnect(group: RunningPeerGroup) -> Any:
    """The command's sleep: simulated time passes (the modular load manager places an
    unloaded bundle at its clients' next lookup), and a little real time for the lease."""

    def sleep(_seconds: float) -> None:
        group.clock.advance(30)
        time.sleep(0.2)

    return sleep


def drain_wait(config: Path, broker: str, group: RunningPeerGroup, *extra: str) -> int:
    argv = ["drain", "--config", str(config), "--wait", "--timeout-s", "120", *extra, broker]
    return drain_command(build_parser().parse_args(argv), sleep=clients_reconnect(group))


def moves_sent(journal: Path) -> Counter[str]:
    """Bundle -> how many moves this journal sent of it."""
    read = Journal.open_read_only(journal)
    try:
        return Counter(e.target for e in read.entries() if e.kind == "move")
    finally:
        read.close()


def test_with_the_balancer_down_drain_wait_empties_the_broker_by_itself(
    tmp_path: Path, group: RunningPeerGroup, kafka: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, group, kafka)
    target = group.model.cluster("a").broker_address(0)
    before = owned(group, 0)
    assert any(b.startswith(ISO) for b in before), "broker 0 owns isolated bundles"
    assert drain_wait(config, target, group) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "balancer down" in err and "drains by itself" in err
    assert owned(group, 0) == []
    # Every bundle of the broker moved once, none of another broker.
    assert moves_sent(tmp_path / "journal.sqlite3") == Counter(before)
    # The isolation policy held: the isolated namespace went to its other primary only.
    assert iso_owners(group) == {1}


def test_two_concurrent_drain_waits_never_send_a_move_twice(
    tmp_path: Path, group: RunningPeerGroup, kafka: Broker
) -> None:
    config = write_config(tmp_path, group, kafka)
    target = group.model.cluster("a").broker_address(0)
    before = owned(group, 0)
    # Two broker pods' hooks: each its own journal (the worst case; one journal is shared
    # through its writer ids as `apply` shares `run`'s).
    journals = [tmp_path / "one.sqlite3", tmp_path / "two.sqlite3"]
    codes: list[int] = []

    def hook(journal: Path) -> None:
        codes.append(drain_wait(config, target, group, "--journal", str(journal)))

    threads = [threading.Thread(target=hook, args=(j,)) for j in journals]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert codes == [0, 0]
    assert owned(group, 0) == []
    sent = moves_sent(journals[0]) + moves_sent(journals[1])
    assert sent == Counter(before)  # each bundle moved once, by whichever held the lease
    assert iso_owners(group) == {1}


class LostAfter:
    """A writer lease held for its first `n` answers, then moved to a balancer."""

    def __init__(self, n: int) -> None:
        self.left = n

    def status(self) -> LeaseStatus:
        self.left -= 1
        if self.left >= 0:
            return LeaseStatus(True, "drain-command:me", "held", valid_for_s=5.0)
        return LeaseStatus(False, "balancer-0", "held by balancer-0")


def test_once_the_lease_moves_to_a_balancer_the_command_sends_nothing(
    tmp_path: Path, group: RunningPeerGroup, kafka: Broker
) -> None:
    path = write_config(tmp_path, group, kafka)
    config = load_config(path)
    target = group.model.cluster("a").broker_address(0)
    with (
        KafkaDrainMarks(
            bootstrap_servers=kafka.bootstrap_servers, topic=config.kafka.drain_marks_topic
        ) as marks,
        PulsarPeerGroup([ClusterEndpoint("a", group.admin_urls["a"])]) as admin,
    ):
        marks.write([new_mark("a", target, by="test", at_ms=int(time.time() * 1000))])
        drain = SelfDrain(config, admin, marks, LostAfter(0))
        try:
            for _ in range(3):
                drain.cycle("a")
                group.clock.advance(30)
        finally:
            drain.close()
    assert drain.moves_sent == [] and group.model.brokers.moves == []
    assert owned(group, 0)  # the balancer drains it now, not this command
