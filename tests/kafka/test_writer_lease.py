"""The single-writer lease on a real Kafka-protocol broker (tansu unless KAFKA_BOOTSTRAP).

Members compete in one process and across processes: exactly one holds the lease, a standby
names the holder, a stopped holder hands over, and a holder paused past its session (SIGSTOP)
finds its lease expired the moment it resumes, before Kafka tells it anything.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from balancer.kafka.lease import KafkaWriterLease, choose_holder
from tests.kafka_broker import Broker

LEASE_S = 10.0
MARGIN_S = 2.0


def test_the_claiming_member_keeps_the_lease() -> None:
    claims = {
        "a": {"identity": "A", "holding": False},
        "b": {"identity": "B", "holding": True},
        "c": {"identity": "C", "holding": False},
    }
    assert choose_holder(claims) == "b"  # sticky: not the first id


def test_without_a_claim_the_first_member_takes_it() -> None:
    assert choose_holder({"m2": {}, "m1": {"holding": False}}) == "m1"
    assert choose_holder({}) is None


def test_two_claims_give_it_to_nobody_for_a_round() -> None:
    claims = {"a": {"holding": True}, "b": {"holding": True}, "c": {}}
    assert choose_holder(claims) is None


@pytest.fixture
def names() -> tuple[str, str]:
    name = f"lease-{uuid.uuid4().hex[:8]}"
    return name, name


def member(kafka: Broker, names: tuple[str, str], identity: str) -> KafkaWriterLease:
    group, topic = names
    return KafkaWriterLease(
        bootstrap_servers=kafka.bootstrap_servers,
        group_id=group,
        topic=topic,
        identity=identity,
        lease_s=LEASE_S,
        safety_margin_s=MARGIN_S,
    )


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Seconds it took; fails after `timeout_s` (a bound on a protocol step, not on speed)."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, f"no {what} within {timeout_s} s"
        time.sleep(0.05)
    return time.monotonic() - started


@pytest.mark.kafka
def test_one_holder_and_a_clean_stop_hands_over(kafka: Broker, names: tuple[str, str]) -> None:
    first = member(kafka, names, "first:1").start()
    second: KafkaWriterLease | None = None
    try:
        wait_until(lambda: first.status().held, 4 * LEASE_S, "first holder")
        second = member(kafka, names, "second:2").start()
        standby = second
        wait_until(lambda: standby.status().holder == "first:1", 4 * LEASE_S, "standby")
        # The standby joining does not take the lease (sticky), and never do both hold it.
        for _ in range(40):
            a, b = first.status(), standby.status()
            assert a.held and not b.held and b.holder == "first:1", (a, b)
            time.sleep(0.05)
        first.stop()
        assert not first.status().held  # given up at once, before leaving the group
        # A clean stop leaves the group: the standby needs no session to expire.
        wait_until(lambda: standby.status().held, LEASE_S, "takeover after a clean stop")
        assert standby.status().holder == "second:2"
    finally:
        first.stop()
        if second is not None:
            second.stop()


class Child:
    """The lease member's process and every status line it printed (read on a thread)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._lock:
                self.lines.append(json.loads(line))

    def since(self, index: int) -> list[dict[str, Any]]:
        with self._lock:
            return self.lines[index:]

    def last(self) -> dict[str, Any]:
        with self._lock:
            return self.lines[-1] if self.lines else {}


@pytest.fixture
def child(kafka: Broker, names: tuple[str, str]) -> Iterator[Child]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.kafka.lease_member", kafka.bootstrap_servers, *names,
         str(LEASE_S), str(MARGIN_S)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()},
    )  # fmt: skip
    try:
        yield Child(process)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.mark.kafka
def test_a_holder_paused_past_its_session_resumes_without_the_lease(
    kafka: Broker, names: tuple[str, str], child: Child
) -> None:
    wait_until(lambda: child.last().get("held") is True, 4 * LEASE_S, "child holder")
    ours = member(kafka, names, "parent:1").start()
    try:
        wait_until(lambda: ours.status().holder is not None, 4 * LEASE_S, "standby")
        os.kill(child.process.pid, signal.SIGSTOP)
        # Kafka removes the silent member after its session; the standby takes over.
        wait_until(lambda: ours.status().held, 4 * LEASE_S, "takeover from a paused holder")
        paused_at = len(child.since(0))
        os.kill(child.process.pid, signal.SIGCONT)
        wait_until(lambda: len(child.since(paused_at)) >= 30, 30, "3 s of status lines")
        lines = child.since(paused_at)
        resumed = [line for line in lines if line["event"] == "resumed"]
        # Before any answer from Kafka: its own deadline already says no.
        assert resumed and not resumed[0]["held"], resumed
        assert "expired" in resumed[0]["detail"], resumed[0]
        assert not any(line["held"] for line in lines), lines
        assert ours.status().held  # and the resumed member did not take it back
        wait_until(lambda: child.last()["holder"] == "parent:1", 4 * LEASE_S, "standby child")
        assert ours.status().held
    finally:
        ours.stop()
