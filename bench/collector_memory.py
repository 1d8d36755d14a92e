"""Benchmark: the collector's memory per broker-stats answer (issue 32: "a 200,000-topic
broker answer (258 MB) peaks at 1.2 GiB in the collector, which no document states").

Builds broker-stats/topics answers in Pulsar's shape (each topic's stats as the simulator
writes them: one publisher, one subscription with one consumer, ~1.3 KB a topic), serves
them from 127.0.0.1, and for each size runs one collector round in a fresh Python process
(the real admin client, `Collector`, envelopes in `--envelope-format`, Arrow by default; the
Kafka sink replaced by one that counts) polling `--brokers` brokers of one cluster at once,
i.e. as many answers in memory together as `collector.max_parallel_per_cluster` allows.
Prints the answer's size and the process's peak RSS (`VmHWM`: `ru_maxrss` would count the
parent's size from before the exec) over its RSS before the round. Ends with `RESULT <json>`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from balancer.core.envelopes import DEFAULT_ENVELOPE_FORMAT, ENVELOPE_FORMATS, EnvelopeFormat
from bench.common import header, machine, markdown_table, print_result

NAMESPACES = 100
BUNDLES = (
    "0x00000000_0x40000000",
    "0x40000000_0x80000000",
    "0x80000000_0xc0000000",
    "0xc0000000_0xffffffff",
)


def topic_stats(rate: float) -> dict[str, Any]:
    """One topic's stats as the simulator (and a broker) writes them."""
    client = {
        "address": "/127.0.0.1:40000",
        "connectedSince": "2026-01-01T08:00:00Z",
        "clientVersion": "pulsar-client",
        "metadata": {},
    }
    return {
        "publishers": [
            {
                "accessMode": "Shared",
                "msgRateIn": rate,
                "msgThroughputIn": rate * 800,
                "averageMsgSize": 800.0,
                "chunkedMessageRate": 0.0,
                "producerId": 0,
                "producerName": "producer-0",
                **client,
            }
        ],
        "replication": {},
        "subscriptions": {
            "sub-0": {
                "consumers": [
                    {
                        "consumerName": "consumer-0",
                        "msgRateOut": rate,
                        "msgThroughputOut": rate * 800,
                        "availablePermits": 1000,
                        "unackedMessages": 0,
                        "blockedConsumerOnUnackedMsgs": False,
                        **client,
                    }
                ],
                "msgBacklog": 0,
                "msgRateExpired": 0.0,
                "msgRateOut": rate,
                "messageAckRate": rate,
                "msgThroughputOut": rate * 800,
                "msgRateRedeliver": 0.0,
                "numberOfEntriesSinceFirstNotAckedMessage": 1,
                "totalNonContiguousDeletedMessagesRange": 0,
                "type": "Shared",
            }
        },
        "producerCount": 1,
        "averageMsgSize": 800.0,
        "msgRateIn": rate,
        "msgRateOut": rate,
        "msgInCount": 0,
        "bytesInCount": 0,
        "msgOutCount": 0,
        "bytesOutCount": 0,
        "msgThroughputIn": rate * 800,
        "msgThroughputOut": rate * 800,
        "storageSize": 0,
        "backlogSize": 0,
        "pendingAddEntriesCount": 0,
        "filteredEntriesCount": 0,
    }


def answer(topics: int) -> bytes:
    body: dict[str, Any] = {}
    for i in range(topics):
        namespace = f"acme/ns-{i % NAMESPACES}"
        bundle = BUNDLES[(i // NAMESPACES) % len(BUNDLES)]
        domains = body.setdefault(namespace, {}).setdefault(bundle, {"persistent": {}})
        domains["persistent"][f"persistent://{namespace}/topic-{i}"] = topic_stats(1.0 + i % 7)
    return json.dumps(body).encode()


def child(url: str, brokers: int, envelope_format: EnvelopeFormat) -> None:
    """One collector round over `brokers` brokers (all `url`), then the peak RSS in MiB."""
    import balancer.core.arrow_envelope  # noqa: F401  pyarrow: in the baseline, not the round
    from balancer.collector.admin import admin_fetch
    from balancer.collector.service import Collector
    from balancer.collector.targets import Target
    from balancer.pulsar.client import PulsarPeerGroup
    from balancer.pulsar.routing import ClusterEndpoint

    class CountingSink:
        events = 0

        def send(self, *, key: bytes, value: bytes, events: int = 1) -> None:
            self.events += events

        def flush(self) -> None:
            pass

    before_kib = _status_kib("VmRSS")
    sink = CountingSink()
    with PulsarPeerGroup([ClusterEndpoint("east", url)]) as admin:
        targets = [Target("east", f"{url}/b{i}") for i in range(brokers)]
        collector = Collector(
            targets=targets,
            fetch=admin_fetch(admin),
            sink=sink,
            max_parallel_per_cluster=brokers,
            envelope_format=envelope_format,
        )
        failed = collector.poll_once()
    peak_kib = _status_kib("VmHWM")
    print(
        json.dumps(
            {
                "failed": len(failed),
                "events": sink.events,
                "baseline_mib": before_kib / 1024,
                "peak_mib": peak_kib / 1024,
            }
        )
    )


def _status_kib(field: str) -> int:
    """A memory figure of this process from /proc/self/status (Linux), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


class _Answers(SimpleHTTPRequestHandler):
    """Every GET (any broker path) gets the same broker-stats answer."""

    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.collector_memory",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--topics", type=int, nargs="+", default=[50_000, 100_000, 200_000])
    parser.add_argument(
        "--brokers", type=int, nargs="+", default=[1, 2], help="answers fetched at once (1 2)"
    )
    parser.add_argument(
        "--envelope-format",
        choices=ENVELOPE_FORMATS,
        default=DEFAULT_ENVELOPE_FORMAT,
        help=f"what the collector sends (collector.envelope_format; {DEFAULT_ENVELOPE_FORMAT})",
    )
    parser.add_argument("--child", nargs=2, metavar=("URL", "BROKERS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]), args.envelope_format)
        return 0
    print(header("Collector memory per broker-stats answer"))
    print(f"machine: {machine().describe()}; envelopes: {args.envelope_format}")
    rows: list[list[object]] = []
    results: list[dict[str, Any]] = []
    for topics in args.topics:
        body = answer(topics)
        handler = type("Handler", (_Answers,), {"body": body})
        with tempfile.TemporaryDirectory():
            server = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler))
            threading.Thread(target=server.serve_forever, daemon=True).start()
            url = f"http://127.0.0.1:{server.server_address[1]}"
            try:
                for brokers in args.brokers:
                    out = subprocess.run(
                        [
                            sys.executable,
                            "-m",
                            "bench.collector_memory",
                            "--child",
                            url,
                            str(brokers),
                            "--envelope-format",
                            args.envelope_format,
                        ],
                        check=True,
                        capture_output=True,
                        text=True,
                        cwd=Path(__file__).resolve().parent.parent,
                    )
                    found = json.loads(out.stdout.strip().splitlines()[-1])
                    grown = found["peak_mib"] - found["baseline_mib"]
                    results.append(
                        {
                            "topics": topics,
                            "answer_mb": len(body) / 1e6,
                            "brokers": brokers,
                            **found,
                            "grown_mib": grown,
                        }
                    )
                    rows.append(
                        [
                            f"{topics:,}",
                            f"{len(body) / 1e6:.0f}",
                            brokers,
                            f"{found['events']:,}",
                            f"{found['peak_mib']:.0f}",
                            f"{grown:.0f}",
                            f"{grown / brokers:.0f}",
                        ]
                    )
            finally:
                server.shutdown()
                server.server_close()
    print(
        markdown_table(
            [
                "topics",
                "answer (MB)",
                "answers at once",
                "events",
                "peak RSS (MiB)",
                "over baseline (MiB)",
                "per answer (MiB)",
            ],
            rows,
        )
    )
    print_result({"envelope_format": args.envelope_format, "runs": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
