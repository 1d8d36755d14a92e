"""The context record (one collector round of one cluster) both ways, and how a recording's
reader treats bad ones: counted by reason and skipped, never a crash."""

from __future__ import annotations

import json

import pytest

from balancer.app.replay.recording import ContextCounts, parse_contexts
from balancer.core.broker_load import BrokerLoadReport, LoadSource, Resource, ResourceUsage
from balancer.core.context_record import (
    ContextRecordError,
    ContextRejectReason,
    decode_context,
    encode_context,
)
from balancer.core.replay.recording import RecordedMessage, RoundContext

ROUND_MS = 1_700_000_040_000


def report(broker: str, *, cluster: str = "a", bundles: tuple[str, ...] = ()) -> BrokerLoadReport:
    return BrokerLoadReport(
        cluster=cluster,
        broker=broker,
        timestamp_ms=ROUND_MS + 1234,
        resources={
            Resource.CPU: ResourceUsage(55.5, 100.0),
            Resource.BANDWIDTH_IN: ResourceUsage(1024.0, 10_000.0),
        },
        msg_rate_in=10.5,
        msg_rate_out=20.25,
        msg_throughput_in=1000.0,
        msg_throughput_out=2000.0,
        num_topics=7,
        num_bundles=len(bundles),
        num_producers=3,
        num_consumers=4,
        bundles=bundles,
        last_update_ms=ROUND_MS - 5000,
        origin=LoadSource.METRICS,
    )


def context(cluster: str = "a", round_ms: int = ROUND_MS) -> RoundContext:
    return RoundContext(
        cluster=cluster,
        round_ms=round_ms,
        reports=(
            report("b1:8080", cluster=cluster, bundles=("t/ns/0x00000000_0x80000000",)),
            report("b2:8080", cluster=cluster, bundles=("t/ns/0x80000000_0xffffffff",)),
        ),
    )


def message(value: bytes, offset: int) -> RecordedMessage:
    return RecordedMessage(partition=0, offset=offset, timestamp_ms=ROUND_MS, key=b"a", value=value)


def test_a_context_round_trips_with_every_field_of_the_reports() -> None:
    original = context()
    raw = encode_context(original)
    assert json.loads(raw)["v"] == 1
    assert decode_context(raw) == original


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\xff not json", ContextRejectReason.BAD_JSON),
        (b"[1, 2]", ContextRejectReason.WRONG_SHAPE),
        (
            b'{"v": 2, "cluster": "a", "round_ms": 1, "reports": []}',
            ContextRejectReason.WRONG_VERSION,
        ),
        (b'{"cluster": "a", "round_ms": 1, "reports": []}', ContextRejectReason.WRONG_VERSION),
        (
            b'{"v": 1, "cluster": "a", "round_ms": "1", "reports": []}',
            ContextRejectReason.WRONG_SHAPE,
        ),
        (
            b'{"v": 1, "cluster": "a", "round_ms": 1, "reports": {}}',
            ContextRejectReason.WRONG_SHAPE,
        ),
    ],
)
def test_a_bad_record_names_its_reason(raw: bytes, reason: ContextRejectReason) -> None:
    with pytest.raises(ContextRecordError) as caught:
        decode_context(raw)
    assert caught.value.reason is reason


def test_a_report_with_an_unknown_resource_or_another_cluster_is_a_bad_value() -> None:
    body = json.loads(encode_context(context()))
    body["reports"][0]["resources"]["gpu"] = {"usage": 1.0, "limit": 2.0}
    with pytest.raises(ContextRecordError) as caught:
        decode_context(json.dumps(body).encode())
    assert caught.value.reason is ContextRejectReason.BAD_VALUE
    body = json.loads(encode_context(context()))
    body["reports"][1]["cluster"] = "b"
    with pytest.raises(ContextRecordError) as caught:
        decode_context(json.dumps(body).encode())
    assert caught.value.reason is ContextRejectReason.BAD_VALUE


def test_a_report_that_is_not_finite_is_not_published() -> None:
    bad = RoundContext("a", ROUND_MS, (report("b1:8080"),))
    bad_report = bad.reports[0]
    nan = BrokerLoadReport(
        cluster="a",
        broker="b1:8080",
        timestamp_ms=bad_report.timestamp_ms,
        resources={Resource.CPU: ResourceUsage(float("nan"), 100.0)},
    )
    with pytest.raises(ValueError):
        encode_context(RoundContext("a", ROUND_MS, (nan,)))


def test_bad_records_are_counted_by_reason_and_skipped_the_rest_given_in_order() -> None:
    good_a = context("a", ROUND_MS)
    good_b = context("b", ROUND_MS)
    later = context("a", ROUND_MS + 60_000)
    raw = [
        message(encode_context(good_a), 0),
        message(b"{not json", 1),
        message(encode_context(good_b), 2),
        message(encode_context(good_a), 3),  # the same round of a again
        message(encode_context(later), 4),
        message(encode_context(context("b", ROUND_MS - 60_000)), 5),  # older than one given
        message(b'{"v": 9}', 6),
    ]
    counts = ContextCounts()
    given = list(parse_contexts(raw, counts))
    assert given == [good_a, good_b, later]
    assert counts.given == 3
    assert dict(counts.rejected) == {
        "bad_json": 1,
        "duplicate": 1,
        "out_of_order": 1,
        "wrong_version": 1,
    }
    assert "4 skipped" in counts.describe()
    assert counts.clusters == {"a", "b"}


def test_no_context_at_all_is_said_plainly() -> None:
    counts = ContextCounts()
    assert list(parse_contexts([], counts)) == []
    assert "no context records" in counts.describe()
    assert "moves.enabled" in counts.describe()


def test_the_context_topic_is_a_topic_of_its_own() -> None:
    from pydantic import ValidationError

    from balancer.app.kafka_config import KafkaConfig

    assert KafkaConfig().context_topic == "pulsar-topic-stats-context"
    for taken in ("pulsar-topic-stats", "pulsar-topic-stats-dlq"):
        with pytest.raises(ValidationError, match="context_topic"):
            KafkaConfig(context_topic=taken)
