"""Benchmark: a slow cluster must delay only itself (issue 32, "one slow cluster starves
the polling of every other").

Runs the real `pulsar-balancer run --config` process (Spark, the embedded Kafka-protocol
broker, the two-cluster simulator of tests/e2e with its hot namespace on west) in rounds,
alternating a run without fault and a run in which every answer of east's brokers takes
`--east-latency-s` (10 minutes by default: blackholed). For each run it prints:
- west's polls per minute and broker: broker-stats requests each west broker answered in
  the `--window-s` seconds after the balancer's metrics endpoint came up, per minute
  (the collector polls every 2 s: 30 a minute is every round);
- time to split: from the process start to the split of every hot bundle of west.

The issue's target: with east slow, both stay within 10 % of the run without the fault.
Ends with `RESULT <json>`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from balancer.kafka.embedded import EmbeddedKafka, free_port
from bench.common import header, markdown_table, print_result
from tests.e2e.harness import BalancerProcess, wait_for, write_config
from tests.e2e.test_run_e2e import hot_bundles_split, start_sim

ROUTE = "broker_stats"


def one_run(east_latency_s: float, window_s: float, workdir: Path) -> dict[str, Any]:
    broker = EmbeddedKafka.start(port=free_port(), log_path=workdir / "tansu.log")
    sim = start_sim()
    if east_latency_s > 0:
        sim.faults.configure(latency_s=east_latency_s, only_clusters=("east",))
    config = write_config(
        workdir, sim=sim, bootstrap_servers=broker.bootstrap_servers, mode="apply"
    )
    process = BalancerProcess(config, workdir, workdir / "summary.json")
    started = time.monotonic()
    process.start()
    try:
        wait_for(lambda: "metrics: http://" in process.text(), timeout_s=180,
                 what="the metrics endpoint", process=process)  # fmt: skip
        before = sim.model.broker_requests("west", ROUTE)
        window_end = time.monotonic() + window_s
        split_s = None
        while split_s is None or time.monotonic() < window_end:
            if split_s is None and hot_bundles_split(sim):
                split_s = time.monotonic() - started
            if time.monotonic() - started > 600:
                raise RuntimeError("west was not split within 600 s:\n" + process.text()[-3000:])
            time.sleep(0.2)
        after = sim.model.broker_requests("west", ROUTE)
        per_minute = {b: (after[b] - before[b]) * 60 / window_s for b in after}
        stopping = time.monotonic()
        code = process.stop(timeout_s=180)
        return {
            "east_latency_s": east_latency_s,
            "west_polls_per_minute": per_minute,
            "time_to_split_s": split_s,
            "shutdown_s": time.monotonic() - stopping,
            "exit_code": code,
        }
    finally:
        if process.alive():
            process.kill()
        sim.faults.clear()
        sim.stop()
        broker.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.slow_cluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rounds", type=int, default=2, help="pairs of runs (2)")
    parser.add_argument("--window-s", type=float, default=60.0, help="polls counted over (60)")
    parser.add_argument("--east-latency-s", type=float, default=600.0,
                        help="each answer of east's brokers takes this long (600)")  # fmt: skip
    args = parser.parse_args(argv)
    print(header("A slow cluster delays only itself"))
    runs: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        for latency_s in (0.0, args.east_latency_s):
            with tempfile.TemporaryDirectory(prefix="slow-cluster-") as tmp:
                run = one_run(latency_s, args.window_s, Path(tmp))
            run["round"] = round_
            runs.append(run)
            print(f"round {round_}, east latency {latency_s:.0f} s: {run}", file=sys.stderr)
    rows = [
        [
            r["round"],
            "blackholed" if r["east_latency_s"] else "none",
            " / ".join(f"{v:.1f}" for v in r["west_polls_per_minute"].values()),
            f"{r['time_to_split_s']:.1f}",
            f"{r['shutdown_s']:.1f}",
        ]
        for r in runs
    ]
    print(markdown_table(
        ["round", "east fault", "west polls/min per broker", "time to split (s)", "shutdown (s)"],
        rows,
    ))  # fmt: skip

    def median(fault: bool, key: str) -> float:
        values = [r[key] for r in runs if bool(r["east_latency_s"]) is fault]
        if key == "west_polls_per_minute":
            values = [statistics.mean(v.values()) for v in values]
        return float(statistics.median(values))

    summary = {
        key: {"without": median(False, key), "with": median(True, key)}
        for key in ("west_polls_per_minute", "time_to_split_s")
    }
    for key, pair in summary.items():
        change = (pair["with"] - pair["without"]) / pair["without"] * 100
        print(f"{key}: {pair['without']:.1f} without the fault, {pair['with']:.1f} with it "
              f"({change:+.1f} %)")  # fmt: skip
    print_result({"runs": runs, "medians": summary})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
