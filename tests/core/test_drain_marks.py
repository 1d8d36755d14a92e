"""Drain marks (issue 43, points 2 and 3): the record, and the restart rule."""

from __future__ import annotations

import json

import pytest

from balancer.core.drain_marks import (
    RESTART_RULE_BY,
    BadMarkError,
    DrainMark,
    changed,
    decode_mark,
    draining_brokers,
    new_mark,
    restart_rule,
)

B1, B2, B3 = "b1:8080", "b2:8080", "b3:8080"


def test_a_mark_round_trips_through_its_record() -> None:
    mark = new_mark("east", B1, by="ops@host", at_ms=1_000)
    key, value = mark.encode()
    assert key == b"east/b1:8080"
    assert decode_mark(key, value) == mark
    assert json.loads(value)["state"] == "draining"


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        (None, b"{}", "without a key"),
        (b"east/b1:8080", None, "tombstone"),
        (b"east/b1:8080", b"not json", "not JSON"),
        (b"east/b1:8080", b"[1]", "not a JSON object"),
        (b"east/b1:8080", b'{"state": "paused"}', "state must be"),
        (b"east/b2:8080", None, "tombstone"),
    ],
)
def test_a_bad_record_is_refused_with_its_reason(
    key: bytes | None, value: bytes | None, says: str
) -> None:
    with pytest.raises(BadMarkError, match=says):
        decode_mark(key, value)


def test_a_record_under_another_key_or_with_a_bad_field_is_refused() -> None:
    _, value = new_mark("east", B1, by="ops", at_ms=1).encode()
    with pytest.raises(BadMarkError, match="does not name"):
        decode_mark(b"east/b2:8080", value)
    body = json.loads(value)
    for field, bad in (("at_ms", -1), ("at_ms", True), ("broker", "no-port"), ("by", "")):
        broken = json.dumps({**body, field: bad}).encode()
        with pytest.raises(BadMarkError):
            decode_mark(b"east/b1:8080", broken)


def test_only_uncleared_marks_of_the_cluster_are_draining() -> None:
    a = new_mark("east", B1, by="ops", at_ms=1)
    b = changed(new_mark("east", B2, by="ops", at_ms=1), "cleared", by="ops", at_ms=2)
    c = changed(new_mark("east", B3, by="ops", at_ms=1), "gone", by=RESTART_RULE_BY, at_ms=2)
    d = new_mark("west", B1, by="ops", at_ms=1)
    assert draining_brokers([a, b, c, d], "east") == {B1, B3}


def _rule(marks: list[DrainMark], listed: set[str], at_ms: int = 5) -> list[DrainMark]:
    return list(restart_rule(marks, "east", listed, at_ms=at_ms))


def test_a_marked_broker_still_listed_keeps_its_mark() -> None:
    mark = new_mark("east", B1, by="ops", at_ms=1)
    assert _rule([mark], {B1, B2}) == []


def test_a_marked_broker_unlisted_is_gone_then_cleared_when_listed_again() -> None:
    mark = new_mark("east", B1, by="pod broker-1", at_ms=1)
    (gone,) = _rule([mark], {B2}, at_ms=10)
    assert (gone.state, gone.by, gone.at_ms) == ("gone", RESTART_RULE_BY, 10)
    assert (gone.marked_by, gone.marked_at_ms) == ("pod broker-1", 1)  # who asked is kept
    assert gone.draining  # still no new bundle for it while it is away
    assert _rule([gone], {B2}, at_ms=20) == []  # still away: nothing more
    (cleared,) = _rule([gone], {B1, B2}, at_ms=30)
    assert (cleared.state, cleared.at_ms) == ("cleared", 30)
    assert not cleared.draining


def test_a_cleared_mark_stays_cleared_and_other_clusters_are_left_alone() -> None:
    cleared = changed(new_mark("east", B1, by="ops", at_ms=1), "cleared", by="ops", at_ms=2)
    west = new_mark("west", B1, by="ops", at_ms=1)
    assert _rule([cleared, west], {B2}) == []


def test_an_empty_listing_changes_nothing() -> None:
    # A bad answer (no broker at all) must not mark every broker gone, then clear them all.
    mark = new_mark("east", B1, by="ops", at_ms=1)
    assert _rule([mark], set()) == []


def test_a_new_mark_refuses_a_broker_that_is_no_broker_id() -> None:
    with pytest.raises(BadMarkError, match="host:port"):
        new_mark("east", "http://b1:8080", by="ops", at_ms=1)
    with pytest.raises(BadMarkError, match="cluster"):
        new_mark("a/b", B1, by="ops", at_ms=1)
