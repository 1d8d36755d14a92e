"""Shared pieces of the benchmarks: the machine they ran on, scenario loads, tables.

Benchmarks print figures for people; none of this is a test assertion. Every script ends
its output with one line `RESULT <json>` so a smoke test (and a script) can read it back.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from balancer.app.config import COMPRESSION_CODECS, CollectorConfig
from balancer.core.bundles import BundleRange
from balancer.core.load import TopicLoad
from balancer.sim.scenarios import Scenario
from balancer.sim.traffic import TrafficModel

REPO_ROOT = Path(__file__).resolve().parent.parent
SCENARIO_DIR = REPO_ROOT / "conf" / "scenarios"
IMG_DIR = REPO_ROOT / "docs" / "img"


@dataclass(frozen=True)
class Machine:
    cpu_model: str
    cores: int
    memory_gib: float
    python: str
    platform: str
    numpy: str

    def describe(self) -> str:
        return (
            f"{self.cpu_model}, {self.cores} cores, {self.memory_gib:.1f} GiB RAM, "
            f"Python {self.python}, numpy {self.numpy}, {self.platform}"
        )


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def machine() -> Machine:
    """The machine the benchmark runs on, from /proc (Linux) with portable fallbacks."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in _read("/proc/cpuinfo").splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown CPU",
    )
    mem_kib = next(
        (
            int(line.split()[1])
            for line in _read("/proc/meminfo").splitlines()
            if line.startswith("MemTotal:")
        ),
        0,
    )
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return Machine(
        cpu_model=cpu,
        cores=cores or 1,
        memory_gib=mem_kib / 1024 / 1024,
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.release()}",
        numpy=np.__version__,
    )


def add_compression_argument(parser: argparse.ArgumentParser, passed_to: str = "") -> None:
    """`--compression`: the Kafka codec of the produced events, the collector's by default."""
    parser.add_argument(
        "--compression",
        choices=COMPRESSION_CODECS,
        default=CollectorConfig().compression,
        help=f"Kafka codec of the produced batches (default: the collector's){passed_to}",
    )


def header(title: str) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"# {title}\n\nRun {now} on {machine().describe()}.\n"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table; numbers right-aligned."""
    text_rows = [[str(c) for c in row] for row in rows]
    numeric = [
        all(_numeric(r[i]) for r in text_rows) if text_rows else False for i in range(len(headers))
    ]
    lines = ["| " + " | ".join(headers) + " |"]
    lines.append("|" + "|".join("---:" if n else "---" for n in numeric) + "|")
    lines.extend("| " + " | ".join(r) + " |" for r in text_rows)
    return "\n".join(lines)


def _numeric(text: str) -> bool:
    try:
        float(text.replace(",", "").rstrip("%x").removesuffix(" s"))
    except ValueError:
        return False
    return True


def print_result(payload: dict[str, Any]) -> None:
    """The last line of every benchmark: `RESULT` and one JSON document."""
    print("RESULT " + json.dumps({"machine": machine().__dict__, **payload}, sort_keys=True))
    sys.stdout.flush()


def scenario_files(directory: Path = SCENARIO_DIR) -> list[Path]:
    return sorted(directory.glob("*.yaml"))


def last_change_s(scenario: Scenario) -> float:
    """When the scenario's step and ramp changes are over (0 when it has none)."""
    ends = [0.0]
    for ns in scenario.namespaces:
        for change in ns.changes:
            ends.append(change.at_s if change.kind == "step" else change.to_s)
    return max(ends)


class ScenarioLoads:
    """Per-topic loads of a scenario from the simulator's traffic model (pure, in-process).

    `topic_loads(namespace_index, elapsed_s, scale)` gives the namespace's topics with their
    rates at a simulated time, every rate multiplied by `scale` (the growth model).
    """

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.traffic = TrafficModel(scenario)
        table = self.traffic.table
        self._by_namespace = [
            np.flatnonzero(table.namespace_index == n) for n in range(len(scenario.namespaces))
        ]

    def topic_loads(
        self, namespace_index: int, elapsed_s: float, scale: float = 1.0
    ) -> list[TopicLoad]:
        t = self.traffic.table
        rates = self.traffic.rates(elapsed_s)
        idx = self._by_namespace[namespace_index]
        rate_in = (rates.msg_rate_in[idx] * scale).tolist()
        rate_out = (rates.msg_rate_out[idx] * scale).tolist()
        tp_in = (rates.throughput_in[idx] * scale).tolist()
        tp_out = (rates.throughput_out[idx] * scale).tolist()
        positions = t.positions[idx].tolist()
        producers = t.producers[idx].tolist()
        consumers = (t.subscriptions[idx] * t.consumers_per_subscription[idx]).tolist()
        return [
            TopicLoad(
                topic=t.full_names[int(i)],
                position=positions[k],
                msg_rate_in=rate_in[k],
                msg_rate_out=rate_out[k],
                msg_throughput_in=tp_in[k],
                msg_throughput_out=tp_out[k],
                producer_count=producers[k],
                consumer_count=consumers[k],
            )
            for k, i in enumerate(idx.tolist())
        ]


def topics_by_bundle(
    bundles: Sequence[BundleRange], topics: Sequence[TopicLoad]
) -> dict[BundleRange, list[TopicLoad]]:
    """Group topics by the bundle of a layout that holds them (bundles sorted, covering all)."""
    ordered = sorted(bundles)
    lowers = np.asarray([b.lower for b in ordered], dtype=np.int64)
    positions = np.fromiter((t.position for t in topics), dtype=np.int64, count=len(topics))
    index = np.searchsorted(lowers, positions, side="right") - 1
    out: dict[BundleRange, list[TopicLoad]] = {b: [] for b in ordered}
    for topic, i in zip(topics, index.tolist(), strict=True):
        out[ordered[i]].append(topic)
    return out
