"""`pulsar-balancer roll`: roll a cluster (a rolling restart or upgrade) with the fewest
bundle moves.

    pulsar-balancer roll start  --config conf/balancer.yaml [--cluster C] [--order B,B,...]
    pulsar-balancer roll status --config conf/balancer.yaml [--cluster C]
    pulsar-balancer roll finish --config conf/balancer.yaml [--cluster C]

`start` records the restart order on the drain marks topic (`kafka.drain_marks_topic`),
having noted Pulsar's shedder and auto-split switches, then pauses both
(`loadBalancerSheddingEnabled`, `loadBalancerAutoBundleSplitEnabled` set to false). While the
roll is in progress, each broker drained (by its preStop hook, `drain --wait`) sends its
bundles to brokers that already restarted; the first, to the broker that restarts last.
`finish` sets both switches back to the values noted (also after a crash of anything in
between: the values are on Kafka) and ends the roll.

The default order is a StatefulSet's: the brokers the cluster lists, by the ordinal that
ends their pod name (`pulsar-broker-3.pulsar-broker...:8080` is 3), highest first. Brokers
whose ids carry no ordinal need `--order` (ids as `GET /admin/v2/brokers/{cluster}` lists).

Exit codes: 0 done; 2 error (Kafka or Pulsar unreachable, a broker not listed, another roll
in progress with another order).
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from kafka.errors import KafkaError

from balancer.app.commands.output import add_output_argument, print_json, wants_json
from balancer.app.config import load_config
from balancer.app.drain_wiring import build_drain_marks, who_am_i
from balancer.controller.rollout import finish_rollout, start_rollout
from balancer.core.rollout import statefulset_order
from balancer.core.rollout_record import Rollout
from balancer.kafka.drain_marks import DrainMarksUnavailableError
from balancer.pulsar.errors import PulsarAdminError

if TYPE_CHECKING:
    from balancer.app.commands import Subparsers

NAME = "roll"
EXIT_DONE = 0
EXIT_ERROR = 2


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        NAME,
        help="roll a cluster: start (order, pause Pulsar's shedder), status, finish (restore)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", choices=("start", "status", "finish"))
    parser.add_argument("--config", type=Path, required=True, help="balancer YAML config")
    parser.add_argument("--cluster", metavar="NAME", help="default: the config's first")
    parser.add_argument(
        "--order", metavar="B,B,...", help="start: restart order, first first (default: ordinals)"
    )
    parser.add_argument("--by", help="who rolls (default: user@host)")
    add_output_argument(parser)
    parser.set_defaults(handler=roll_command)


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def roll_command(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    cluster = args.cluster or config.clusters[0].name
    config.cluster(cluster)  # LookupError (exit 2) for a cluster the config does not name
    by = args.by or who_am_i()
    now_ms = int(time.time() * 1000)
    try:
        with build_drain_marks(config) as store:
            from balancer.app.pulsar_wiring import peer_group_from_config

            with peer_group_from_config(config) as admin:
                if args.action == "status":
                    store.refresh()
                    rollout = store.rollout(cluster)
                    if wants_json(args):
                        print_json({"rollout": None if rollout is None else rollout.as_record()})
                    elif rollout is None:
                        print(f"{cluster}: never rolled")
                    else:
                        print(f"{cluster}: {rollout.state} (started by {rollout.started_by} at "
                              f"{_when(rollout.started_at_ms)}; last change by {rollout.by} at "
                              f"{_when(rollout.at_ms)})\n  order: {', '.join(rollout.order)}\n"
                              f"  to restore: {_restore_text(rollout)}")  # fmt: skip
                    return EXIT_DONE
                if args.action == "finish":
                    done = finish_rollout(store, admin, cluster, by=by, now_ms=now_ms)
                    said = (
                        "no roll in progress" if done is None
                        else f"restored {_restore_text(done)}"
                    )  # fmt: skip
                    print(f"{cluster}: roll finished: {said}", file=sys.stderr)
                    return EXIT_DONE
                listed = admin.list_brokers(cluster)
                if args.order:
                    order = [b.strip() for b in args.order.split(",") if b.strip()]
                    unknown = [b for b in order if b not in listed]
                    if unknown:
                        raise ValueError(
                            f"cluster {cluster} does not list {', '.join(unknown)} (it lists "
                            f"{', '.join(sorted(listed))})"
                        )
                else:
                    order = list(statefulset_order(listed))
                rollout, started = start_rollout(store, admin, cluster, order, by=by,
                                                 now_ms=now_ms)  # fmt: skip
                said = "started" if started else "already in progress"
                print(f"{cluster}: roll {said}; order {', '.join(rollout.order)}; paused "
                      f"{', '.join(rollout.paused)} (to restore: {_restore_text(rollout)})",
                      file=sys.stderr)  # fmt: skip
                return EXIT_DONE
    except (DrainMarksUnavailableError, PulsarAdminError, KafkaError) as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _restore_text(rollout: Rollout) -> str:
    """What the finish puts back: a value, or broker.conf's (the pause's override deleted)."""
    return ", ".join(
        f"{name}={value}" + (" (broker.conf's: override deleted)" if name in rollout.unset else "")
        for name, value in sorted(rollout.paused.items())
    )
