"""The rollout record (issue 43, point 4): round trip on the marks topic, bad records refused
with a reason, when a roll is complete, and how long its moves count."""

from __future__ import annotations

import json

import pytest

from balancer.core.drain_marks import RESTART_RULE_BY, BadMarkError, changed, new_mark
from balancer.core.rollout_record import (
    decode_rollout,
    finished,
    is_rollout_key,
    new_rollout,
    roll_complete,
    roll_moves_count_since,
)

ORDER = ("b-1:8080", "b-0:8080")
PAUSED = {"loadBalancerSheddingEnabled": "true"}


def test_a_rollout_round_trips_and_its_key_is_no_marks() -> None:
    rollout = new_rollout("east", ORDER, PAUSED, by="ops", at_ms=7)
    key, value = rollout.encode()
    assert key == b"east/@rollout" and is_rollout_key(key)
    assert not is_rollout_key(new_mark("east", "b-1:8080", by="x", at_ms=1).encode()[0])
    assert decode_rollout(key, value) == rollout
    done = finished(rollout, by="ops", at_ms=9)
    assert decode_rollout(*done.encode()).state == "finished"


def test_the_switches_from_broker_conf_round_trip_and_an_older_record_has_none() -> None:
    rollout = new_rollout(
        "east", ORDER, PAUSED, by="ops", at_ms=7, unset=["loadBalancerSheddingEnabled"]
    )
    key, value = rollout.encode()
    assert decode_rollout(key, value).unset == ("loadBalancerSheddingEnabled",)
    older = {k: v for k, v in json.loads(value).items() if k != "unset"}  # before 2026-11-29
    assert decode_rollout(key, json.dumps(older).encode()).unset == ()
    with pytest.raises(BadMarkError, match="not all among the paused"):
        new_rollout("east", ORDER, PAUSED, by="ops", at_ms=7, unset=["brokerServicePort"])


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"state": "paused"}, "state must be"),
        ({"order": "b-1:8080"}, "order must be"),
        ({"paused": {"x": ""}}, "paused must"),
        ({"started_at_ms": -1}, "started_at_ms"),
        ({"kind": "mark"}, "kind 'rollout'"),
        ({"unset": ["loadBalancerAutoBundleSplitEnabled"]}, "unset must"),
        ({"unset": "loadBalancerSheddingEnabled"}, "unset must"),
    ],
)
def test_a_bad_rollout_record_is_refused_with_its_reason(
    change: dict[str, object], reason: str
) -> None:
    key, value = new_rollout("east", ORDER, PAUSED, by="ops", at_ms=7).encode()
    body = {**json.loads(value), **change}
    with pytest.raises(BadMarkError, match=reason):
        decode_rollout(key, json.dumps(body).encode())
    with pytest.raises(BadMarkError, match="does not name"):
        decode_rollout(b"west/@rollout", value)


def test_a_roll_is_complete_once_every_broker_was_back_after_it_started() -> None:
    rollout = new_rollout("east", ORDER, PAUSED, by="ops", at_ms=100)
    back = [changed(new_mark("east", b, by="hook", at_ms=200), "cleared", by=RESTART_RULE_BY,
                    at_ms=300) for b in ORDER]  # fmt: skip
    assert roll_complete(rollout, back)
    assert not roll_complete(rollout, back[:1])
    by_hand = [changed(m, "cleared", by="ops", at_ms=300) for m in back]  # `drain --undo`
    assert not roll_complete(rollout, [back[0], by_hand[1]])
    early = [changed(m, "cleared", by=RESTART_RULE_BY, at_ms=50) for m in back]
    assert not roll_complete(rollout, early)
    assert not roll_complete(finished(rollout, by="ops", at_ms=400), back)


def test_moves_count_while_rolling_and_twice_the_grace_period_after() -> None:
    rollout = new_rollout("east", ORDER, PAUSED, by="ops", at_ms=100)
    assert roll_moves_count_since(None, now_ms=10**9, grace_period_s=1800) is None
    assert roll_moves_count_since(rollout, now_ms=10**9, grace_period_s=1800) == 100
    done = finished(rollout, by="ops", at_ms=1_000)
    assert roll_moves_count_since(done, now_ms=1_000 + 3_600_000, grace_period_s=1800) == 100
    assert roll_moves_count_since(done, now_ms=1_001 + 3_600_000, grace_period_s=1800) is None
