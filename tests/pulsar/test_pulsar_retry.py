"""Backoff schedule and retry classification of the admin client (pure pieces)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from balancer.pulsar.retry import RetryPolicy, is_retryable_status, parse_retry_after_s


@pytest.mark.parametrize(
    ("retry_number", "ceiling_s"),
    [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (40, 1.0), (10_000, 1.0)],
    ids=["first", "second", "third", "fourth", "capped", "far", "huge-exponent"],
)
def test_ceiling_doubles_until_the_cap(retry_number: int, ceiling_s: float) -> None:
    policy = RetryPolicy(max_attempts=5, base_delay_s=0.1, max_delay_s=1.0)
    assert policy.ceiling_s(retry_number) == pytest.approx(ceiling_s)


class _FixedRng(random.Random):
    """uniform() returns the top of the range: the largest wait full jitter could pick."""

    def uniform(self, a: float, b: float) -> float:
        return b


@given(
    retry_number=st.integers(min_value=1, max_value=200),
    base=st.floats(min_value=0.0, max_value=10.0),
    cap=st.floats(min_value=0.0, max_value=60.0),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_full_jitter_stays_within_zero_and_the_ceiling(
    retry_number: int, base: float, cap: float, seed: int
) -> None:
    policy = RetryPolicy(max_attempts=3, base_delay_s=base, max_delay_s=cap)
    delay = policy.delay_s(retry_number, random.Random(seed))
    assert 0.0 <= delay <= policy.ceiling_s(retry_number) <= cap


def test_jitter_spreads_waits_over_the_whole_range() -> None:
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=1.0)
    rng = random.Random(7)
    delays = [policy.delay_s(1, rng) for _ in range(2000)]
    # Full jitter: about a quarter of draws in each quarter of [0, 1].
    assert min(delays) < 0.05 and max(delays) > 0.95
    assert 400 < sum(d < 0.25 for d in delays) < 600


@pytest.mark.parametrize(
    ("retry_after_s", "expected_s"),
    [(None, 0.0), (0.5, 0.5), (3.0, 2.0)],
    ids=["no-header", "floor", "capped-at-max-delay"],
)
def test_retry_after_is_a_floor_capped_at_max_delay(
    retry_after_s: float | None, expected_s: float
) -> None:
    class _Zero(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return a

    policy = RetryPolicy(base_delay_s=0.1, max_delay_s=2.0)
    assert policy.delay_s(1, _Zero(), retry_after_s=retry_after_s) == expected_s


def test_the_largest_wait_is_the_ceiling() -> None:
    policy = RetryPolicy(base_delay_s=0.25, max_delay_s=10.0)
    assert [policy.delay_s(n, _FixedRng()) for n in (1, 2, 3)] == [0.25, 0.5, 1.0]


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (200, False),
        (307, False),
        (400, False),
        (401, False),
        (404, False),
        (409, False),
        (412, False),
        (429, True),
        (500, True),
        (502, True),
        (503, True),
        (504, True),
    ],
    ids=lambda v: str(v),
)
def test_only_429_and_5xx_are_retried(status: int, retryable: bool) -> None:
    assert is_retryable_status(status) is retryable


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("3", 3.0),
        (" 10 ", 10.0),
        ("-1", None),
        ("1.5", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", None),
        ("", None),
    ],
    ids=["absent", "seconds", "padded", "negative", "fraction", "http-date", "empty"],
)
def test_retry_after_parsing(header: str | None, expected: float | None) -> None:
    assert parse_retry_after_s(header) == expected


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"base_delay_s": -1.0},
        {"max_delay_s": float("inf")},
        {"base_delay_s": float("nan")},
    ],
    ids=["zero-attempts", "negative-base", "infinite-cap", "nan-base"],
)
def test_bad_policies_are_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_retry_number_starts_at_one() -> None:
    with pytest.raises(ValueError, match="retry_number"):
        RetryPolicy().ceiling_s(0)
