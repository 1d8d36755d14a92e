"""Topic names: every accepted spelling, partitions, and every rejection names its problem."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from balancer.core.topics import (
    MAX_TOPIC_NAME_BYTES,
    InvalidTopicName,
    TopicDomain,
    TopicName,
    check_topic_text,
    parse_topic,
)

NORMALISE = [
    ("my-topic", "persistent://public/default/my-topic"),
    ("t/ns/x", "persistent://t/ns/x"),
    ("persistent://t/ns/x", "persistent://t/ns/x"),
    ("non-persistent://t/ns/x", "non-persistent://t/ns/x"),
    ("persistent://t/ns/orders-partition-3", "persistent://t/ns/orders-partition-3"),
    ("a=b:c.d/n-s_1/x y", "persistent://a=b:c.d/n-s_1/x y"),
    ("persistent://t/ns/a:b?c", "persistent://t/ns/a:b?c"),
]


@pytest.mark.parametrize(("given_name", "full"), NORMALISE, ids=[n for n, _ in NORMALISE])
def test_normalises_every_accepted_spelling(given_name: str, full: str) -> None:
    assert parse_topic(given_name).full == full
    assert str(parse_topic(full)) == full  # idempotent


def test_parts_of_a_name() -> None:
    name = parse_topic("non-persistent://acme/orders/eu-partition-12")
    assert name.domain is TopicDomain.NON_PERSISTENT
    assert (name.tenant, name.namespace, name.local_name) == ("acme", "orders", "eu-partition-12")
    assert name.namespace_name == "acme/orders"


PARTITIONS = [
    ("orders-partition-3", 3, "orders"),
    ("orders-partition-0", 0, "orders"),
    ("a-partition-1-partition-2", 2, "a-partition-1"),
    ("orders", None, "orders"),
    ("orders-partition-", None, "orders-partition-"),
    ("-partition-3", None, "-partition-3"),  # no base name
    ("orders-partition-x", None, "orders-partition-x"),
    ("orders-partition-01", None, "orders-partition-01"),  # Pulsar: leading zero, not a partition
    ("orders-partition--1", None, "orders-partition--1"),
    ("orders-partition-2147483647", 2147483647, "orders"),
    ("orders-partition-2147483648", None, "orders-partition-2147483648"),  # > Integer.MAX_VALUE
    ("orders-partition-²", None, "orders-partition-²"),  # was a crash: '²'.isdigit()
    ("orders-partition-٣", None, "orders-partition-٣"),  # non-ASCII digit
]


@pytest.mark.parametrize(("local", "index", "base"), PARTITIONS, ids=[p[0] for p in PARTITIONS])
def test_partition_index_and_base(local: str, index: int | None, base: str) -> None:
    name = parse_topic(f"persistent://t/ns/{local}")
    assert name.partition_index == index
    assert name.is_partition is (index is not None)
    assert name.base.local_name == base


def test_partition_builds_the_name_of_a_partition() -> None:
    base = parse_topic("t/ns/orders")
    assert base.partition(7).full == "persistent://t/ns/orders-partition-7"
    assert base.partition(7).partition(2).full == "persistent://t/ns/orders-partition-2"
    with pytest.raises(InvalidTopicName, match="must be >= 0"):
        base.partition(-1)


REJECTED = [
    ("", "empty"),
    (" t/ns/x", "whitespace"),
    ("t/ns/x\n", "whitespace"),
    ("kafka://t/ns/x", "unknown domain 'kafka'"),
    ("://t/ns/x", "unknown domain"),
    ("persistent://t/c/ns/x", "cluster part"),
    ("t/ns", "a short name is"),
    ("t/ns/x/y", "a short name is"),
    ("persistent://t/ns", "must be domain://tenant/namespace/topic"),
    ("persistent://t/ns/", "empty local name"),
    ("persistent://t!/ns/x", "invalid tenant 't!'"),
    ("persistent:///ns/x", "invalid tenant ''"),
    ("persistent://t/n s/x", "invalid namespace 'n s'"),
    ("persistent://tenänt/ns/x", "invalid tenant"),  # Java's \w is ASCII: Pulsar rejects it
    ("persistent://t\n/ns/x", "invalid tenant"),  # was accepted: re '$' matched before \n
]


@pytest.mark.parametrize(("bad", "problem"), REJECTED, ids=[repr(b) for b, _ in REJECTED])
def test_rejects_invalid_names_naming_the_problem(bad: str, problem: str) -> None:
    with pytest.raises(InvalidTopicName, match=problem.replace("?", r"\?")):
        parse_topic(bad)


def test_rejects_non_strings() -> None:
    with pytest.raises(InvalidTopicName, match="must be a string"):
        parse_topic(42)  # type: ignore[arg-type]


@given(
    tenant=st.from_regex(r"[-=:.a-zA-Z0-9_]{1,12}", fullmatch=True),
    namespace=st.from_regex(r"[-=:.a-zA-Z0-9_]{1,12}", fullmatch=True),
    local=st.text(min_size=1, max_size=20).filter(lambda s: "/" not in s and s == s.strip()),
    domain=st.sampled_from(list(TopicDomain)),
)
def test_full_names_round_trip(
    tenant: str, namespace: str, local: str, domain: TopicDomain
) -> None:
    name = TopicName(domain, tenant, namespace, local)
    assert parse_topic(name.full) == name


def test_topic_text_length_is_counted_in_utf8_bytes() -> None:
    head = "persistent://t/ns/"
    check_topic_text(head + "x" * (MAX_TOPIC_NAME_BYTES - len(head)))  # exactly the limit
    with pytest.raises(InvalidTopicName, match=f"is {MAX_TOPIC_NAME_BYTES + 1} bytes long"):
        check_topic_text(head + "x" * (MAX_TOPIC_NAME_BYTES - len(head) + 1))
    # 2-byte characters: half as many fit.
    with pytest.raises(InvalidTopicName, match="bytes long"):
        check_topic_text("\u00e9" * (MAX_TOPIC_NAME_BYTES // 2 + 1))


@pytest.mark.parametrize("char", ["\x00", "\x07", "\t", "\x1b", "\x7f", "\x85", "\x9f"])
def test_topic_text_refuses_control_characters(char: str) -> None:
    with pytest.raises(InvalidTopicName, match=f"U\\+{ord(char):04X} at position 7"):
        check_topic_text(f"t/ns/ab{char}c")


def test_topic_text_error_never_echoes_a_huge_name() -> None:
    with pytest.raises(InvalidTopicName) as info:
        check_topic_text("y" * 100_000)
    assert len(str(info.value)) < 200


def test_topic_text_accepts_what_pulsar_names_hold() -> None:
    for name in ("my-topic", "persistent://t/ns/\u00fcber-topic", "t/ns/a b", "t/ns/\u65e5\u672c"):
        check_topic_text(name)
