"""The scale and capacity benchmarks' own parts: memory sampler, last lines, keep-up, speedup."""

from __future__ import annotations

import os
import subprocess
import sys

from bench.capacity import CapacityRun, capacity_run, speedup
from bench.scale import LAST_LINE, ScaleResult, steady_minute_s, tree_rss_bytes


def test_tree_rss_counts_children() -> None:
    alone = tree_rss_bytes(os.getpid())
    assert alone > 10 * 1024**2  # a Python interpreter with numpy & co. loaded
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        for _ in range(100):  # until the child has started and shows up
            if tree_rss_bytes(os.getpid()) > alone + 1024**2:
                break
            subprocess.run(["true"], check=True)
        assert tree_rss_bytes(os.getpid()) > alone + 1024**2
    finally:
        child.kill()
        child.wait()


def test_pipeline_last_line_is_parsed() -> None:
    m = LAST_LINE.match("events_per_s=101234.5 raw_events_per_s=150000.0 ratio=0.67")
    assert m is not None
    assert (float(m["job"]), float(m["raw"]), float(m["ratio"])) == (101234.5, 150000.0, 0.67)
    assert LAST_LINE.match("events_per_s=1 raw_events_per_s=2") is None


def test_scale_result_keeps_up_when_the_interval_fits_in_60_s() -> None:
    fits = ScaleResult(1_000_000, 1_000_000, 90_000.0, 120_000.0, 0.75, 2.0, 80.0, interval_s=40.0)
    assert fits.keeps_up is True
    assert fits.max_topics_at_interval == 1_500_000  # 60 s / 40 s of work for 1M topics
    late = ScaleResult(10_000_000, 10_000_000, 1.0, 1.0, 1.0, 9.0, 300.0, interval_s=150.0)
    assert late.keeps_up is False
    assert late.max_topics_at_interval == 4_000_000
    failed = ScaleResult(1, 1, None, None, None, 0.1, 1.0, error="exit 1")
    assert failed.keeps_up is None and failed.max_topics_at_interval is None


def test_the_steady_minute_is_the_slowest_later_batch_of_a_whole_minute_with_a_close() -> None:
    topics = 1000
    log = [
        [0, 0.5, 0],  # no data yet
        [1000, 9.0, 0],  # the first minute: topics new to the read tasks
        [1000, 4.0, 0],  # no window closes yet
        [1000, 5.0, 1],
        [995, 6.0, 1],  # a minute within 1 %
        [500, 7.0, 1],  # half a minute
        [1, 8.0, 3],  # the run's last closes
    ]
    assert steady_minute_s(log, topics) == 6.0
    assert steady_minute_s(log[:3], topics) is None  # no close after the first minute
    assert steady_minute_s([[0, 1.0, 0]], topics) is None


def test_a_measured_steady_minute_decides_keeping_up() -> None:
    # two minutes of stats: 75 s each, the first one cold
    steady = ScaleResult(10_000_000, 20_000_000, 1.0, 1.0, 1.0, 9.0, 300.0, interval_s=150.0,
                         steady_minute_s=50.0)  # fmt: skip
    assert steady.minute_s == 75.0 and steady.work_per_minute_s == 50.0
    assert steady.keeps_up is True
    assert steady.max_topics_at_interval == 12_000_000
    unmeasured = ScaleResult(10_000_000, 20_000_000, 1.0, 1.0, 1.0, 9.0, 300.0, interval_s=150.0)
    assert unmeasured.work_per_minute_s == 75.0 and unmeasured.keeps_up is False


def test_capacity_speedup_is_most_workers_over_fewest() -> None:
    one = CapacityRun(1, 20_000.0, 3.0, 100.0)
    two = CapacityRun(2, 36_000.0, 2.0, 80.0)
    assert speedup([two, one]) == 1.8
    assert speedup([one]) is None
    assert speedup([one, CapacityRun(2, None, None, 5.0, error="exit 1")]) is None


def test_a_capacity_run_without_warm_batches_is_an_error_not_a_rate() -> None:
    warm = {"warmed_up": True, "events_per_s": 150_000, "close_batch_s": 4.5}
    assert capacity_run(2, warm, 90.0) == CapacityRun(2, 150_000.0, 4.5, 90.0)
    cold = capacity_run(2, {**warm, "warmed_up": False}, 90.0)
    assert (cold.events_per_s, cold.error) == (None, "no batch after the warm-up: raise --events")
    assert speedup([CapacityRun(1, 100_000.0, 5.0, 100.0), cold]) is None
