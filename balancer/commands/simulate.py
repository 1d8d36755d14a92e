"""`pulsar-balancer simulate --scenario FILE [--port P] [--time-scale X] [--seed N]`: serve a
simulated Pulsar peer group on 127.0.0.1 until Ctrl-C / SIGTERM.

With `--port P`, cluster i of the scenario (in file order) serves its admin API on port P+i;
the other brokers of each cluster take OS-chosen ports (all are printed). Simulated time
follows the wall clock scaled by `--time-scale` (60: one real second is one simulated minute).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from balancer.sim.group import PeerGroup
from balancer.sim.scenarios import ScenarioError, load_scenario

NAME = "simulate"
DEFAULT_TIME_SCALE = 60.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        NAME,
        help="serve a simulated Pulsar peer group from a scenario file",
        description=(
            "Start one HTTP server per simulated broker on 127.0.0.1 answering Pulsar's admin "
            "REST API, with traffic from the scenario's model; print the clusters' admin URLs."
        ),
    )
    parser.add_argument("--scenario", type=Path, required=True, help="scenario YAML file")
    parser.add_argument(
        "--port",
        type=int,
        default=0,
        help="admin port of the first cluster (the next clusters take the next ports); "
        "default: OS-chosen",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=DEFAULT_TIME_SCALE,
        help=f"simulated seconds per real second (default {DEFAULT_TIME_SCALE:g})",
    )
    parser.add_argument("--seed", type=int, default=None, help="override the scenario's seed")
    parser.add_argument(
        "--duration-s",
        type=float,
        default=None,
        help="stop after this many real seconds (default: run until interrupted)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        print(f"error: --port must be in 0..65535, got {args.port}", file=sys.stderr)
        return 2
    if args.time_scale < 0:
        print(f"error: --time-scale must be >= 0, got {args.time_scale}", file=sys.stderr)
        return 2
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ports = {c.name: args.port + i for i, c in enumerate(scenario.clusters)} if args.port else None
    group = PeerGroup.from_scenario(scenario, seed=args.seed, time_scale=args.time_scale)
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        running = group.start(ports=ports)
        try:
            print(
                f"simulating scenario {scenario.name!r} (seed {group.scenario.seed}, "
                f"time scale {args.time_scale:g})"
            )
            for name, url in running.admin_urls.items():
                brokers = " ".join(running.broker_urls[name])
                print(f"cluster {name} admin {url} brokers {brokers}")
            sys.stdout.flush()
            stop.wait(args.duration_s)
        finally:
            running.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("stopped")
    return 0
