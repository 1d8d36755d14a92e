"""The controller's view of the drain marks (issue 43, points 2 and 3): `draining(cluster)`
re-reads the marks, applies the restart rule (written only by the lease holder), keeps the
last marks when Kafka is away; and whether a balancer holds the writer lease."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from balancer.app.config import BalancerConfig
from balancer.app.drain_wiring import DrainMarksView, probe_balancer
from balancer.core.drain_marks import RESTART_RULE_BY, DrainMark, new_mark
from balancer.kafka.drain_marks import KafkaDrainMarks
from balancer.kafka.lease import KafkaWriterLease
from tests.kafka_broker import Broker

pytestmark = pytest.mark.kafka

B1, B2 = "b1:8080", "b2:8080"


class Clock:
    def __init__(self) -> None:
        self.s = 0.0

    def __call__(self) -> float:
        return self.s


def _store(kafka: Broker, topic: str) -> KafkaDrainMarks:
    return KafkaDrainMarks(bootstrap_servers=kafka.bootstrap_servers, topic=topic)


def _view(
    store: KafkaDrainMarks, listed: list[tuple[str, ...]], *, holder: bool, clock: Clock
) -> DrainMarksView:
    def list_brokers(cluster: str) -> tuple[str, ...]:
        assert cluster == "east"
        return listed[0]

    return DrainMarksView(
        store, listed_brokers=list_brokers, may_write=lambda: holder,
        monotonic=clock, now_ms=lambda: 5_000,
    )  # fmt: skip


def test_a_restarted_broker_is_unmarked_once_back_and_a_standby_sees_it(kafka: Broker) -> None:
    topic = f"marks-{uuid.uuid4().hex[:10]}"
    with _store(kafka, topic) as cli:
        cli.write([new_mark("east", B1, by="pod b1", at_ms=1_000)])
    listed: list[tuple[str, ...]] = [(B1, B2)]
    clock = Clock()
    with _store(kafka, topic) as mine, _store(kafka, topic) as theirs:
        holder = _view(mine, listed, holder=True, clock=clock)
        standby = _view(theirs, listed, holder=False, clock=clock)
        assert holder.draining("east") == {B1} == standby.draining("east")
        listed[0] = (B2,)  # b1 stops (its preStop hook drained it)
        clock.s += 10
        assert standby.draining("east") == {B1}  # the standby writes nothing
        assert theirs.marks("east")[0].state == "draining"
        assert holder.draining("east") == {B1}  # gone: still no new bundle for it
        assert mine.marks("east")[0].state == "gone"
        listed[0] = (B1, B2)  # b1 is back
        clock.s += 10
        assert holder.draining("east") == frozenset()
        cleared = mine.marks("east")[0]
        assert (cleared.state, cleared.by, cleared.at_ms) == ("cleared", RESTART_RULE_BY, 5_000)
        clock.s += 10
        assert standby.draining("east") == frozenset()  # read from the topic


def test_marks_are_re_read_at_most_every_refresh_s(kafka: Broker) -> None:
    topic = f"marks-{uuid.uuid4().hex[:10]}"
    clock = Clock()
    with _store(kafka, topic) as cli, _store(kafka, topic) as mine:
        view = _view(mine, [(B1, B2)], holder=True, clock=clock)
        assert view.draining("east") == frozenset()
        cli.write([new_mark("east", B2, by="ops", at_ms=1)])
        assert view.draining("east") == frozenset()  # within refresh_s: not re-read
        clock.s += 5
        assert view.draining("east") == {B2}


def test_kafka_away_keeps_the_marks_read_last() -> None:
    class Failing(KafkaDrainMarks):
        def refresh(self) -> bool:
            raise RuntimeError("Kafka away")

    store = Failing(bootstrap_servers="127.0.0.1:9", topic="t")
    store._marks[new_mark("east", B1, by="ops", at_ms=1).key] = new_mark(
        "east", B1, by="ops", at_ms=1
    )
    view = _view(store, [(B1,)], holder=True, clock=Clock())
    assert view.draining("east") == {B1}
    assert view.read_failures == 1


def _config(tmp_path: Path, kafka: Broker, name: str) -> BalancerConfig:
    doc: dict[str, Any] = {
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers},
        "clusters": [{"name": "east", "admin_url": "http://127.0.0.1:9"}],
        "controller": {
            "mode": "apply",
            "writer_lease": {"group": name, "topic": name, "lease_s": 10, "safety_margin_s": 2},
            "journal_path": str(tmp_path / "journal.sqlite3"),
            "audit_log_path": str(tmp_path / "audit.jsonl"),
        },
    }
    return BalancerConfig.from_mapping(doc)


def test_the_probe_tells_a_running_balancer_from_none(tmp_path: Path, kafka: Broker) -> None:
    name = f"lease-{uuid.uuid4().hex[:8]}"
    config = _config(tmp_path, kafka, name)
    down = probe_balancer(config, timeout_s=60)
    assert down.state == "down" and name in down.detail
    balancer = KafkaWriterLease(
        bootstrap_servers=kafka.bootstrap_servers, group_id=name, topic=name,
        identity="balancer-0", lease_s=10, safety_margin_s=2,
    ).start()  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not balancer.status().held:
            assert time.monotonic() < deadline, balancer.status().detail
            time.sleep(0.2)
        up = probe_balancer(config, timeout_s=60)
        assert up.state == "up" and "balancer-0" in up.detail
        assert balancer.status().held  # the sticky lease stayed with the balancer
    finally:
        balancer.stop()


def test_without_a_writer_lease_the_probe_says_unknown(tmp_path: Path, kafka: Broker) -> None:
    config = _config(tmp_path, kafka, "x").model_copy(deep=True)
    dry = BalancerConfig.from_mapping({**config.as_dict(), "controller": {"mode": "dry-run"}})
    assert probe_balancer(dry).state == "unknown"


def test_the_watcher_applies_the_restart_rule_between_cycles(kafka: Broker) -> None:
    # A broker restarts faster than a decision cycle: the watcher sees it unlisted anyway.
    topic = f"marks-{uuid.uuid4().hex[:10]}"
    with _store(kafka, topic) as cli:
        cli.write([new_mark("east", B1, by="pod b1", at_ms=1_000)])
    listed: list[tuple[str, ...]] = [(B1, B2)]
    seen: list[tuple[str, ...]] = []
    view = DrainMarksView(
        _store(kafka, topic), listed_brokers=lambda _c: listed[0], may_write=lambda: True,
        refresh_s=0.0,
    )  # fmt: skip

    def wait_for(state: str) -> None:
        deadline = time.monotonic() + 60
        while not any(m.state == state for m in view.current()):
            assert time.monotonic() < deadline, view.current()
            time.sleep(0.05)

    view.start(
        ["east"], interval_s=0.05, on_marks=lambda ms: seen.append(tuple(m.state for m in ms))
    )
    try:
        wait_for("draining")
        assert view.draining("east") == {B1}  # answered from what the watcher read
        listed[0] = (B2,)
        wait_for("gone")
        listed[0] = (B1, B2)
        wait_for("cleared")
        assert view.draining("east") == frozenset()
        assert ("gone",) in seen
    finally:
        view.stop()


def test_the_readers_counts_are_exported() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from balancer.ops.exporter import BalancerMetrics

    registry = CollectorRegistry()
    counts = {"bad": 2, "failed": 1}
    metrics = BalancerMetrics(registry, limits=lambda _c, _n: None)
    metrics.watch_drain_marks(lambda: counts["bad"], lambda: counts["failed"])
    text = generate_latest(registry).decode()
    assert "pulsar_balancer_drain_marks_bad_records_total 2.0" in text
    assert "pulsar_balancer_drain_marks_read_failures_total 1.0" in text


def test_stop_does_not_wait_on_a_watcher_stuck_in_a_kafka_read() -> None:
    # Kafka away: the watcher's read blocks (up to the store's timeout). Stopping the view
    # must not wait for it, or a Kafka outage no longer ends `run` on time.
    entered, release = threading.Event(), threading.Event()

    class StuckMarks:
        closed = False

        inside = False

        def refresh(self) -> None:
            self.inside = True
            entered.set()
            release.wait(30)
            self.inside = False

        def marks(self) -> tuple[DrainMark, ...]:
            return ()

        def close(self) -> None:
            self.closed = True

    stuck = StuckMarks()
    view = DrainMarksView(
        stuck,  # type: ignore[arg-type]
        listed_brokers=lambda _c: (B1,), may_write=lambda: False, refresh_s=0.0,
    )  # fmt: skip
    view.start(["east"], interval_s=0.01)
    try:
        assert entered.wait(10)
        view.stop()
        assert stuck.inside  # stop() returned while the read still blocks
        assert not stuck.closed  # not closed under the watcher's feet
    finally:
        release.set()
