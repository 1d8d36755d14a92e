"""Topic-stats events: validation gives a typed event or a reason for every rejection, and
the JSON Schema in balancer/schemas agrees with validate_event on every example."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from balancer.core.events import (
    MAX_MESSAGE_BYTES,
    Rejection,
    RejectReason,
    TopicStatsEvent,
    parse_message,
    validate_event,
)

GOOD: dict[str, Any] = {
    "cluster": "c1",
    "topic": "persistent://t/ns/x",
    "timestamp_ms": 1_700_000_000_000,
    "msgRateIn": 10.5,
    "msgRateOut": 2,
    "msgThroughputIn": 1000.0,
    "msgThroughputOut": 0,
    "storageSize": 5,
    "backlogSize": 0,
    "offloadedStorageSize": 0,
    "producerCount": 1,
    "consumerCount": 2,
}


def _with(**changes: Any) -> dict[str, Any]:
    out = {**GOOD, **changes}
    return {k: v for k, v in out.items() if v is not _DROP}


_DROP = object()

# (id, event object, None if accepted else the reason)
EXAMPLES: list[tuple[str, Any, RejectReason | None]] = [
    ("good", GOOD, None),
    ("short-topic", _with(topic="my-topic"), None),
    ("non-persistent", _with(topic="non-persistent://t/ns/x"), None),
    ("with-broker", _with(broker="b1:8080"), None),
    ("broker-null", _with(broker=None), None),
    ("integral-float-count", _with(storageSize=5.0), None),
    ("integral-float-timestamp", _with(timestamp_ms=1_700_000_000_000.0), None),
    ("zero-everything", _with(msgRateIn=0, msgRateOut=0.0, producerCount=0), None),
    ("first-valid-ms", _with(timestamp_ms=946_684_800_000), None),
    ("max-count", _with(storageSize=2**63 - 1), None),
    ("not-an-object", [GOOD], RejectReason.NOT_AN_OBJECT),
    ("string", "x", RejectReason.NOT_AN_OBJECT),
    ("missing-topic", _with(topic=_DROP), RejectReason.MISSING_FIELD),
    ("missing-rate", _with(msgRateOut=_DROP), RejectReason.MISSING_FIELD),
    ("unknown-field", _with(extra=1), RejectReason.UNKNOWN_FIELD),
    ("empty-cluster", _with(cluster=""), RejectReason.WRONG_TYPE),
    ("cluster-number", _with(cluster=3), RejectReason.WRONG_TYPE),
    ("topic-null", _with(topic=None), RejectReason.WRONG_TYPE),
    ("broker-number", _with(broker=1), RejectReason.WRONG_TYPE),
    ("timestamp-string", _with(timestamp_ms="1700000000000"), RejectReason.WRONG_TYPE),
    ("timestamp-fraction", _with(timestamp_ms=1_700_000_000_000.5), RejectReason.WRONG_TYPE),
    ("timestamp-bool", _with(timestamp_ms=True), RejectReason.WRONG_TYPE),
    ("timestamp-seconds", _with(timestamp_ms=1_700_000_000), RejectReason.TIMESTAMP_OUT_OF_RANGE),
    (
        "timestamp-micros",
        _with(timestamp_ms=1_700_000_000_000_000),
        RejectReason.TIMESTAMP_OUT_OF_RANGE,
    ),
    ("timestamp-2100", _with(timestamp_ms=4_102_444_800_000), RejectReason.TIMESTAMP_OUT_OF_RANGE),
    ("rate-string", _with(msgRateIn="1"), RejectReason.WRONG_TYPE),
    ("rate-bool", _with(msgRateIn=False), RejectReason.WRONG_TYPE),
    ("rate-null", _with(msgThroughputIn=None), RejectReason.WRONG_TYPE),
    ("rate-negative", _with(msgRateOut=-0.5), RejectReason.NEGATIVE_VALUE),
    ("rate-huge-int", _with(msgRateIn=10**400), RejectReason.NOT_FINITE),  # was a crash
    ("rate-1e300", _with(msgRateIn=1e300), RejectReason.RATE_TOO_HIGH),
    ("rate-above-bound", _with(msgThroughputOut=10**18 + 1), RejectReason.RATE_TOO_HIGH),
    ("rate-at-bound", _with(msgThroughputOut=1e18), None),
    ("count-fraction", _with(producerCount=1.5), RejectReason.WRONG_TYPE),
    ("count-negative", _with(consumerCount=-1), RejectReason.NEGATIVE_VALUE),
    ("count-64-bit", _with(storageSize=2**63), RejectReason.WRONG_TYPE),
    ("count-string", _with(backlogSize="0"), RejectReason.WRONG_TYPE),
    ("topic-v1", _with(topic="persistent://t/c/ns/x"), RejectReason.INVALID_TOPIC),
    ("topic-domain", _with(topic="kafka://t/ns/x"), RejectReason.INVALID_TOPIC),
    ("topic-space", _with(topic=" t/ns/x"), RejectReason.INVALID_TOPIC),
    ("topic-trailing-newline", _with(topic="t/ns/x\n"), RejectReason.INVALID_TOPIC),
    ("topic-two-parts", _with(topic="t/x"), RejectReason.INVALID_TOPIC),
    ("topic-bad-tenant", _with(topic="t!/ns/x"), RejectReason.INVALID_TOPIC),
    ("topic-empty-local", _with(topic="persistent://t/ns/"), RejectReason.INVALID_TOPIC),
]


@pytest.mark.parametrize(("obj", "reason"), [e[1:] for e in EXAMPLES], ids=[e[0] for e in EXAMPLES])
def test_validate_event(obj: Any, reason: RejectReason | None) -> None:
    result = validate_event(obj)
    if reason is None:
        assert isinstance(result, TopicStatsEvent), result
        assert result.topic.startswith(("persistent://", "non-persistent://"))
    else:
        assert isinstance(result, Rejection)
        assert result.reason is reason, result.detail
        assert result.detail


@pytest.fixture(scope="module")
def schema_validator() -> jsonschema.Draft202012Validator:
    text = resources.files("balancer").joinpath("schemas/topic-stats-event.schema.json").read_text()
    schema = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize(("obj", "reason"), [e[1:] for e in EXAMPLES], ids=[e[0] for e in EXAMPLES])
def test_schema_agrees_with_validate_event(
    schema_validator: jsonschema.Draft202012Validator, obj: Any, reason: RejectReason | None
) -> None:
    # Compare on the JSON text, as a producer would send it.
    decoded = json.loads(json.dumps(obj))
    assert schema_validator.is_valid(decoded) is (reason is None)
    assert isinstance(validate_event(decoded), TopicStatsEvent) is (reason is None)


def test_schema_describes_the_envelope(schema_validator: jsonschema.Draft202012Validator) -> None:
    envelope = schema_validator.schema["$defs"]["envelope"]
    validator = schema_validator.evolve(schema={**schema_validator.schema, **envelope})
    assert validator.is_valid({"events": [GOOD, GOOD]})
    assert not validator.is_valid({"events": [GOOD], "x": 1})
    assert not validator.is_valid({"events": [_with(topic=None)]})


def test_future_events_need_now_to_be_rejected() -> None:
    ts = GOOD["timestamp_ms"]
    assert isinstance(validate_event(GOOD, now_ms=ts), TopicStatsEvent)
    late = validate_event(GOOD, now_ms=ts - 10 * 60_000 - 1)
    assert isinstance(late, Rejection) and late.reason is RejectReason.TIMESTAMP_IN_FUTURE
    skewed = validate_event(GOOD, now_ms=ts - 5, max_future_skew_ms=0)
    assert isinstance(skewed, Rejection)


def test_event_properties_and_round_trip() -> None:
    event = validate_event(_with(topic="t/ns/x", broker="b"))
    assert isinstance(event, TopicStatsEvent)
    assert event.topic == "persistent://t/ns/x"
    assert event.namespace == "t/ns"
    assert (event.msg_rate, event.throughput_bytes, event.sessions) == (12.5, 1000.0, 3)
    again = parse_message(event.to_json())
    assert again == [event]


MESSAGES: list[tuple[str, bytes | str, list[RejectReason | None]]] = [
    ("single", json.dumps(GOOD), [None]),
    ("bytes", json.dumps(GOOD).encode(), [None]),
    (
        "envelope",
        json.dumps({"events": [GOOD, _with(msgRateIn=-1)]}),
        [None, RejectReason.NEGATIVE_VALUE],
    ),
    ("empty-envelope", json.dumps({"events": []}), []),
    ("envelope-not-list", json.dumps({"events": {}}), [RejectReason.WRONG_TYPE]),
    ("envelope-extra-key", json.dumps({"events": [], "v": 1}), [RejectReason.WRONG_TYPE]),
    ("not-utf8", b"\xff\xfe", [RejectReason.BAD_ENCODING]),
    ("not-json", "{", [RejectReason.BAD_JSON]),
    ("nan", json.dumps(GOOD).replace("10.5", "NaN"), [RejectReason.BAD_JSON]),
    ("infinity", json.dumps(GOOD).replace("10.5", "-Infinity"), [RejectReason.BAD_JSON]),
    ("overflowing-float", json.dumps(GOOD).replace("10.5", "1e400"), [RejectReason.NOT_FINITE]),
    ("deep", "[" * 100_000 + "]" * 100_000, [RejectReason.BAD_JSON]),
    ("array", "[1]", [RejectReason.NOT_AN_OBJECT]),
    ("too-large", b" " * (MAX_MESSAGE_BYTES + 1), [RejectReason.TOO_LARGE]),
    (  # the fault campaign's case: the last key won silently (99,999,999 msg/s)
        "duplicate-rate",
        json.dumps(GOOD)[:-1] + ', "msgRateIn": 99999999}',
        [RejectReason.DUPLICATE_KEY],
    ),
    (
        "duplicate-in-envelope",
        '{"events": [' + json.dumps(GOOD)[:-1] + ', "cluster": "x"}, ' + json.dumps(GOOD) + "]}",
        [RejectReason.DUPLICATE_KEY, None],
    ),
    (
        "two-events-keys",
        '{"events": [' + json.dumps(GOOD) + '], "events": [' + json.dumps(GOOD) + "]}",
        [RejectReason.DUPLICATE_KEY],
    ),
]


@pytest.mark.parametrize(
    ("raw", "reasons"), [m[1:] for m in MESSAGES], ids=[m[0] for m in MESSAGES]
)
def test_parse_message(raw: bytes | str, reasons: list[RejectReason | None]) -> None:
    results = parse_message(raw)
    got = [None if isinstance(r, TopicStatsEvent) else r.reason for r in results]
    assert got == reasons


@given(st.binary(max_size=200))
def test_parse_message_never_raises(raw: bytes) -> None:
    for result in parse_message(raw):
        assert isinstance(result, TopicStatsEvent | Rejection)


@given(
    st.dictionaries(
        st.sampled_from([*GOOD, "broker", "junk"]),
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False)
        | st.text(max_size=5),
    )
)
def test_schema_and_validator_agree_on_arbitrary_objects(obj: dict[str, Any]) -> None:
    text = resources.files("balancer").joinpath("schemas/topic-stats-event.schema.json").read_text()
    validator = jsonschema.Draft202012Validator(json.loads(text))
    decoded = json.loads(json.dumps({**GOOD, **obj}))
    assert validator.is_valid(decoded) is isinstance(validate_event(decoded), TopicStatsEvent)
