"""Hash positions: CRC32 of the UTF-8 full name, unsigned 32-bit, as Pulsar computes them."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from balancer.core.hashing import FULL_UPPER, hash_position, topic_position
from balancer.core.topics import parse_topic

POSITIONS = [
    ("persistent://public/default/my-topic", 0x2BAD45F7),  # the contract's example
    ("my-topic", 0x2BAD45F7),  # short names hash by their full name
    ("public/default/my-topic", 0x2BAD45F7),
]


@pytest.mark.parametrize(("name", "position"), POSITIONS, ids=[n for n, _ in POSITIONS])
def test_contract_example(name: str, position: int) -> None:
    assert topic_position(name) == position


def test_domain_changes_the_position() -> None:
    assert topic_position("persistent://t/ns/x") != topic_position("non-persistent://t/ns/x")


def test_each_partition_is_hashed_by_its_own_full_name() -> None:
    p3 = "persistent://t/ns/orders-partition-3"
    assert topic_position(p3) == zlib.crc32(p3.encode()) & 0xFFFFFFFF
    assert topic_position(p3) != topic_position("persistent://t/ns/orders")


def test_accepts_a_parsed_name() -> None:
    name = parse_topic("t/ns/ü-topic")
    assert topic_position(name) == zlib.crc32(name.full.encode("utf-8"))


@given(st.text(max_size=50))
def test_positions_are_unsigned_32_bit(text: str) -> None:
    assert 0 <= hash_position(text) <= FULL_UPPER
