"""The traffic model: rate shapes, partitions, outstanding topics, and bytes written as a
pure function of simulated time."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.core.hashing import hash_position
from balancer.sim.scenarios import parse_scenario
from balancer.sim.traffic import TrafficModel


def model(namespace: dict[str, Any], **top: Any) -> TrafficModel:
    doc: dict[str, Any] = {
        "name": "t",
        "seed": 5,
        "clusters": [{"name": "a"}],
        "namespaces": [{"name": "t/ns", "cluster": "a", **namespace}],
    }
    doc.update(top)
    return TrafficModel(parse_scenario(doc))


def rate_of(m: TrafficModel, local: str, t: float = 0.0) -> float:
    i = m.table.local_names.index(local)
    return float(m.rates(t).msg_rate_in[i])


def test_names_positions_and_partitions() -> None:
    m = model({"topic_groups": [{"name": "o", "partitions": 3}, {"name": "e", "count": 2}]})
    assert m.table.full_names == (
        "persistent://t/ns/o-partition-0",
        "persistent://t/ns/o-partition-1",
        "persistent://t/ns/o-partition-2",
        "persistent://t/ns/e-0",
        "persistent://t/ns/e-1",
    )
    assert list(m.table.positions) == [hash_position(n) for n in m.table.full_names]
    assert m.table.partitioned == ({"o": 3},)


@pytest.mark.parametrize(("exponent", "skewed"), [(0.0, False), (1.2, True)], ids=["even", "zipf"])
def test_zipf_spreads_the_group_total(exponent: float, skewed: bool) -> None:
    m = model(
        {
            "topic_groups": [
                {"name": "e", "count": 100, "total_msg_rate_in": 5000, "zipf_exponent": exponent}
            ]
        }
    )
    rates = np.sort(m.rates(0).msg_rate_in)[::-1]
    assert rates.sum() == pytest.approx(5000)
    if skewed:
        # Zipf: the k-th largest is the largest / k^s.
        assert rates[0] / rates[9] == pytest.approx(10**1.2)
    else:
        assert rates.max() == pytest.approx(rates.min())


def test_partitions_share_their_topic_rate_and_outstanding_overrides() -> None:
    m = model(
        {
            "topic_groups": [
                {
                    "name": "o",
                    "partitions": 4,
                    "total_msg_rate_in": 400,
                    "avg_msg_size_bytes": 100,
                    "subscriptions": 3,
                }
            ],
            "outstanding": [
                {"topic": "o-partition-2", "msg_rate_in": 5000, "avg_msg_size_bytes": 10},
                {"topic": "extra", "msg_rate_in": 7},
            ],
        }
    )
    r = m.rates(0)
    i = m.table.local_names.index("o-partition-2")
    assert [rate_of(m, f"o-partition-{p}") for p in (0, 1, 3)] == [100.0] * 3
    assert r.msg_rate_in[i] == 5000 and r.throughput_in[i] == 50_000
    assert r.msg_rate_out[i] == 15_000  # three subscriptions
    assert rate_of(m, "extra") == 7


def test_step_and_ramp_changes() -> None:
    m = model(
        {
            "topic_groups": [
                {"name": "a", "total_msg_rate_in": 100},
                {"name": "b", "total_msg_rate_in": 100},
            ],
            "changes": [
                {"kind": "step", "at_s": 60, "factor": 3, "topics": ["a"]},
                {"kind": "ramp", "from_s": 100, "to_s": 200, "factor": 0.0, "topics": ["b*"]},
            ],
        }
    )
    assert [rate_of(m, "a", t) for t in (0, 59.9, 60, 1e6)] == [100, 100, 300, 300]
    assert [rate_of(m, "b", t) for t in (0, 100, 150, 200, 300)] == pytest.approx(
        [100, 100, 50, 0, 0]
    )


def test_daily_cycle_peaks_at_its_hour() -> None:
    m = model(
        {
            "topic_groups": [{"name": "a", "total_msg_rate_in": 100}],
            "daily_cycle": {"amplitude": 0.5, "peak_hour_utc": 14},
        },
        start_time="2026-01-01T00:00:00Z",
    )
    assert rate_of(m, "a", 14 * 3600) == pytest.approx(150)
    assert rate_of(m, "a", 2 * 3600) == pytest.approx(50)
    assert rate_of(m, "a", 8 * 3600) == pytest.approx(100)
    assert rate_of(m, "a", 38 * 3600) == pytest.approx(150)


def test_noise_is_seeded_and_redrawn_per_interval() -> None:
    group = {"topic_groups": [{"name": "e", "count": 50, "total_msg_rate_in": 500}]}
    a = model(group, noise_pct=10, noise_interval_s=60)
    b = model(group, noise_pct=10, noise_interval_s=60)
    c = model(group, noise_pct=10, noise_interval_s=60, seed=6)
    assert np.array_equal(a.rates(10).msg_rate_in, b.rates(10).msg_rate_in)
    assert np.array_equal(a.rates(10).msg_rate_in, a.rates(59).msg_rate_in)
    assert not np.array_equal(a.rates(10).msg_rate_in, a.rates(61).msg_rate_in)
    assert not np.array_equal(a.rates(10).msg_rate_in, c.rates(10).msg_rate_in)
    assert (a.rates(10).msg_rate_in >= 0).all()


def test_bytes_written_integrates_a_constant_rate_exactly() -> None:
    m = model(
        {
            "topic_groups": [
                {
                    "name": "a",
                    "total_msg_rate_in": 10,
                    "avg_msg_size_bytes": 100,
                    "initial_storage_bytes": 5000,
                }
            ]
        }
    )
    assert m.bytes_written(0)[0] == 5000
    assert m.bytes_written(90.5)[0] == pytest.approx(5000 + 1000 * 90.5)


def test_bytes_written_of_a_ramp_is_close_to_the_integral() -> None:
    m = model(
        {
            "topic_groups": [{"name": "a", "total_msg_rate_in": 100, "avg_msg_size_bytes": 1}],
            "changes": [{"kind": "ramp", "from_s": 0, "to_s": 3600, "factor": 3}],
        }
    )
    # Rate goes 100 -> 300 over an hour: integral = 3600 * 200.
    assert m.bytes_written(3600)[0] == pytest.approx(720_000, rel=1e-6)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=20_000, allow_nan=False), min_size=1, max_size=6))
def test_bytes_written_depends_only_on_the_time_asked(times: list[float]) -> None:
    shape = {
        "topic_groups": [{"name": "e", "count": 5, "total_msg_rate_in": 500, "zipf_exponent": 1}],
        "changes": [{"kind": "step", "at_s": 1000, "factor": 4}],
        "daily_cycle": {"amplitude": 0.3},
    }
    walked = model(shape, noise_pct=5)
    for t in times:  # any order, including going back in time
        walked.bytes_written(t)
    fresh = model(shape, noise_pct=5)
    last = times[-1]
    assert np.allclose(walked.bytes_written(last), fresh.bytes_written(last), rtol=1e-12)


def test_bytes_written_never_decrease() -> None:
    m = model(
        {
            "topic_groups": [{"name": "e", "count": 20, "total_msg_rate_in": 100}],
            "daily_cycle": {"amplitude": 0.9},
        },
        noise_pct=30,
    )
    series = np.stack([m.bytes_written(t) for t in range(0, 20_000, 333)])
    assert (np.diff(series, axis=0) >= 0).all()


def test_a_hundred_thousand_topics_stay_cheap() -> None:
    m = model(
        {
            "topic_groups": [
                {"name": "e", "count": 100_000, "total_msg_rate_in": 1e6, "zipf_exponent": 1.1}
            ]
        }
    )
    assert m.table.size == 100_000
    assert math.isclose(float(m.rates(30).msg_rate_in.sum()), 1e6, rel_tol=1e-9)
    assert m.bytes_written(3600).shape == (100_000,)
