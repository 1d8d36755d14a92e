"""Benchmark: Pulsar's three replayed policies stepped over synthetic windows, without Spark
(the per-window cost of `pulsar-modular-threshold`, `-uniform` and `pulsar-extensible-transfer`
and their shared window at `--topics`; issue 44's budget is 0.42 s a window for the whole
replay on 2 cores).

Builds each window's closed topic rows as `ClosedWindow.topic_rows` has them (sorted by
cluster, namespace, position, topic) with `bench.replay`'s topics and load reports, and steps
the policies as `balancer.app.replay.engine.run_replay` does (rounds observed up to the
window's end, then each policy's step). `--hot N` makes every N-th namespace's topics ten
times busier, so that the policies split and move. Prints the time of the shared window and of
each policy's steps per window, and a digest of every action and sample (equal digests: the
same replay); ends with `RESULT <json>`.

    python -m bench.replay_policies --topics 100000 --windows 14
"""

from __future__ import annotations

import argparse
import hashlib
import time
from dataclasses import dataclass

import pyarrow as pa

from balancer.app.config import BalancerConfig
from balancer.app.replay.pulsar_policies import (
    PULSAR_POLICIES,
    SharedWindows,
    pulsar_replay_policies,
)
from balancer.core.hashing import hash_positions
from bench.common import header, print_result
from bench.replay import START_MS, TOPICS_PER_NAMESPACE, contexts, namespaces


@dataclass(frozen=True)
class SyntheticWindow:
    """What `SharedWindows.of` reads of a `ClosedWindow`: its end and its sorted rows."""

    end_ms: int
    rows: pa.Table

    def topic_rows(self) -> pa.Table:
        return self.rows


def window_rows(topics: int, r: int, hot: int) -> pa.Table:
    """Round `r`'s topics (`bench.replay._event`'s loads), sorted as `topic_rows`."""
    cluster, namespace, names = [], [], []
    for k, ns in enumerate(namespaces(topics)):
        count = min(TOPICS_PER_NAMESPACE, topics - k * TOPICS_PER_NAMESPACE)
        for i in range(count):
            cluster.append("c1")
            namespace.append(ns)
            names.append(f"persistent://{ns}/t{i}")
    positions = hash_positions(names)
    scale = [10.0 if hot and int(ns.rsplit("-", 1)[1]) % hot == 0 else 1.0 for ns in namespace]
    idx = [int(n.rsplit("/t", 1)[1]) for n in names]
    table = pa.table(
        {
            "cluster": cluster,
            "namespace": namespace,
            "topic": names,
            "position": pa.array(positions, pa.int64()),
            "msg_rate_in": [s * (10.0 + (i + r) % 7) for s, i in zip(scale, idx, strict=True)],
            "msg_rate_out": [s * (20.0 + i % 5) for s, i in zip(scale, idx, strict=True)],
            "msg_throughput_in": [s * (1000.0 + i) for s, i in zip(scale, idx, strict=True)],
            "msg_throughput_out": [s * (2000.0 + i) for s, i in zip(scale, idx, strict=True)],
            "producer_count": pa.array([1] * len(names), pa.int64()),
            "consumer_count": pa.array([2] * len(names), pa.int64()),
            "storage_size": pa.array([1000 * i for i in idx], pa.int64()),
            "backlog_size": pa.array([0] * len(names), pa.int64()),
            "offloaded_storage_size": pa.array([0] * len(names), pa.int64()),
        }
    )
    return table.sort_by(
        [("cluster", "ascending"), ("namespace", "ascending"), ("position", "ascending"),
         ("topic", "ascending")]
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=100_000)
    parser.add_argument("--windows", type=int, default=14)
    parser.add_argument("--interval-s", type=int, default=60)
    parser.add_argument("--hot", type=int, default=0, help="every N-th namespace 10x busier")
    args = parser.parse_args()
    print(header("replay_policies"))
    config = BalancerConfig.model_validate(
        {
            "clusters": [{"name": "c1", "admin_url": "http://127.0.0.1:9"}],
            "spark": {"window_s": args.interval_s, "slide_s": args.interval_s},
            "collector": {"interval_s": args.interval_s},
        }
    )
    rounds = list(contexts(args.topics, args.windows + 1, args.interval_s))
    windows = [
        SyntheticWindow(
            START_MS + (r + 1) * args.interval_s * 1000, window_rows(args.topics, r, args.hot)
        )
        for r in range(args.windows)
    ]
    shared = SharedWindows()
    policies = pulsar_replay_policies(PULSAR_POLICIES, config, shared)
    phases = dict.fromkeys(("windows", *PULSAR_POLICIES), 0.0)
    digest = hashlib.sha256()
    actions = 0
    seen = 0
    for window in windows:
        while seen < len(rounds) and rounds[seen].round_ms <= window.end_ms:
            for p in policies:
                p.observe(rounds[seen])
            seen += 1
        t0 = time.monotonic()
        shared.of(window)  # type: ignore[arg-type]  # reads end_ms and topic_rows only
        phases["windows"] += time.monotonic() - t0
        for p in policies:
            t0 = time.monotonic()
            acts, sample = p.step(window)  # type: ignore[arg-type]
            phases[p.name] += time.monotonic() - t0
            actions += len(acts)
            digest.update(repr((p.name, acts, sample)).encode())
    per_window_s = {k: round(v / args.windows, 4) for k, v in phases.items()}
    total = sum(phases.values()) / args.windows
    print(f"per window: {per_window_s}  total {total:.3f} s")
    print(f"actions {actions}  digest {digest.hexdigest()[:16]}")
    print_result(
        {
            "bench": "replay_policies",
            "topics": args.topics,
            "windows": args.windows,
            "hot": args.hot,
            "per_window_s": per_window_s,
            "total_per_window_s": round(total, 4),
            "actions": actions,
            "digest": digest.hexdigest(),
        },
    )


if __name__ == "__main__":
    main()
