"""`pulsar-balancer replay DIR`: a recording of a peer group (two clusters) with a gap, a late
sample and a bad record, through every policy; the JSON report reads back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from balancer.app.cli import main
from balancer.app.replay.recording_dir import (
    CONTEXT_DIR,
    FORMAT,
    FORMAT_VERSION,
    ORDER,
    STATS_DIR,
    topic_manifest,
    write_manifest,
    write_messages,
)
from balancer.core.broker_load import BrokerLoadReport, Resource, ResourceUsage
from balancer.core.bundles import NamespaceBundles
from balancer.core.context_record import context_key, encode_context
from balancer.core.hashing import hash_position
from balancer.core.replay.recording import RecordedMessage, RoundContext
from balancer.core.round_marker import MARKER_KEY, encode_round_marker
from tests.stream_events import BASE_MS, event

pytestmark = pytest.mark.spark

MIN = 60_000
HOT, COLD = "t/hot", "t/cold"
HOT_LAYOUT = NamespaceBundles.initial(HOT, 4)
ROUNDS = 7
GAP_ROUND = 4  # the collector was down: no stats, no marker, no context


def hot_topics() -> list[str]:
    return [f"persistent://{HOT}/t{i}" for i in range(40)]


def rate_of(topic: str) -> float:
    """The topics of the hot namespace's first bundle carry 3,000 msg/s in (and out) each."""
    return 3_000.0 if HOT_LAYOUT.find(hash_position(topic)) == HOT_LAYOUT.bundles[0] else 10.0


def stats_messages() -> list[RecordedMessage]:
    out: list[RecordedMessage] = []

    def add(value: bytes, key: bytes, at_ms: int) -> None:
        out.append(RecordedMessage(0, len(out), at_ms, key, value))

    for r in range(ROUNDS):
        if r == GAP_ROUND:
            continue
        at = BASE_MS + r * MIN + 1_000
        hot = [event(t, at, cluster="west", rate_in=rate_of(t), rate_out=rate_of(t))
               for t in hot_topics()]  # fmt: skip
        cold = [event(f"persistent://{COLD}/c{i}", at, cluster="east") for i in range(5)]
        add(json.dumps({"events": hot}).encode(), HOT.encode(), at + 500)
        add(json.dumps({"events": cold}).encode(), COLD.encode(), at + 500)
        if r == 2:  # a bad record, and a sample of round 1 after round 1's window closed
            add(b"garbage", b"x", at + 600)
        add(encode_round_marker(BASE_MS + (r + 1) * MIN), MARKER_KEY, at + 900)
        if r == 2:
            late = event(hot_topics()[0], BASE_MS + MIN + 2_000, cluster="west")
            add(json.dumps(late).encode(), late["topic"].encode(), at + 950)
    return out


def report(cluster: str, broker: str, bundles: list[str], cpu: float) -> BrokerLoadReport:
    return BrokerLoadReport(
        cluster=cluster, broker=broker, timestamp_ms=0,
        resources={Resource.CPU: ResourceUsage(cpu, 100.0)}, bundles=tuple(bundles),
    )  # fmt: skip


def context_messages() -> list[RecordedMessage]:
    west = [b.key(HOT) for b in HOT_LAYOUT.bundles]
    east = [b.key(COLD) for b in NamespaceBundles.initial(COLD, 4).bundles]
    out: list[RecordedMessage] = []
    for r in range(ROUNDS):
        if r == GAP_ROUND:
            continue
        at = BASE_MS + r * MIN
        for ctx in (
            RoundContext("east", at, (report("east", "e1:8080", east, 10.0),
                                      report("east", "e2:8080", [], 5.0))),
            RoundContext("west", at, (report("west", "w1:8080", west, 90.0),
                                      report("west", "w2:8080", [], 5.0))),
        ):  # fmt: skip
            out.append(RecordedMessage(0, len(out), at + 950, context_key(ctx.cluster),
                                       encode_context(ctx)))  # fmt: skip
    return out


def write_recording(directory: Path) -> None:
    directory.mkdir()
    stats = write_messages(directory / STATS_DIR, stats_messages())
    context = write_messages(directory / CONTEXT_DIR, context_messages())
    write_manifest(
        directory,
        {
            "format": FORMAT, "format_version": FORMAT_VERSION, "tool_version": "test",
            "created_ms": BASE_MS, "since_ms": None, "until_ms": None, "order": ORDER,
            "stats": topic_manifest("stats", {0: (0, stats.messages)}, stats),
            "context": topic_manifest("context", {0: (0, context.messages)}, context),
            "contexts_read": context.messages, "contexts_rejected": {},
        },
    )  # fmt: skip


def test_replay_of_a_directory_through_every_policy(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_recording(tmp_path / "rec")
    html = tmp_path / "report.html"
    code = main(["replay", str(tmp_path / "rec"), "--output", "json", "--html", str(html),
                 "--work-dir", str(tmp_path / "work")])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    result = json.loads(out.out)["result"]
    assert result["clusters"] == ["east", "west"]
    assert result["samples_late"] == 1
    assert sum(result["samples_rejected"].values()) == 1
    gap_end = BASE_MS + (GAP_ROUND + 1) * MIN
    assert [gap_end, gap_end] in result["gaps_ms"]
    policies = {r["policy"]: r for r in result["runs"]}
    assert set(policies) == {
        "ours", "pulsar-modular-threshold", "pulsar-modular-uniform", "pulsar-extensible-transfer",
    }  # fmt: skip
    ends = [w["window_end_ms"] for w in policies["ours"]["windows"]]
    assert ends == sorted(ends) and gap_end in ends
    for run in policies.values():  # every policy saw every window
        assert [w["window_end_ms"] for w in run["windows"]] == ends
    hot_bundle = HOT_LAYOUT.bundles[0].key(HOT)
    ours_splits = [a for a in policies["ours"]["actions"] if a["kind"] == "split"]
    assert [a["subject"] for a in ours_splits][:1] == [hot_bundle]
    # the third window over the limit: rounds 0, 1, 2 (the late sample changes no window)
    assert ours_splits[0]["at_ms"] == BASE_MS + 3 * MIN + 30_000
    assert html.read_text().startswith("<!DOCTYPE html>")
