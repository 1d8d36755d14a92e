"""Benchmark 3, split computation time: each of the five algorithms on one bundle of 1k, 10k,
100k and 1M topics.

The bundle is a whole namespace range (0x00000000_0xffffffff). Topics are
`persistent://bench/ns/t-<i>`, at their real CRC32 positions; their msgRate-in follows a
Zipf law (exponent 1.1, seeded ranking) summing to 3x the msgRate threshold, plus three
outstanding topics at 60 %, 45 % and 30 % of the threshold on their own; each topic has one
subscription (out = in), 1 KiB messages, one producer and one consumer. So every bundle is
over threshold (msgRate, and topics and sessions from 1k topics on) and every algorithm has
work to do. Options are Pulsar's defaults, with `max_children = 125` (what the detector
passes for a namespace of 4 bundles under Pulsar's maximum of 128) and, for
specified_positions_divide, the positions an operator would send (see
`bench.split_quality.specified_positions`; computing them is not timed).

Two timings per algorithm, best of several runs with `time.perf_counter`:
- `compute_split`: what the detector calls (restricts the topics to the bundle, runs the
  algorithm, checks the boundaries and computes every child's load);
- the algorithm function alone (`balancer.core.split.ALGORITHMS[...]`).

Run: `.venv/bin/python -m bench.split_time` (`--help` for options). Prints markdown tables,
the machine, and a last line `RESULT <json>`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from balancer.core.bundles import BundleRange
from balancer.core.hashing import hash_position
from balancer.core.load import TopicLoad
from balancer.core.split import ALGORITHMS, SplitAlgorithm, SplitOptions, compute_split
from bench.common import header, markdown_table, print_result
from bench.split_quality import ALGORITHMS as ORDER
from bench.split_quality import specified_positions

MAX_MSG_RATE = 30_000.0
OUTSTANDING_SHARES = (0.60, 0.45, 0.30)
MAX_CHILDREN = 125
DEFAULT_SIZES = (1_000, 10_000, 100_000, 1_000_000)


def make_topics(count: int, *, seed: int = 1, zipf_exponent: float = 1.1) -> list[TopicLoad]:
    """A bundle's worth of topics with seeded Zipf loads and a few outstanding topics."""
    rng = np.random.default_rng(seed)
    ranks = rng.permutation(count).astype(np.float64) + 1.0
    weights = ranks**-zipf_exponent
    rate_in = weights / weights.sum() * (3 * MAX_MSG_RATE / 2)  # in + out = 3x threshold
    outstanding = rng.choice(count, size=min(len(OUTSTANDING_SHARES), count), replace=False)
    for i, share in zip(outstanding.tolist(), OUTSTANDING_SHARES, strict=False):
        rate_in[i] = share * MAX_MSG_RATE / 2  # in + out = share of the threshold
    size_bytes = 1024.0
    rates = rate_in.tolist()
    topics = []
    for i in range(count):
        name = f"persistent://bench/ns/t-{i}"
        r = rates[i]
        topics.append(
            TopicLoad(
                topic=name,
                position=hash_position(name),
                msg_rate_in=r,
                msg_rate_out=r,
                msg_throughput_in=r * size_bytes,
                msg_throughput_out=r * size_bytes,
                producer_count=1,
                consumer_count=1,
            )
        )
    return topics


def best_of(fn: Callable[[], object], repeats: int, cap_s: float) -> tuple[float, int]:
    """The fastest of up to `repeats` runs, and how many ran (fewer once past `cap_s`)."""
    best = float("inf")
    runs = 0
    spent = 0.0
    while runs < repeats:
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        best = min(best, elapsed)
        runs += 1
        spent += elapsed
        if spent > cap_s:
            break
    return best, runs


def _fmt(seconds: float) -> str:
    if seconds < 1e-5:
        return f"{seconds * 1e6:.2f} µs"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.split_time",
        description="Benchmark 3: time of each split algorithm on bundles of 1k..1M topics.",
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=list(DEFAULT_SIZES),
        help="topic counts (default 1000 10000 100000 1000000)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="runs per timing (5)")
    parser.add_argument(
        "--repeats-large", type=int, default=2, help="runs per timing at >= 1M topics (2)"
    )
    parser.add_argument(
        "--cap-s",
        type=float,
        default=30.0,
        help="stop repeating one timing once its runs took this long in total (30 s)",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    print(header("Split computation time"))
    bundle = BundleRange.full()
    base = SplitOptions(max_children=MAX_CHILDREN)
    results: dict[str, Any] = {}
    rows_full: list[list[object]] = []
    rows_raw: list[list[object]] = []
    notes: list[str] = []
    for count in args.sizes:
        start = time.perf_counter()
        topics = make_topics(count, seed=args.seed)
        build_s = time.perf_counter() - start
        repeats = args.repeats_large if count >= 1_000_000 else args.repeats
        row_full: list[object] = [f"{count:,}"]
        row_raw: list[object] = [f"{count:,}"]
        results[str(count)] = {"build_topics_s": build_s, "algorithms": {}}
        for algorithm in ORDER:
            options = base
            if algorithm is SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE:
                options = SplitOptions(
                    max_children=MAX_CHILDREN, positions=specified_positions(topics)
                )
            split = compute_split(algorithm, bundle, topics, options)
            full_s, full_runs = best_of(
                partial(compute_split, algorithm, bundle, topics, options),
                repeats,
                args.cap_s,
            )
            raw_s, raw_runs = best_of(
                partial(ALGORITHMS[algorithm], bundle, topics, options),
                repeats,
                args.cap_s,
            )
            if min(full_runs, raw_runs) < repeats:
                notes.append(
                    f"{algorithm.value} at {count:,} topics: {min(full_runs, raw_runs)} run(s) "
                    f"instead of {repeats} (capped at {args.cap_s:g} s of runs)"
                )
            row_full.append(f"{_fmt(full_s)} ({len(split.children)})")
            row_raw.append(_fmt(raw_s))
            results[str(count)]["algorithms"][algorithm.value] = {
                "compute_split_s": full_s,
                "algorithm_s": raw_s,
                "runs": min(full_runs, raw_runs),
                "children": len(split.children),
            }
        rows_full.append(row_full)
        rows_raw.append(row_raw)
        print(f"- {count:,} topics built in {_fmt(build_s)}; best of {repeats} runs")
    names = [a.value for a in ORDER]
    print("\n`compute_split` (the detector's call), best time (children made):\n")
    print(markdown_table(["topics", *names], rows_full))
    print("\nThe algorithm function alone, best time:\n")
    print(markdown_table(["topics", *names], rows_raw))
    if notes:
        print("\nCapped:\n" + "\n".join(f"- {n}" for n in notes))
    print()
    print_result({"benchmark": "split_time", "sizes": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
