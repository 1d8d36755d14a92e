"""broker-stats/topics: a malformed topic entry is rejected alone, with its reason, and the
rest of the broker's answer is used (issue 32: one `"msgRateIn": "NaN"` hid every bundle of
its broker). A body whose structure is wrong still fails as a whole (test_pulsar_models)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from balancer.core.bundles import BundleRange
from balancer.core.events import RejectReason
from balancer.core.topics import TopicDomain
from balancer.pulsar.models import (
    REJECTED_TEXT_MAX_CHARS,
    BrokerTopicStats,
    RejectedTopicEntry,
)

LOW = "0x00000000_0x80000000"
HIGH = "0x80000000_0xffffffff"
BAD = "persistent://t/ns/bad"


def _stats(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "publishers": [],
        "subscriptions": {"s": {"consumers": [{}], "msgBacklog": 3, "msgRateOut": 2.0}},
        "producerCount": 1,
        "msgRateIn": 5.0,
        "msgRateOut": 2.0,
        "msgThroughputIn": 500.0,
        "msgThroughputOut": 200.0,
        "storageSize": 4096,
        "backlogSize": 0,
    }
    base.update(fields)
    return base


def _body(bad_key: str, bad_entry: Any) -> dict[str, Any]:
    """Two bundles of one namespace and a second namespace; the bad entry sits in LOW."""
    return {
        "t/ns": {
            LOW: {"persistent": {"persistent://t/ns/a": _stats(), bad_key: bad_entry}},
            HIGH: {"persistent": {"persistent://t/ns/b": _stats()}},
        },
        "t/other": {LOW: {"persistent": {"persistent://t/other/c": _stats()}}},
    }


@pytest.mark.parametrize(
    ("key", "entry", "reason", "mentions"),
    [
        (BAD, _stats(msgRateIn="NaN"), RejectReason.NOT_FINITE, "msgRateIn"),
        (BAD, _stats(msgRateIn="Infinity"), RejectReason.NOT_FINITE, "msgRateIn"),
        (BAD, _stats(msgThroughputOut="-Infinity"), RejectReason.NOT_FINITE, "msgThroughputOut"),
        (BAD, _stats(msgRateIn=math.nan), RejectReason.NOT_FINITE, "msgRateIn"),
        (BAD, _stats(msgRateOut=math.inf), RejectReason.NOT_FINITE, "msgRateOut"),
        (BAD, _stats(storageSize=math.nan), RejectReason.NOT_FINITE, "storageSize"),
        (BAD, _stats(msgRateIn="fast"), RejectReason.WRONG_TYPE, "msgRateIn"),
        (BAD, _stats(msgRateIn=True), RejectReason.WRONG_TYPE, "msgRateIn"),
        (BAD, _stats(storageSize=1.5), RejectReason.WRONG_TYPE, "storageSize"),
        (BAD, _stats(publishers={}), RejectReason.WRONG_TYPE, "publishers"),
        (BAD, _stats(subscriptions=[]), RejectReason.WRONG_TYPE, "subscriptions"),
        (BAD, _stats(subscriptions={"s": {"msgBacklog": "x"}}), RejectReason.WRONG_TYPE, "s"),
        (BAD, [], RejectReason.NOT_AN_OBJECT, "object"),
        (BAD, None, RejectReason.NOT_AN_OBJECT, "object"),
        ("persistent://t/cl/ns/v1", _stats(), RejectReason.INVALID_TOPIC, "persistent://"),
        ("persistent://t/ns/", _stats(), RejectReason.INVALID_TOPIC, "persistent://t/ns/"),
        ("persistent://t/other/x", _stats(), RejectReason.INVALID_TOPIC, "t/ns"),
        ("non-persistent://t/ns/x", _stats(), RejectReason.INVALID_TOPIC, "persistent"),
        ("short-name", _stats(), RejectReason.INVALID_TOPIC, "t/ns"),
    ],
    ids=[
        "jackson-nan",
        "jackson-infinity",
        "jackson-minus-infinity",
        "bare-nan",
        "bare-infinity",
        "nan-size",
        "string-rate",
        "bool-rate",
        "fractional-size",
        "publishers-object",
        "subscriptions-list",
        "subscription-field",
        "entry-list",
        "entry-null",
        "v1-topic-key",
        "empty-local-name",
        "filed-under-another-namespace",
        "filed-under-another-domain",
        "short-name-of-another-namespace",
    ],
)
def test_a_malformed_topic_entry_is_rejected_alone(
    key: str, entry: Any, reason: RejectReason, mentions: str
) -> None:
    parsed = BrokerTopicStats.from_json("east", _body(key, entry))
    assert sorted(e.topic for e in parsed) == [
        "persistent://t/ns/a",
        "persistent://t/ns/b",
        "persistent://t/other/c",
    ]
    assert set(parsed.by_bundle("t/ns")) == {BundleRange.parse(LOW), BundleRange.parse(HIGH)}
    [rejected] = parsed.rejected
    assert isinstance(rejected, RejectedTopicEntry)
    assert (rejected.cluster, rejected.namespace, rejected.bundle, rejected.domain) == (
        "east",
        "t/ns",
        BundleRange.parse(LOW),
        TopicDomain.PERSISTENT,
    )
    assert rejected.topic == key and rejected.reason is reason
    assert mentions in rejected.detail


def test_the_excerpt_holds_the_entrys_own_numbers_not_its_lists() -> None:
    entry = _stats(msgRateIn="NaN", publishers=[{"producerName": "p" * 50}] * 40)
    [rejected] = BrokerTopicStats.from_json("east", _body(BAD, entry)).rejected
    excerpt = json.loads(rejected.excerpt)
    assert excerpt["msgRateIn"] == "NaN" and excerpt["storageSize"] == 4096
    assert "publishers" not in excerpt and "subscriptions" not in excerpt


def test_a_bare_nan_stays_visible_in_the_excerpt() -> None:
    [rejected] = BrokerTopicStats.from_json("east", _body(BAD, _stats(msgRateIn=math.nan))).rejected
    assert '"msgRateIn":NaN' in rejected.excerpt


def test_what_a_rejected_entry_carries_is_bounded() -> None:
    huge = "x" * 100_000
    key = "persistent://t/ns/" + "k" * 100_000
    body = _body(BAD, _stats(msgRateIn=huge))
    body["t/ns"][HIGH]["persistent"][key] = _stats(storageSize=huge)
    parsed = BrokerTopicStats.from_json("east", body)
    assert len(parsed.rejected) == 2
    for rejected in parsed.rejected:
        for text in (rejected.topic, rejected.detail, rejected.excerpt):
            assert len(text) <= REJECTED_TEXT_MAX_CHARS
    assert parsed.rejected[1].topic.startswith("persistent://t/ns/kkk")


def test_every_entry_rejected_is_still_an_answer() -> None:
    body = {"t/ns": {LOW: {"persistent": {BAD: _stats(msgRateIn="NaN")}}}}
    parsed = BrokerTopicStats.from_json("east", body)
    assert len(parsed) == 0 and not parsed.no_data and len(parsed.rejected) == 1


def test_a_clean_answer_rejects_nothing() -> None:
    body = _body("persistent://t/ns/fine", _stats())
    parsed = BrokerTopicStats.from_json("east", body)
    assert len(parsed) == 4 and parsed.rejected == ()
