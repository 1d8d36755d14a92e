"""Controller building blocks with a fake clock: breaker, rate limits, journal, audit, lists."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from balancer.controller.audit import AuditLog, scrub
from balancer.controller.breaker import BreakerState, CircuitBreaker
from balancer.controller.clock import FakeClock
from balancer.controller.journal import Journal
from balancer.controller.rate_limits import ActionLimits, SlidingWindowLimiter
from balancer.controller.settings import ControllerSettings
from balancer.core.decisions import DecisionKind


def test_breaker_opens_after_n_consecutive_failures_and_pauses() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker("east", failure_threshold=3, cooloff_s=30, clock=clock)
    for _ in range(2):
        assert breaker.allow()
        breaker.record_failure()
    breaker.record_success()  # a success in between resets the streak
    for _ in range(3):
        assert breaker.allow()
        breaker.record_failure()
    assert breaker.status().state is BreakerState.OPEN
    assert not breaker.allow()
    clock.advance(29.9)
    assert not breaker.allow()
    clock.advance(0.2)
    assert breaker.allow()  # half-open: one trial
    assert breaker.status().state is BreakerState.HALF_OPEN
    assert not breaker.allow()  # only one trial at a time
    breaker.record_failure()  # the trial fails: open again for a full cool-off
    status = breaker.status()
    assert status.state is BreakerState.OPEN and status.times_opened == 2
    clock.advance(30.1)
    assert breaker.allow()
    breaker.record_success()
    assert breaker.status().state is BreakerState.CLOSED and breaker.allow()


@pytest.mark.parametrize(
    ("bad", "value"), [("failure_threshold", 0), ("cooloff_s", 0)], ids=["threshold", "cooloff"]
)
def test_breaker_rejects_impossible_settings(bad: str, value: float) -> None:
    kwargs = {"failure_threshold": 3, "cooloff_s": 10.0, bad: value}
    with pytest.raises(ValueError):
        CircuitBreaker("c", clock=FakeClock(), **kwargs)  # type: ignore[arg-type]


def test_sliding_window_limiter() -> None:
    clock = FakeClock()
    limiter = SlidingWindowLimiter(2, clock)
    for _ in range(2):
        assert limiter.available("k")
        limiter.acquire("k")
    assert not limiter.available("k") and limiter.available("other")
    clock.advance(59.9)
    assert not limiter.available("k")
    clock.advance(0.2)
    assert limiter.available("k")
    assert not SlidingWindowLimiter(0, clock).available("k")


def test_action_limits_per_cluster_and_namespace() -> None:
    clock = FakeClock()
    limits = ActionLimits(
        splits_per_minute=3,
        splits_per_minute_per_namespace=2,
        offloads_per_minute=1,
        offloads_per_minute_per_namespace=1,
        clock=clock,
    )
    split = DecisionKind.SPLIT
    assert limits.try_acquire(split, "east", "a/x") is None
    assert limits.try_acquire(split, "east", "a/x") is None
    assert limits.try_acquire(split, "east", "a/x") == "namespace"
    assert limits.try_acquire(split, "east", "a/y") is None
    assert limits.try_acquire(split, "east", "a/z") == "cluster"
    assert limits.try_acquire(split, "west", "a/z") is None  # per cluster
    assert limits.try_acquire(DecisionKind.OFFLOAD, "east", "a/x") is None  # own budget
    assert limits.try_acquire(DecisionKind.OFFLOAD, "east", "a/y") == "cluster"
    clock.advance(60.1)
    assert limits.try_acquire(split, "east", "a/x") is None


def test_journal_intent_outcome_and_durability(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    journal = Journal(path)
    args = dict(
        kind="split",
        cluster="east",
        namespace="a/x",
        target="a/x/0x0_0x1",
        action_key="split|k",
        payload={"call": {"b": [1, 2]}},
        batch_id="3",
    )
    assert journal.record_intent(decision_id="d1", at_ms=10, **args)  # type: ignore[arg-type]
    assert not journal.record_intent(decision_id="d1", at_ms=11, **args)  # type: ignore[arg-type]
    assert [e.decision_id for e in journal.pending()] == ["d1"]
    assert journal.applied_with_key("split|k") is not None  # pending counts: maybe applied
    journal.mark_batch("3", at_ms=12)
    journal.close()

    reopened = Journal(path)
    (entry,) = reopened.pending()
    assert entry.payload == {"call": {"b": [1, 2]}} and entry.batch_id == "3"
    reopened.record_outcome("d1", result="failed", detail="x", at_ms=20)
    assert reopened.pending() == []
    assert reopened.applied_with_key("split|k") is None  # a failed action may be tried again
    assert reopened.batch_handled("3") and not reopened.batch_handled("4")
    got = reopened.get("d1")
    assert got is not None and (got.result, got.outcome_at_ms) == ("failed", 20)
    reopened.close()


def test_scrub_masks_secret_keys_and_bearer_text() -> None:
    record = {
        "token_file": "/x",
        "headers": {"Authorization": "Bearer abc"},
        "detail": "HTTP 401 for Bearer eyJ.abc.def, retry",
        "ok": [1, {"password": "p"}],
    }
    clean = scrub(record)
    text = json.dumps(clean)
    assert "eyJ.abc.def" not in text and "abc" not in text and '"p"' not in text
    assert clean["ok"][0] == 1 and clean["detail"].startswith("HTTP 401 for Bearer ***")


def test_audit_log_writes_one_json_line_per_record(tmp_path: Path) -> None:
    stream = io.StringIO()
    log = AuditLog(stream=stream)
    log.write({"a": 1})
    log.write({"b": "Bearer secret-token"})
    lines = stream.getvalue().splitlines()
    assert [json.loads(x) for x in lines] == [{"a": 1}, {"b": "Bearer ***"}]
    file_log = AuditLog(tmp_path / "sub" / "audit.jsonl")
    file_log.write({"c": 2})
    file_log.close()
    assert (tmp_path / "sub" / "audit.jsonl").read_text() == '{"c": 2}\n'


@pytest.mark.parametrize(
    ("namespace", "allowed"),
    [("acme/orders", True), ("acme/legacy", False), ("shop/x", False), ("acme", False)],
    ids=["allowed", "deny-wins", "outside-allow", "tenant-only"],
)
def test_allow_and_deny_lists(namespace: str, allowed: bool) -> None:
    settings = ControllerSettings(allow_namespaces=("acme/*",), deny_namespaces=("acme/leg*",))
    assert settings.allows(namespace) is allowed


def test_empty_allow_list_touches_nothing() -> None:
    assert not ControllerSettings(allow_namespaces=()).allows("acme/orders")
