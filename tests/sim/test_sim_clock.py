"""The simulated clock: manual by default, scaled wall-clock on request."""

from __future__ import annotations

import pytest

from balancer.sim.sim_clock import SimClock


def test_manual_clock_moves_only_when_advanced() -> None:
    clock = SimClock(1_000_000)
    assert clock.now_ms() == 1_000_000 and clock.elapsed_s() == 0
    clock.advance(1.5)
    clock.advance(0)
    assert clock.now_ms() == 1_001_500
    with pytest.raises(ValueError, match="negative"):
        clock.advance(-1)


def test_scaled_clock_follows_the_given_monotonic_source() -> None:
    real = [100.0]
    clock = SimClock(0, time_scale=60.0, monotonic=lambda: real[0])
    real[0] += 2.0  # two real seconds = two simulated minutes
    assert clock.elapsed_s() == pytest.approx(120.0)
    clock.advance(30)
    assert clock.now_ms() == 150_000


def test_negative_scale_is_rejected() -> None:
    with pytest.raises(ValueError, match="time_scale"):
        SimClock(0, time_scale=-1)
