"""A yielding member of the writer-lease group (`drain --wait` draining by itself, issue 43
point 3) holds the lease only while no balancer is in the group: a balancer that joins takes
it over, and never do both hold it; yielding members among themselves stay sticky."""

from __future__ import annotations

import time
import uuid

import pytest

from balancer.kafka.lease import KafkaWriterLease, choose_holder
from tests.kafka.test_writer_lease import LEASE_S, MARGIN_S, wait_until
from tests.kafka_broker import Broker


def test_a_yielding_holder_gives_the_lease_up_to_a_balancer_for_a_round() -> None:
    claims = {
        "a": {"identity": "drain", "holding": True, "yields": True},
        "b": {"identity": "balancer", "holding": False},
    }
    assert choose_holder(claims) is None  # the drain revokes; nobody holds it this round
    claims["a"]["holding"] = False
    assert choose_holder(claims) == "b"  # the next round: the balancer, not the first id


def test_yielding_members_among_themselves_are_sticky() -> None:
    claims = {
        "a": {"identity": "drain-1", "holding": False, "yields": True},
        "b": {"identity": "drain-2", "holding": True, "yields": True},
    }
    assert choose_holder(claims) == "b"
    assert choose_holder({"b": {"yields": True}, "a": {"yields": True}}) == "a"


def member(kafka: Broker, name: str, identity: str, *, yields: bool) -> KafkaWriterLease:
    return KafkaWriterLease(
        bootstrap_servers=kafka.bootstrap_servers, group_id=name, topic=name,
        identity=identity, lease_s=LEASE_S, safety_margin_s=MARGIN_S, yields=yields,
    )  # fmt: skip


@pytest.mark.kafka
def test_a_balancer_that_joins_takes_the_lease_from_a_drain_command(kafka: Broker) -> None:
    name = f"lease-{uuid.uuid4().hex[:8]}"
    drain = member(kafka, name, "drain-command:1", yields=True).start()
    balancer: KafkaWriterLease | None = None
    try:
        wait_until(lambda: drain.status().held, 4 * LEASE_S, "the drain command holding")
        balancer = member(kafka, name, "balancer:2", yields=False).start()
        joined = balancer
        both: list[tuple[bool, bool]] = []

        def taken_over() -> bool:
            d, b = drain.status().held, joined.status().held
            both.append((d, b))
            return b

        wait_until(taken_over, 6 * LEASE_S, "the balancer taking the lease over")
        assert (True, True) not in both  # never both
        for _ in range(20):  # and it stays with the balancer
            assert joined.status().held and not drain.status().held
            assert drain.status().holder == "balancer:2"
            time.sleep(0.05)
    finally:
        drain.stop()
        if balancer is not None:
            balancer.stop()
