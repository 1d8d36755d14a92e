"""Scale: the pipeline benchmark at 1M and 10M simulated topics, with peak memory.

    .venv/bin/python -m bench.scale [--topics 1000000 10000000] [--envelope 100]
        [--envelope-format arrow|json]
        [--compression lz4] [--events-per-topic 4] [--namespaces 80] [--bundles 128]

For each topic count it runs `bench.pipeline` in a child process (every topic reports once,
so the events are as many as the topics unless `--events-per-topic` says otherwise), spread
over 80 namespaces of 128 bundles (10,240 bundles: the issue's 10k), one minute of stats
per micro-batch, and samples the resident memory of that process and
everything it started (the Spark JVM, the Python workers, the embedded broker) every 0.2 s.
It prints, per size, the job's and raw consumption's events/s, the peak memory of the whole
tree, and two measures of a minute's work, the window close included:
- `interval s per minute`: every batch that read events or closed a window, per minute of
  stats in the run. It includes the first minute, whose topics are new to the read tasks,
  and with one minute of stats the two windows over it close in one batch;
- `steady minute s`: with `--events-per-topic 4` or more, the slowest batch after the first
  that read a whole minute of stats and closed a window: a minute as the job runs it for
  months (the topics seen before, as far as the read tasks' caches hold them; one window
  of two minutes closes).
Beside each time, the raw Kafka rate of the same run and the steady minute's rate (topics over
its seconds) as a ratio to it: a figure that compares across machines (target: at least
`bench.pipeline.TARGET_RATIO`, 10M topics a minute on a machine whose raw rate is 1.0M).
One pod keeps up with that many topics at Pulsar's 60 s stats interval when a minute's work
(the steady minute when measured, else the interval per minute) takes at most 60 s;
`max topics @60s` scales the measured size by 60 s over that time (linear in topics, an
estimate). Then `RESULT <json>`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.common import add_compression_argument, header, markdown_table, print_result
from bench.pipeline import TARGET_RATIO, add_envelope_format_argument

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
INTERVAL_S = 60.0  # Pulsar's default stats interval: one report per topic per minute
RESULT_LINE = re.compile(r"^RESULT (?P<json>\{.*\})$")
LAST_LINE = re.compile(
    r"^events_per_s=(?P<job>[\d.]+) raw_events_per_s=(?P<raw>[\d.]+) ratio=(?P<ratio>[\d.]+)$"
)


@dataclass
class ScaleResult:
    topics: int
    events: int
    events_per_s: float | None
    raw_events_per_s: float | None
    ratio: float | None
    peak_rss_gib: float
    wall_s: float
    interval_s: float | None = None  # every batch that read events or closed a window
    close_batch_s: float | None = None  # the slowest batch that closed a window
    close_driver_s: float | None = None  # the driver's share of that batch
    steady_minute_s: float | None = None  # see `steady_minute_s`
    error: str | None = None

    @property
    def minutes(self) -> int:
        """Minutes of stats the run holds (each topic reports once a minute)."""
        return max(1, -(-self.events // self.topics))

    @property
    def minute_s(self) -> float | None:
        """The interval's work per minute of stats: what must fit in Pulsar's 60 s."""
        return None if self.interval_s is None else self.interval_s / self.minutes

    @property
    def work_per_minute_s(self) -> float | None:
        """A minute's work: the steady minute when the run measured one."""
        return self.steady_minute_s if self.steady_minute_s is not None else self.minute_s

    @property
    def keeps_up(self) -> bool | None:
        work = self.work_per_minute_s
        return None if work is None else work <= INTERVAL_S

    @property
    def steady_minute_events_per_s(self) -> float | None:
        """The steady minute as a rate: a whole minute of stats (every topic once) over it."""
        s = self.steady_minute_s
        return self.topics / s if s else None

    @property
    def steady_minute_ratio(self) -> float | None:
        """That rate over the raw Kafka rate of the same run: comparable across machines
        (a 60 s minute of 10M topics is 166,667 events/s, `TARGET_RATIO` of a 1.0M raw)."""
        rate, raw = self.steady_minute_events_per_s, self.raw_events_per_s
        return rate / raw if rate and raw else None

    @property
    def max_topics_at_interval(self) -> int | None:
        work = self.work_per_minute_s
        return int(self.topics * INTERVAL_S / work) if work else None


def steady_minute_s(batch_log: Sequence[Sequence[float]], topics: int) -> float | None:
    """The slowest batch after the first data batch that read a whole minute of stats (each
    topic once, within 1 %) and closed a window (`batch_log`: events, trigger s, windows
    closed per batch); None when none did (fewer than 3 minutes: a window closes two
    batches after its first minute)."""
    data = [i for i, (events, _, _) in enumerate(batch_log) if events > 0]
    later = batch_log[data[0] + 1 :] if data else []
    steady = [s for events, s, closed in later if events >= 0.99 * topics and closed > 0]
    return max(steady, default=None)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def tree_rss_bytes(root: int) -> int:
    """Resident memory of `root` and all its descendants."""
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        try:
            fields = Path(f"/proc/{pid}/statm").read_text().split()
            total += int(fields[1]) * PAGE_BYTES
        except (OSError, IndexError, ValueError):
            continue  # the process ended between the listing and the read
        stack.extend(_children(pid))
    return total


def run_one(topics: int, events: int, envelope: int, extra: Sequence[str]) -> ScaleResult:
    """`extra` arguments go to bench.pipeline as they are."""
    minute_messages = -(-topics // envelope) if envelope > 0 else topics
    cmd = [
        sys.executable, "-m", "bench.pipeline",
        "--topics", str(topics), "--events", str(events), "--envelope", str(envelope),
        "--max-offsets-per-trigger", str(minute_messages),  # a minute of stats per batch
        *extra,
    ]  # fmt: skip
    started = time.monotonic()
    peak = 0
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as child:
        assert child.stdout is not None
        os.set_blocking(child.stdout.fileno(), False)
        output = b""
        while child.poll() is None:
            peak = max(peak, tree_rss_bytes(child.pid))
            chunk = child.stdout.read()
            if chunk:
                output += chunk
            time.sleep(0.2)
        output += child.stdout.read() or b""
    text = output.decode(errors="replace")
    found = [m for line in text.splitlines() if (m := LAST_LINE.match(line.strip()))]
    wall_s = time.monotonic() - started
    if child.returncode != 0 or not found:
        tail = " | ".join(text.strip().splitlines()[-3:])
        return ScaleResult(
            topics,
            events,
            None,
            None,
            None,
            peak / 1024**3,
            wall_s,
            error=f"exit {child.returncode}: {tail[:300]}",
        )
    m = found[-1]
    payloads = [r for line in text.splitlines() if (r := RESULT_LINE.match(line.strip()))]
    job = json.loads(payloads[-1]["json"]) if payloads else {}
    return ScaleResult(
        topics,
        events,
        float(m["job"]),
        float(m["raw"]),
        float(m["ratio"]),
        peak / 1024**3,
        wall_s,
        interval_s=job.get("working_s"),
        close_batch_s=job.get("close_batch_s"),
        close_driver_s=job.get("close_driver_s"),
        steady_minute_s=steady_minute_s(job.get("batch_log", []), topics),
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--topics", type=int, nargs="+", default=[1_000_000, 10_000_000])
    p.add_argument(
        "--events-per-topic",
        type=float,
        default=1.0,
        help="stats samples per topic (1: each topic reports once)",
    )
    p.add_argument(
        "--envelope",
        type=int,
        default=100,
        help="events per Kafka message (0: one each); passed to bench.pipeline",
    )
    add_compression_argument(p, "; passed to bench.pipeline")
    add_envelope_format_argument(p, "; passed to bench.pipeline")
    p.add_argument(
        "--driver-memory",
        default="2g",
        help="Spark's driver heap, passed to bench.pipeline (10M topics needs more than 2g)",
    )
    p.add_argument("--namespaces", type=int, default=80, help="passed to bench.pipeline")
    p.add_argument(
        "--bundles",
        type=int,
        default=128,  # Pulsar's loadBalancerNamespaceMaximumBundles
        help="bundles per namespace, passed to bench.pipeline",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(header("Scale: the pipeline at many topics"))
    bundles = args.namespaces * args.bundles
    print(f"{args.namespaces} namespaces x {args.bundles} bundles = {bundles:,} bundles")
    extra = [
        "--compression", args.compression, "--envelope-format", args.envelope_format,
        "--driver-memory", args.driver_memory,
        "--namespaces", str(args.namespaces), "--bundles", str(args.bundles),
    ]  # fmt: skip
    results = []
    for topics in args.topics:
        events = max(1, int(topics * args.events_per_topic))
        result = run_one(topics, events, args.envelope, extra)
        results.append(result)
        print(f"topics={topics} events={events} -> {json.dumps(asdict(result))}", flush=True)

    def cell(value: float | None, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    rows = [
        [
            f"{r.topics:,}",
            f"{r.events:,}",
            cell(r.events_per_s, ",.0f"),
            cell(r.raw_events_per_s, ",.0f"),
            cell(r.ratio, ".2f"),
            cell(r.minute_s, ".1f"),
            cell(r.steady_minute_s, ".1f"),
            cell(r.steady_minute_events_per_s, ",.0f"),
            cell(r.steady_minute_ratio, ".3f"),
            cell(r.close_batch_s, ".1f"),
            cell(r.close_driver_s, ".2f"),
            "-" if r.keeps_up is None else ("yes" if r.keeps_up else "no"),
            cell(r.max_topics_at_interval, ",d"),
            f"{r.peak_rss_gib:.2f}",
            f"{r.wall_s:.0f}",
            r.error or "",
        ]
        for r in results
    ]
    headers = [
        "topics", "events", "job events/s", "raw events/s", "ratio", "interval s per minute",
        "steady minute s", "steady minute events/s", f"its ratio to raw (target >= {TARGET_RATIO})",
        "close batch s", "driver close s", "keeps up @60s", "max topics @60s",
        "peak RSS GiB", "wall s", "error",
    ]  # fmt: skip
    print(markdown_table(headers, rows))
    results_json = [
        {
            **asdict(r),
            "minute_s": r.minute_s,
            "work_per_minute_s": r.work_per_minute_s,
            "keeps_up": r.keeps_up,
            "max_topics_at_interval": r.max_topics_at_interval,
            "steady_minute_events_per_s": r.steady_minute_events_per_s,
            "steady_minute_ratio": r.steady_minute_ratio,
            "target_ratio": TARGET_RATIO,
        }
        for r in results
    ]
    envelope_format = args.envelope_format if args.envelope > 0 else "json"
    print_result(
        {
            "benchmark": "scale",
            "bundles": bundles,
            "envelope_format": envelope_format,
            "results": results_json,
        }
    )
    return 0 if all(r.error is None for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
