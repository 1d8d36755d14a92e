"""Offload point by size threshold: Pulsar's CLI rule and its test vectors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from balancer.core.offload import (
    InvalidInternalStats,
    LedgerSize,
    MessageId,
    bookkeeper_bytes,
    offload_point,
    offload_point_from_stats,
)

# Pulsar's own vectors: ledgers (id, size) = (0, 1000), (1, 2000), (2, 3000).
PULSAR = [(0, 1000), (1, 2000), (2, 3000)]
VECTORS = [
    (0, (2, 0)),
    (1000, (2, 0)),
    (2999, (2, 0)),
    (3000, (2, 0)),  # over only once ledger 1 is added: offload up to ledger 2
    (4999, (2, 0)),
    (5000, (1, 0)),
    (5999, (1, 0)),
    (6000, None),
    (2**63 - 1, None),
]


@pytest.mark.parametrize(("threshold", "expected"), VECTORS, ids=[str(t) for t, _ in VECTORS])
def test_pulsar_vectors(threshold: int, expected: tuple[int, int] | None) -> None:
    ledgers = [LedgerSize(i, s) for i, s in PULSAR]
    point = offload_point(ledgers, current_ledger_size=3000, threshold_bytes=threshold)
    assert (None if point is None else (point.ledger_id, point.entry_id)) == expected


def stats(**extra: Any) -> dict[str, Any]:
    # The current ledger's "size" is not filled in by Pulsar: currentLedgerSize counts.
    body: dict[str, Any] = {
        "ledgers": [
            {"ledgerId": 10, "entries": 5, "size": 1000, "offloaded": False},
            {"ledgerId": 11, "entries": 5, "size": 2000, "offloaded": False},
            {"ledgerId": 12, "entries": 5},
        ],
        "currentLedgerSize": 3000,
    }
    body.update(extra)
    return body


def test_from_internal_stats_uses_current_ledger_size() -> None:
    assert offload_point_from_stats(stats(), 5000) == MessageId(11, 0, -1)
    assert offload_point_from_stats(stats(), 0) == MessageId(12, 0)
    assert offload_point_from_stats(stats(currentLedgerSize=0), 2500) == MessageId(11, 0)
    assert offload_point_from_stats(stats(currentLedgerSize=0), 1999) == MessageId(12, 0)
    # A stale "size" on the current ledger is ignored in favour of currentLedgerSize.
    body = stats()
    body["ledgers"][-1]["size"] = 10**9
    assert offload_point_from_stats(body, 5000) == MessageId(11, 0)


def test_message_id_json_is_pulsars_body() -> None:
    assert MessageId(11, 0).to_json() == {"ledgerId": 11, "entryId": 0, "partitionIndex": -1}


def test_no_ledgers_nothing_to_offload() -> None:
    assert offload_point([], 0, 0) is None
    assert offload_point_from_stats({"ledgers": [], "currentLedgerSize": 0}, 0) is None


BAD_STATS = [
    ([], "JSON object"),
    ({}, "no 'ledgers'"),
    ({"ledgers": {}}, "no 'ledgers'"),
    ({"ledgers": [{"size": 1}]}, r"ledgers\[0\] has no integer 'ledgerId'"),
    ({"ledgers": [{"ledgerId": "1"}]}, "ledgerId"),
    ({"ledgers": [{"ledgerId": 1, "size": -1}]}, "invalid 'size'"),
    ({"ledgers": [{"ledgerId": 1, "size": 1.5}]}, "invalid 'size'"),
    ({"ledgers": [{"ledgerId": 1}], "currentLedgerSize": "9"}, "currentLedgerSize"),
]


@pytest.mark.parametrize(("body", "problem"), BAD_STATS, ids=[p for _, p in BAD_STATS])
def test_bad_internal_stats(body: Any, problem: str) -> None:
    with pytest.raises(InvalidInternalStats, match=problem):
        offload_point_from_stats(body, 0)


def test_negative_threshold_is_an_error() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        offload_point([LedgerSize(1, 1)], 0, -1)


@given(
    sizes=st.lists(st.integers(0, 10_000), min_size=1, max_size=8),
    threshold=st.integers(0, 50_000),
)
def test_keeps_at_most_threshold_plus_one_ledger(sizes: list[int], threshold: int) -> None:
    ledgers = [LedgerSize(i, s) for i, s in enumerate(sizes)]
    point = offload_point(ledgers, sizes[-1], threshold)
    if point is None:
        assert sum(sizes) <= threshold
        return
    kept = sum(sizes[point.ledger_id :])
    if kept > threshold:  # the current ledger alone is over: offload everything older
        assert point.ledger_id == len(sizes) - 1
    else:  # the newest ledgers that fit are kept; the next older one tips it over
        assert point.ledger_id > 0 and kept + sizes[point.ledger_id - 1] > threshold


@pytest.mark.parametrize(
    ("offloaded", "threshold", "expected"),
    [
        ((True, True), 3000, None),  # only the current ledger is in BookKeeper
        ((True, True), 2999, (2, 0)),  # the current ledger alone is over: offload the rest
        ((True, False), 5000, None),  # 3000 + 2000 in BookKeeper: not over
        ((True, False), 4999, (2, 0)),
        ((False, False), 5000, (1, 0)),  # nothing offloaded: Pulsar's own rule
    ],
    ids=["all-offloaded-at", "all-offloaded-over", "some-at", "some-over", "none"],
)
def test_offloaded_ledgers_count_nothing(
    offloaded: tuple[bool, bool], threshold: int, expected: tuple[int, int] | None
) -> None:
    """The point comes from the bytes still in BookKeeper: a topic offloaded before is not
    offloaded again while what is left is under the threshold."""
    ledgers = [
        LedgerSize(0, 1000, offloaded[0]),
        LedgerSize(1, 2000, offloaded[1]),
        LedgerSize(2, 0),
    ]
    point = offload_point(ledgers, current_ledger_size=3000, threshold_bytes=threshold)
    assert (None if point is None else (point.ledger_id, point.entry_id)) == expected
    body = {
        "ledgers": [
            {"ledgerId": lg.ledger_id, "size": lg.size_bytes, "offloaded": lg.offloaded}
            for lg in ledgers
        ],
        "currentLedgerSize": 3000,
    }
    assert offload_point_from_stats(body, threshold) == point
    kept = 3000 + sum(lg.size_bytes for lg in ledgers[:2] if not lg.offloaded)
    assert bookkeeper_bytes(ledgers, 3000) == kept


def test_offloaded_flag_must_be_a_boolean() -> None:
    body = {"ledgers": [{"ledgerId": 0, "size": 1, "offloaded": "yes"}], "currentLedgerSize": 0}
    with pytest.raises(InvalidInternalStats, match="offloaded"):
        offload_point_from_stats(body, 0)
