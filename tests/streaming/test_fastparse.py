"""The fast path (`streaming.read.fastparse`) agrees with the one definition of a valid event.

When `decode_fast(raw)` returns a list, `parse_message(raw)` returns as many results with the
same values (typed: a count stays an int, a rate keeps the sign of its zero), the topic seen
through `full_name(name)`. decode_fast leaves the topic name to full_name: where that says
None, parse_message must reject the event as `invalid_topic` (RecordParser then takes the slow
path). None from decode_fast allows anything.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.core.buckets import topic_bucket
from balancer.core.events import MAX_MESSAGE_BYTES, Rejection, TopicStatsEvent, parse_message
from balancer.core.events import MAX_TIMESTAMP_MS as MAX_TS
from balancer.core.events import MIN_TIMESTAMP_MS as MIN_TS
from balancer.core.events import REQUIRED_FIELDS as REQUIRED
from balancer.core.hashing import topic_position
from balancer.core.topics import parse_topic
from streaming.read.fastparse import FastEvent, decode_fast
from streaming.read.parse import MAX_DEAD_LETTER_RAW_BYTES, RecordParser
from streaming.read.summary import ReadSummary
from streaming.read.topic_columns import CanonicalNames, DedupeChoice, full_name
from streaming.shared.packing import PACK_SCHEMA, decode, events_of
from streaming.shared.schema import RowKind
from streaming.shared.topic_keys import topic_keys

VALUE_FIELDS = (*(f for f in REQUIRED if f != "topic"), "broker")
MAX_FLOAT_INT = int(sys.float_info.max)


def typed(value: Any) -> tuple[str, Any]:
    """A value compared exactly: its type, and for floats every bit (-0.0 is not 0.0)."""
    return ("float", value.hex()) if isinstance(value, float) else (type(value).__name__, value)


def values(event: FastEvent | TopicStatsEvent) -> list[tuple[str, Any]]:
    return [typed(getattr(event, name)) for name in VALUE_FIELDS]


def check_contract(raw: bytes) -> list[FastEvent] | None:
    fast = decode_fast(raw)
    if fast is None:
        return None
    slow = parse_message(raw)
    assert len(slow) == len(fast), (fast, slow)
    for f, s in zip(fast, slow, strict=True):
        full = full_name(f.topic)
        if full is None:
            assert isinstance(s, Rejection) and s.reason == "invalid_topic", (f, s)
            continue
        assert isinstance(s, TopicStatsEvent), (f, s)
        assert (full, values(f)) == (s.topic, values(s))
    return fast


# --- the shared table ---------------------------------------------------------------------

GOOD: dict[str, Any] = {
    "cluster": "c1", "topic": "persistent://t/ns/a", "timestamp_ms": 1_700_000_000_000,
    "msgRateIn": 1.5, "msgRateOut": 2.0, "msgThroughputIn": 100.25, "msgThroughputOut": 0.0,
    "storageSize": 1000, "backlogSize": 10, "offloadedStorageSize": 0, "producerCount": 1,
    "consumerCount": 2, "broker": "b1:8080",
}  # fmt: skip


def enc(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def lit(field: str, text: str, base: dict[str, Any] = GOOD) -> bytes:
    """`base` with `field` spelled as the raw JSON `text`."""
    return json.dumps({**base, field: "@LIT@"}).replace('"@LIT@"', text).encode()


def swap(old: str, new: str) -> bytes:
    raw = enc(GOOD)
    assert old.encode() in raw
    return raw.replace(old.encode(), new.encode())


def env(*events: dict[str, Any]) -> bytes:
    return enc({"events": list(events)})


FAST, OK, ANY = "fast", "ok", "any"  # fast path accepts / parse_message accepts / either
OUT_OF_RANGE = "timestamp_out_of_range"
DUP = "duplicate_key"
GOOD_RAW = enc(GOOD)
DEEP = "[" * 100_000 + "]" * 100_000
SURROGATE_IDS = ("lone-surrogate-cluster", "lone-surrogate-topic")
NO_BROKER = {k: v for k, v in GOOD.items() if k != "broker"}
DUP_BROKER_ENVELOPE = env(GOOD, NO_BROKER).replace(
    b'"broker": "b1:8080"', b'"broker": "a", "broker": "b"'
)
DUP_IN_ENVELOPE = env(GOOD, GOOD).replace(
    b'"msgRateIn": 1.5', b'"msgRateIn": 1.5, "msgRateIn": 9', 1
)
DUP_WITH_ESCAPES = enc({**GOOD, "cluster": "c\u00e9"}).replace(
    b'"msgRateIn": 1.5', b'"msgRateIn": 1.5, "msgRateIn": 9'
)
CASES: list[tuple[str, bytes, str]] = [
    ("good", GOOD_RAW, FAST),
    ("good-without-broker", enc({k: v for k, v in GOOD.items() if k != "broker"}), FAST),
    ("envelope", env(GOOD, {**GOOD, "topic": "t/ns/b"}), FAST),
    ("empty-envelope", b'{"events": []}', FAST),
    ("envelope-one-bad", env(GOOD, {**GOOD, "msgRateOut": -1.0}, GOOD), "negative_value"),
    ("envelope-only-bad", env({**GOOD, "consumerCount": "2"}), "wrong_type"),
    ("envelope-extra-key", GOOD_RAW.join([b'{"events": [', b'], "x": 1}']), "wrong_type"),
    ("envelope-not-a-list", b'{"events": {}}', "wrong_type"),
    ("envelope-with-topic", b'{"events": [], "topic": "x"}', "missing_field"),
    ("nested-envelope", enc({"events": [{"events": [GOOD]}]}), "missing_field"),
    ("event-with-events-key", enc({**GOOD, "events": []}), "unknown_field"),
    ("int-rates", enc({**GOOD, "msgRateIn": 3, "msgThroughputIn": 2**55 + 1}), FAST),
    ("int-rate-above-bound", enc({**GOOD, "msgThroughputIn": 2**70 + 1}), "rate_too_high"),
    ("rate-1e300", lit("msgRateIn", "1e300"), "rate_too_high"),
    ("rate-at-bound", lit("msgRateIn", "1e18"), OK),
    ("rate-int-at-bound", lit("msgRateIn", str(10**18)), OK),
    ("rate-int-rounds-to-bound", lit("msgRateIn", str(10**18 + 1)), "rate_too_high"),
    ("rate-just-below-bound", lit("msgRateIn", repr(math.nextafter(1e18, 0))), FAST),
    ("rate-400-digits", lit("msgRateIn", "9" * 400), "not_finite"),
    ("rate-int-above-max-float", lit("msgRateIn", str(MAX_FLOAT_INT + 1)), "not_finite"),
    ("rate-int-max-float", lit("msgRateIn", str(MAX_FLOAT_INT)), "rate_too_high"),
    ("rate-float-max", lit("msgRateIn", repr(sys.float_info.max)), "rate_too_high"),
    ("rate-int-halfway", lit("msgRateIn", str(2**59 + 2**6 + 1)), FAST),
    ("rate-1e400", lit("msgRateIn", "1e400"), "not_finite"),
    ("rate-1e-400", lit("msgRateIn", "1e-400"), FAST),
    ("rate-minus-0.0", lit("msgRateOut", "-0.0"), FAST),
    ("rate-minus-0-int", lit("msgRateOut", "-0"), FAST),
    ("rate-nan", lit("msgRateIn", "NaN"), "bad_json"),
    ("rate-infinity", lit("msgRateIn", "Infinity"), "bad_json"),
    ("rate-minus-infinity", lit("msgRateIn", "-Infinity"), "bad_json"),
    ("count-400-digits", lit("storageSize", "9" * 400), "wrong_type"),
    ("count-5.0", lit("storageSize", "5.0"), OK),
    ("count-1e3", lit("backlogSize", "1e3"), OK),
    ("count-5.5", lit("storageSize", "5.5"), "wrong_type"),
    ("count-nan", lit("storageSize", "NaN"), "bad_json"),
    ("count-2**63-1", lit("storageSize", str(2**63 - 1)), FAST),
    ("count-2**63", lit("storageSize", str(2**63)), "wrong_type"),
    ("count-minus-0", lit("producerCount", "-0"), FAST),
    ("timestamp-float", lit("timestamp_ms", "1700000000000.0"), OK),
    ("timestamp-min", lit("timestamp_ms", str(MIN_TS)), FAST),
    ("timestamp-below-min", lit("timestamp_ms", str(MIN_TS - 1)), OUT_OF_RANGE),
    ("timestamp-below-max", lit("timestamp_ms", str(MAX_TS - 1)), FAST),
    ("timestamp-max", lit("timestamp_ms", str(MAX_TS)), OUT_OF_RANGE),
    ("timestamp-2**64", lit("timestamp_ms", str(2**64)), OUT_OF_RANGE),
    ("negative-rate", lit("msgRateIn", "-1.5"), "negative_value"),
    ("negative-count", lit("consumerCount", "-1"), "negative_value"),
    ("negative-timestamp", lit("timestamp_ms", "-1"), OUT_OF_RANGE),
    ("bool-rate", lit("msgRateIn", "true"), "wrong_type"),
    ("bool-count", lit("storageSize", "false"), "wrong_type"),
    ("bool-timestamp", lit("timestamp_ms", "true"), "wrong_type"),
    ("null-cluster", lit("cluster", "null"), "wrong_type"),
    ("null-rate", lit("msgRateIn", "null"), "wrong_type"),
    ("null-broker", lit("broker", "null"), FAST),
    ("number-broker", lit("broker", "1"), "wrong_type"),
    ("empty-cluster", lit("cluster", '""'), "wrong_type"),
    ("missing-field", enc({k: v for k, v in GOOD.items() if k != "backlogSize"}), "missing_field"),
    ("unknown-field", enc({**GOOD, "extra": 1}), "unknown_field"),
    ("dup-cluster", swap('"cluster": "c1"', '"cluster": "a", "cluster": "b"'), DUP),
    ("dup-rate", swap('"msgRateIn": 1.5', '"msgRateIn": 1.5, "msgRateIn": 7.25'), DUP),
    ("dup-rate-bad-first", swap('"msgRateIn": 1.5', '"msgRateIn": -1, "msgRateIn": 7.25'), DUP),
    ("dup-rate-bad-last", swap('"msgRateIn": 1.5', '"msgRateIn": 7.25, "msgRateIn": -1'), DUP),
    ("dup-topic", swap('"topic": "persistent://t/ns/a"', '"topic": "a/b", "topic": "x"'), DUP),
    ("dup-events", b'{"events": [1], "events": [' + GOOD_RAW + b"]}", DUP),
    ("dup-events-both-good", GOOD_RAW.join([b'{"events": [', b'], "events": [', b"]}"]), DUP),
    ("dup-broker", swap('"broker": "b1:8080"', '"broker": null, "broker": "b"'), DUP),
    ("dup-broker-in-envelope", DUP_BROKER_ENVELOPE, DUP),  # as many broker keys as events
    ("dup-in-envelope-event", DUP_IN_ENVELOPE, DUP),
    ("dup-rate-with-escapes", DUP_WITH_ESCAPES, DUP),  # counted by key name, not by quotes
    ("dup-escaped-key", swap('"cluster": "c1"', '"cluster": "a", "clust\\u0065r": "b"'), DUP),
    ("value-equal-to-a-key", enc({**GOOD, "topic": "cluster"}), OK),
    ("escaped-value", lit("cluster", r'"\u00e9"'), FAST),
    ("escaped-key", swap('"cluster"', '"clust\\u0065r"'), ANY),
    ("escapes", lit("cluster", r'"c\"1\\\/\b\f\n\r\t\u00e9\ud83d\ude00\u0000"'), FAST),
    ("raw-non-ascii", enc({**GOOD, "cluster": "ü"}).replace(b"\\u00fc", "ü".encode()), FAST),
    ("lone-surrogate-cluster", lit("cluster", r'"\ud800"'), "bad_encoding"),
    ("lone-surrogate-topic", lit("topic", r'"t/ns/\udc00"'), "bad_encoding"),
    ("non-utf8-in-string", lit("cluster", '"a@"').replace(b"@", b"\xff"), "bad_encoding"),
    ("encoded-surrogate", lit("cluster", '"a@"').replace(b"@", b"\xed\xa0\x80"), "bad_encoding"),
    ("raw-control-char", lit("cluster", '"a\x01"'), "bad_json"),
    ("raw-newline-in-string", lit("cluster", '"a\nb"'), "bad_json"),
    ("bom", b"\xef\xbb\xbf" + GOOD_RAW, "bad_json"),
    ("whitespace", b" \t\r\n" + GOOD_RAW + b"\n\r\t ", FAST),
    ("formfeed", b"\x0c" + GOOD_RAW, "bad_json"),
    ("nbsp", GOOD_RAW + "\u00a0".encode(), "bad_json"),
    ("trailing-garbage", GOOD_RAW + b"x", "bad_json"),
    ("two-objects", GOOD_RAW + GOOD_RAW, "bad_json"),
    ("deep-nesting", DEEP.encode(), "bad_json"),
    ("deep-nesting-in-broker", lit("broker", DEEP), "bad_json"),
    ("deep-nesting-in-envelope", b'{"events": ' + DEEP.encode() + b"}", "bad_json"),
    ("empty", b"", "bad_json"),
    ("array", b"[" + GOOD_RAW + b"]", "not_an_object"),
    ("string", b'"x"', "not_an_object"),
    ("topic-short", enc({**GOOD, "topic": "my-topic"}), FAST),
    ("topic-tenant-ns", enc({**GOOD, "topic": "t/ns/x"}), FAST),
    ("topic-non-persistent", enc({**GOOD, "topic": "non-persistent://t/ns/x"}), FAST),
    ("topic-unicode-local", enc({**GOOD, "topic": "persistent://t/ns/ünï 😀"}), FAST),
    ("topic-unicode-short", enc({**GOOD, "topic": "ünï"}), FAST),
    ("topic-partition", enc({**GOOD, "topic": "t/ns/x-partition-3"}), FAST),
    ("topic-trailing-space", enc({**GOOD, "topic": "persistent://t/ns/a "}), "invalid_topic"),
    ("topic-leading-space", enc({**GOOD, "topic": " t/ns/a"}), "invalid_topic"),
    ("topic-v1", enc({**GOOD, "topic": "persistent://t/ns/a/b"}), "invalid_topic"),
    ("topic-two-parts", enc({**GOOD, "topic": "t/x"}), "invalid_topic"),
    ("topic-bad-tenant", enc({**GOOD, "topic": "persistent://t!/ns/x"}), "invalid_topic"),
    ("topic-unicode-tenant", enc({**GOOD, "topic": "persistent://tü/ns/x"}), "invalid_topic"),
    ("topic-bad-domain", enc({**GOOD, "topic": "http://t/ns/x"}), "invalid_topic"),
    ("topic-empty-local", enc({**GOOD, "topic": "persistent://t/ns/"}), "invalid_topic"),
    ("topic-empty", enc({**GOOD, "topic": ""}), "wrong_type"),
    ("max-size", GOOD_RAW.ljust(MAX_MESSAGE_BYTES), FAST),
    ("too-large", GOOD_RAW.ljust(MAX_MESSAGE_BYTES + 1), "too_large"),
]


@pytest.mark.parametrize(("raw", "expect"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_edge_cases_keep_the_contract(raw: bytes, expect: str) -> None:
    fast = check_contract(raw)
    slow = parse_message(raw)
    if expect == FAST:  # the shapes collectors send must not pay for the slow path
        assert fast is not None and all(full_name(e.topic) for e in fast)
    elif expect == OK:
        assert slow and all(isinstance(r, TopicStatsEvent) for r in slow)
    elif expect != ANY:
        assert expect in [r.reason for r in slow if isinstance(r, Rejection)], slow


# --- generated messages -------------------------------------------------------------------


@dataclass
class Obj:
    """A JSON object as key/value pairs, so that keys can repeat."""

    pairs: list[tuple[str, Any]]


def dump(value: Any, ascii_only: bool) -> str:
    if isinstance(value, Obj):
        items = (f"{dump(k, ascii_only)}:{dump(v, ascii_only)}" for k, v in value.pairs)
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dump(v, ascii_only) for v in value) + "]"
    return json.dumps(value, ensure_ascii=ascii_only, allow_nan=True)


FORMS = ["{l}", "{t}/{n}/{l}", "persistent://{t}/{n}/{l}", "non-persistent://{t}/{n}/{l}"]
ENTITY = st.text("abXY09-=:._", min_size=1, max_size=4)
LOCAL = st.text(min_size=1, max_size=8).map(lambda s: s.replace("/", "_"))
AFFIX = st.sampled_from(["", "", " ", "\n", "\u2003", "/x"])
VALID_TOPICS = st.builds(  # nearly all valid
    lambda form, t, n, local: form.format(t=t, n=n, l=local), st.sampled_from(FORMS), ENTITY,
    ENTITY, LOCAL,
)  # fmt: skip
TOPICS = VALID_TOPICS | st.builds(  # or anything near a valid name
    lambda form, t, n, local, pre, post: pre + form.format(t=t, n=n, l=local) + post,
    st.sampled_from([*FORMS, "other://{t}/{n}/{l}", "{t}/{l}", "{t}/{n}/{l}/{l}"]),
    ENTITY | st.text(max_size=3), ENTITY | st.text(max_size=3), LOCAL | st.text(max_size=6),
    AFFIX, AFFIX,
)  # fmt: skip
WILD = st.one_of(
    st.integers(), st.integers(-(10**400), 10**400), st.floats(), st.booleans(), st.none(),
    st.text(max_size=4), st.lists(st.integers(), max_size=2),
    st.sampled_from(["\ud800", "a\udfff", MAX_FLOAT_INT + 1, MAX_FLOAT_INT, 2**63, 2**63 - 1,
                     -0.0, 5.0, MIN_TS - 1, MAX_TS - 1, MAX_TS]),
)  # fmt: skip
RATE = st.floats(min_value=0.0, allow_infinity=False) | st.integers(0, 2**80)
COUNT = st.integers(0, 2**63 - 1)
GOOD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "cluster": st.text(min_size=1, max_size=6), "topic": VALID_TOPICS | TOPICS,
    "timestamp_ms": st.integers(MIN_TS, MAX_TS - 1),
    "msgRateIn": RATE, "msgRateOut": RATE, "msgThroughputIn": RATE, "msgThroughputOut": RATE,
    "storageSize": COUNT, "backlogSize": COUNT, "offloadedStorageSize": COUNT,
    "producerCount": COUNT, "consumerCount": COUNT, "broker": st.none() | st.text(max_size=6),
}  # fmt: skip


@st.composite
def events(draw: st.DrawFn) -> Obj:
    """Mostly good events: a few fields get a wild value, go missing or are repeated."""
    changed = draw(st.just(set()) | st.sets(st.sampled_from(sorted(GOOD_VALUES)), max_size=3))
    pairs: list[tuple[str, Any]] = []
    for key, good in GOOD_VALUES.items():
        mode = draw(st.sampled_from(["wild", "drop", "dup"])) if key in changed else "good"
        if mode != "drop" and not (key == "broker" and draw(st.booleans())):
            pairs.append((key, draw(WILD if mode == "wild" else good)))
        if mode == "dup":
            pairs.append((key, draw(good | WILD)))
    if draw(st.integers(0, 7)) == 0:  # an unknown key, now and then
        pairs.append((draw(st.sampled_from(["x", "events", "Cluster", "cluster "])), draw(WILD)))
    return Obj(draw(st.permutations(pairs)))


ENVELOPES = st.builds(
    lambda evs, key, value: Obj([("events", evs)] + ([] if key is None else [(key, value)])),
    st.lists(events() | events() | WILD, max_size=4),
    st.sampled_from([None, None, None, "events", "topic", "x"]), WILD,
)  # fmt: skip
MESSAGES = st.builds(
    lambda obj, ascii_only: dump(obj, ascii_only).encode("utf-8", "surrogatepass"),
    events() | ENVELOPES | events() | WILD,
    st.booleans(),
)


@settings(max_examples=400, deadline=None)
@given(MESSAGES)
def test_generated_messages_keep_the_contract(raw: bytes) -> None:
    check_contract(raw)


# --- RecordParser end to end --------------------------------------------------------------

ROW_FIELDS = ("cluster", "namespace", "topic", "position", "bucket", "event_ms",
              "msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out",
              "storage_size", "backlog_size", "offloaded_storage_size", "producer_count",
              "consumer_count", "topic_key")  # fmt: skip
SLIDE_MS = 60_000
REJECT_FIELDS = ("reason", "detail", "kafka_offset", "raw")


def reference(messages: list[bytes], num_buckets: int, **rules: Any) -> list[tuple[Any, ...]]:
    """Rows straight from parse_message: the events of a flush, then its rejects.

    Events come in packs ordered by (bucket, pane), arrival order kept within a pack.
    """
    rows: list[tuple[Any, ...]] = []
    rejects: list[tuple[Any, ...]] = []
    for offset, raw in enumerate(messages):
        results = parse_message(raw, **rules)
        for index, r in enumerate(results):
            if isinstance(r, Rejection):
                detail = r.detail if len(results) == 1 else f"event {index}: {r.detail}"
                if len(raw) > MAX_DEAD_LETTER_RAW_BYTES:
                    detail += f" (raw bytes truncated to {MAX_DEAD_LETTER_RAW_BYTES} of {len(raw)})"
                rejects.append((str(r.reason), detail, offset, raw[:MAX_DEAD_LETTER_RAW_BYTES]))
                continue
            name = parse_topic(r.topic)
            (key,) = topic_keys([r.cluster], [name.full])
            rows.append(
                (r.cluster, name.namespace_name, name.full, topic_position(name),
                 topic_bucket(name, num_buckets), r.timestamp_ms,
                 *(getattr(r, f) for f in VALUE_FIELDS[2:-1]),  # rates, counts
                 int(key))
            )  # fmt: skip
    rows.sort(key=lambda row: (row[4], row[5] - row[5] % SLIDE_MS))  # stable
    return [tuple(map(typed, row)) for row in rows] + rejects


def run_parser(
    messages: list[bytes],
    num_buckets: int,
    names: CanonicalNames,
    dedupe: DedupeChoice | None = None,
    **rules: Any,
) -> list[Any]:
    summary = ReadSummary(partition=5, start_offset=0, next_offset=len(messages))
    parser = RecordParser(
        num_buckets=num_buckets,
        slide_ms=SLIDE_MS,
        summary=summary,
        names=names,
        dedupe=DedupeChoice() if dedupe is None else dedupe,
        **rules,
    )
    for offset, raw in enumerate(messages):
        parser.add(raw, 5, offset)
    batch = parser.flush()
    out: list[tuple[Any, ...]] = [
        tuple(typed(event[f]) for f in ROW_FIELDS) for event in events_of(batch)
    ]
    for row in batch.to_pylist():
        if row["kind"] == RowKind.PACK:
            assert row["events"] == len(decode([row["payload"]], PACK_SCHEMA))
        else:
            out.append(tuple(row[f] for f in REJECT_FIELDS))
    assert summary.consumed == len(out)
    return out


def never_dedupe() -> DedupeChoice:
    choice = DedupeChoice(probe_every=10**9)
    choice.measured(distinct=1, events=1)
    return choice


def test_the_record_parser_gives_the_reference_rows_for_the_whole_table() -> None:
    messages = [raw for name, raw, _ in CASES if name not in SURROGATE_IDS]
    names = CanonicalNames()  # shared: later parses meet names seen before
    for num_buckets, choice in ((16, DedupeChoice()), (5, DedupeChoice()), (5, never_dedupe())):
        got = run_parser(messages, num_buckets, names, choice)
        assert got == reference(messages, num_buckets)


@settings(max_examples=60, deadline=None)
@given(st.lists(MESSAGES, max_size=6), st.integers(1, 64), st.booleans())
def test_the_record_parser_gives_the_reference_rows(
    messages: list[bytes], n: int, dedupe: bool
) -> None:
    choice = DedupeChoice() if dedupe else never_dedupe()
    assert run_parser(messages, n, CanonicalNames(), choice) == reference(messages, n)


@pytest.mark.parametrize("case", SURROGATE_IDS)
def test_a_lone_surrogate_becomes_a_reject_not_a_crash(case: str) -> None:
    (raw,) = [raw for name, raw, _ in CASES if name == case]
    ((reason, *_),) = run_parser([raw], 4, CanonicalNames())
    assert reason == "bad_encoding"


# --- rules that need the reader's context: its clock and the configured clusters ----------

NOW_MS = GOOD["timestamp_ms"]
SKEW_MS = 600_000


def at(offset_ms: int, **fields: Any) -> dict[str, Any]:
    return {**GOOD, "timestamp_ms": NOW_MS + offset_ms, **fields}


CONTEXT_CASES: list[tuple[str, bytes, str | None]] = [
    ("now", enc(at(0)), None),
    ("at-the-skew", enc(at(SKEW_MS)), None),
    ("past-the-skew", enc(at(SKEW_MS + 1)), "timestamp_in_future"),
    ("a-day-ahead", enc(at(86_400_000)), "timestamp_in_future"),
    ("a-day-behind", enc(at(-86_400_000)), None),  # late, not poisoned: the windows decide
    ("envelope-one-ahead", env(at(0), at(86_400_000), at(0)), "timestamp_in_future"),
    ("unknown-cluster", enc(at(0, cluster="nowhere")), "unknown_cluster"),
    ("envelope-one-unknown", env(at(0), at(0, cluster="x")), "unknown_cluster"),
]
RULES: dict[str, Any] = {
    "now_ms": NOW_MS,
    "max_future_skew_ms": SKEW_MS,
    "clusters": frozenset({"c1"}),
}


@pytest.mark.parametrize(
    ("raw", "reason"), [c[1:] for c in CONTEXT_CASES], ids=[c[0] for c in CONTEXT_CASES]
)
def test_the_reader_rules_reject_with_their_reason_on_both_paths(
    raw: bytes, reason: str | None
) -> None:
    slow = parse_message(raw, **RULES)
    rejected = [r.reason for r in slow if isinstance(r, Rejection)]
    assert rejected == ([] if reason is None else [reason])
    rows = run_parser([raw], 4, CanonicalNames(), **RULES)
    assert rows == reference([raw], 4, **RULES)
    assert [r[0] for r in rows if isinstance(r[0], str)] == rejected
    # Without the context, the same messages are accepted (the rules are the reader's).
    assert not [r for r in parse_message(raw) if isinstance(r, Rejection)]


def test_the_reader_rules_keep_the_whole_table_in_agreement() -> None:
    messages = [raw for name, raw, _ in CASES if name not in SURROGATE_IDS]
    messages += [raw for _, raw, _ in CONTEXT_CASES]
    rules = {**RULES, "clusters": frozenset({"c1", "a", "b", "ü"})}
    assert run_parser(messages, 8, CanonicalNames(), **rules) == reference(messages, 8, **rules)
