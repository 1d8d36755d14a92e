"""Inspection commands: topic-info, split-points, offload-point (no cluster needed)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from balancer.app.commands import read_input
from balancer.app.commands.output import (
    add_output_argument,
    make_table,
    positive_int,
    print_json,
    print_tables,
    wants_json,
)
from balancer.core.buckets import metadata_path, topic_bucket
from balancer.core.bundles import BundleRange, NamespaceBundles, format_position, parse_position
from balancer.core.events import Rejection, TopicStatsEvent, parse_message
from balancer.core.hashing import hash_position
from balancer.core.load import TopicLoad
from balancer.core.offload import offload_point_from_stats
from balancer.core.round_marker import is_round_marker
from balancer.core.sizes import format_size, parse_size
from balancer.core.split import SplitAlgorithm, SplitOptions, SplitResult, compute_split
from balancer.core.topics import check_topic_text, parse_topic

if TYPE_CHECKING:
    from balancer.app.commands import Subparsers

_DEFAULTS = SplitOptions()


def register(subparsers: Subparsers) -> None:
    _register_topic_info(subparsers)
    _register_split_points(subparsers)
    _register_offload_point(subparsers)


# --- topic-info -------------------------------------------------------------------------


def _register_topic_info(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "topic-info",
        help="normalised name, hash position, bundle, bucket and metadata path of topics",
        description="Show where Pulsar places each topic: its normalised name, hash position "
        "(CRC32 of the full name), the bundle holding it and its PIP-157 bucket and "
        "managed-ledger metadata path.",
    )
    parser.add_argument("topics", nargs="+", metavar="TOPIC", help="topic names, any spelling")
    layout = parser.add_mutually_exclusive_group()
    layout.add_argument(
        "--bundles",
        type=_bundle_count,
        metavar="N",
        help="Pulsar's initial layout of N bundles (default: 4)",
    )
    layout.add_argument(
        "--boundaries",
        nargs="+",
        metavar="B",
        help="a namespace's boundaries, 0x00000000 ... 0xffffffff (hex or decimal)",
    )
    parser.add_argument(
        "--buckets",
        type=positive_int,
        default=1,
        metavar="N",
        help="numberOfTopicBuckets of the namespace (default: 1, no bucketing)",
    )
    add_output_argument(parser)
    parser.set_defaults(handler=topic_info)


def topic_info(args: argparse.Namespace) -> int:
    if args.boundaries:
        layout = NamespaceBundles.from_boundaries("-", args.boundaries)
    else:
        layout = NamespaceBundles.initial("-", args.bundles or 4)
    rows: list[dict[str, Any]] = []
    for given in args.topics:
        check_topic_text(given)
        name = parse_topic(given)
        position = hash_position(name.full)
        rows.append(
            {
                "topic": name.full,
                "namespace": name.namespace_name,
                "domain": name.domain.value,
                "partitionIndex": name.partition_index,
                "baseTopic": name.base.full,
                "position": position,
                "positionHex": format_position(position),
                "bundle": str(layout.find(position)),
                "bucket": topic_bucket(name, args.buckets),
                "metadataPath": metadata_path(name, args.buckets),
            }
        )
    if wants_json(args):
        print_json(
            {"bundles": layout.to_json(), "numberOfTopicBuckets": args.buckets, "topics": rows}
        )
        return 0
    table = make_table(
        None,
        ("topic", "partition", "position", "hex", "bundle", "bucket", "metadata path"),
        [
            (
                r["topic"],
                r["partitionIndex"],
                r["position"],
                r["positionHex"],
                r["bundle"],
                r["bucket"],
                r["metadataPath"],
            )
            for r in rows
        ],
    )
    print_tables(table)
    return 0


# --- split-points -----------------------------------------------------------------------


def _register_split_points(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "split-points",
        help="the boundaries a split algorithm gives for a bundle and its topics' stats",
        description="Compute the split boundaries of one bundle from topic-stats events. "
        "Topics outside the bundle are ignored; when a topic has several events the latest "
        "(by timestamp_ms) counts. Threshold defaults are Pulsar's.",
    )
    parser.add_argument(
        "--algorithm",
        choices=[a.value for a in SplitAlgorithm],
        default=SplitAlgorithm.BALANCED_FLOW_DIVIDE.value,
        help="split algorithm (default: balanced_flow_divide)",
    )
    parser.add_argument("--bundle", required=True, metavar="RANGE", help="0x%%08x_0x%%08x")
    parser.add_argument(
        "--stats",
        required=True,
        metavar="FILE",
        help='JSON-lines file of topic-stats events or {"events": [...]} envelopes; - = stdin',
    )
    parser.add_argument(
        "--namespace",
        metavar="TENANT/NS",
        help="only topics of this namespace (needed when the stats span several)",
    )
    parser.add_argument(
        "--positions",
        nargs="+",
        metavar="P",
        help="specified_positions_divide: the positions (hex or decimal)",
    )
    parser.add_argument(
        "--max-msg-rate",
        type=float,
        default=_DEFAULTS.max_msg_rate,
        metavar="R",
        help=f"msgRate in + out threshold (default {_DEFAULTS.max_msg_rate:g})",
    )
    parser.add_argument(
        "--max-bandwidth-mbytes",
        type=float,
        default=_DEFAULTS.max_bandwidth_mbytes,
        metavar="M",
        help=f"throughput threshold, MiB/s (default {_DEFAULTS.max_bandwidth_mbytes:g})",
    )
    parser.add_argument(
        "--max-topics",
        type=int,
        default=_DEFAULTS.max_topics,
        metavar="T",
        help=f"topic count threshold (default {_DEFAULTS.max_topics})",
    )
    parser.add_argument(
        "--max-sessions",
        type=int,
        default=_DEFAULTS.max_sessions,
        metavar="S",
        help=f"producers + consumers threshold, <= 0 disables (default {_DEFAULTS.max_sessions})",
    )
    parser.add_argument(
        "--difference-threshold-pct",
        type=float,
        default=_DEFAULTS.difference_threshold_pct,
        metavar="P",
        help="flow_or_qps_equally_divide's margin in percent (default "
        f"{_DEFAULTS.difference_threshold_pct:g})",
    )
    parser.add_argument(
        "--fill-factor",
        type=float,
        default=_DEFAULTS.fill_factor,
        metavar="F",
        help=f"balanced_flow_divide: target = threshold x F (default {_DEFAULTS.fill_factor:g})",
    )
    parser.add_argument(
        "--max-children",
        type=int,
        default=None,
        metavar="K",
        help="balanced_flow_divide: at most K children (the namespace's bundle budget)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="split even a bundle under every threshold (specified positions: even <= 1 topic)",
    )
    add_output_argument(parser)
    parser.set_defaults(handler=split_points)


def split_points(args: argparse.Namespace) -> int:
    bundle = BundleRange.parse(args.bundle)
    options = SplitOptions(
        max_msg_rate=args.max_msg_rate,
        max_bandwidth_mbytes=args.max_bandwidth_mbytes,
        max_topics=args.max_topics,
        max_sessions=args.max_sessions,
        difference_threshold_pct=args.difference_threshold_pct,
        fill_factor=args.fill_factor,
        max_children=args.max_children,
        positions=tuple(parse_position(p) for p in args.positions or ()),
        force=args.force,
    )
    events = read_stats(read_input(args.stats))
    topics = topic_loads(events, namespace=args.namespace)
    result = compute_split(SplitAlgorithm(args.algorithm), bundle, topics, options)
    if wants_json(args):
        print_json(split_json(result))
        return 0
    _print_split(result)
    return 0


def read_stats(text: str) -> list[TopicStatsEvent]:
    """Every event of a JSON-lines text; the first bad line is an error naming it."""
    events: list[TopicStatsEvent] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or is_round_marker(line.strip().encode()):
            continue  # a round marker (a dump of the stats topic holds them) is no event
        for item in parse_message(line):
            if isinstance(item, Rejection):
                raise ValueError(f"stats line {number}: {item.reason}: {item.detail}")
            events.append(item)
    return events


def topic_loads(events: Sequence[TopicStatsEvent], *, namespace: str | None) -> list[TopicLoad]:
    """The latest event of each topic as a TopicLoad, from one namespace."""
    if namespace is not None:
        events = [e for e in events if e.namespace == namespace]
    namespaces = sorted({e.namespace for e in events})
    if len(namespaces) > 1:
        raise ValueError(
            f"stats span several namespaces ({', '.join(namespaces[:5])}); pass --namespace"
        )
    latest: dict[str, TopicStatsEvent] = {}
    for event in events:
        seen = latest.get(event.topic)
        if seen is None or event.timestamp_ms >= seen.timestamp_ms:
            latest[event.topic] = event
    return [
        TopicLoad(
            topic=e.topic,
            position=hash_position(e.topic),
            msg_rate_in=e.msgRateIn,
            msg_rate_out=e.msgRateOut,
            msg_throughput_in=e.msgThroughputIn,
            msg_throughput_out=e.msgThroughputOut,
            producer_count=e.producerCount,
            consumer_count=e.consumerCount,
            storage_size=e.storageSize,
            backlog_size=e.backlogSize,
            offloaded_storage_size=e.offloadedStorageSize,
        )
        for e in latest.values()
    ]


def split_json(result: SplitResult) -> dict[str, Any]:
    return {
        "bundle": str(result.bundle),
        "algorithm": result.algorithm.value,
        "boundaries": list(result.boundaries),
        "children": [
            {
                "range": str(c.bundle),
                "topics": c.topics,
                "msgRate": c.msg_rate,
                "throughput": c.throughput_bytes,
            }
            for c in result.children
        ],
    }


def _print_split(result: SplitResult) -> None:
    if result.boundaries:
        head = (
            f"{result.algorithm}: split {result.bundle} at "
            f"{', '.join(format_position(b) for b in result.boundaries)} "
            f"({len(result.children)} children)"
        )
    else:
        head = f"{result.algorithm}: no split of {result.bundle}"
    table = make_table(
        None,
        ("child", "topics", "msgRate (msg/s)", "throughput", "sessions"),
        [
            (
                str(c.bundle),
                c.topics,
                f"{c.msg_rate:.1f}",
                f"{format_size(round(c.throughput_bytes))}/s",
                c.sessions,
            )
            for c in result.children
        ],
    )
    print_tables(head, table)


# --- offload-point ----------------------------------------------------------------------


def _register_offload_point(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "offload-point",
        help="the message id to offload up to, keeping SIZE bytes in BookKeeper",
        description="Compute the offload point as `pulsar-admin topics offload -s SIZE` does "
        "from a topic's internal stats, counting only the bytes still in BookKeeper (ledgers "
        "already offloaded count nothing; with none offloaded it is pulsar-admin's point).",
    )
    parser.add_argument(
        "--threshold",
        required=True,
        type=_size,
        metavar="SIZE",
        help="bytes to keep in BookKeeper: 1048576, 10M, 5G, 1.5G (K/M/G/T = 1024^n)",
    )
    parser.add_argument(
        "--internal-stats",
        required=True,
        metavar="FILE",
        help="Pulsar's internalStats JSON of the topic; - = stdin",
    )
    add_output_argument(parser)
    parser.set_defaults(handler=offload_point)


def offload_point(args: argparse.Namespace) -> int:
    try:
        stats = json.loads(read_input(args.internal_stats))
    except json.JSONDecodeError as exc:
        raise ValueError(f"internal stats are not valid JSON: {exc}") from None
    except RecursionError:
        # Python's JSON decoder recurses once per nesting level; real internal stats are
        # 3 levels deep.
        raise ValueError("internal stats are not valid JSON: nested too deeply") from None
    point = offload_point_from_stats(stats, args.threshold)
    if wants_json(args):
        print_json(None if point is None else point.to_json())
        return 0
    if point is None:
        print_tables(f"Nothing to offload: the topic holds at most {format_size(args.threshold)}")
    else:
        print_tables(
            f"Offload every ledger before ledger {point.ledger_id} "
            f"(message id {point.ledger_id}:{point.entry_id}:{point.partition_index}), "
            f"keeping about {format_size(args.threshold)} in BookKeeper"
        )
    return 0


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# Far above any real namespace (Pulsar's default cap is 128 bundles); keeps the layout small.
MAX_CLI_BUNDLES = 65536


def _bundle_count(text: str) -> int:
    value = positive_int(text)
    if value > MAX_CLI_BUNDLES:
        raise argparse.ArgumentTypeError(f"{text!r} is more than {MAX_CLI_BUNDLES} bundles")
    return value
