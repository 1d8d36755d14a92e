"""What `pulsar-balancer run` shows: the live view and the end-of-run summary."""

from __future__ import annotations

import io
import json
from typing import Any

from rich.console import Console

from balancer.app.app_handler import LiveState
from balancer.app.liveview import render_live
from balancer.app.run_summary import RunSummary, render_summary
from balancer.app.summary import brokers_of, moves_of
from balancer.controller.outcome import Outcome
from balancer.core.broker_load import BrokerLoad, LoadSource
from balancer.core.bundles import BundleRange
from balancer.core.decisions import DecisionKind
from balancer.core.load import BundleLoad
from balancer.core.results import ActionResult


def quiet_summary(**fields: Any) -> RunSummary:
    """A run that split, offloaded and read nothing; `fields` set the rest."""
    return RunSummary(
        bundles_before={},
        bundles_after={},
        splits=[],
        offloads=[],
        events_processed=0,
        events_rejected=0,
        **fields,
    )


def text_of(renderable: object) -> str:
    console = Console(width=140, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_live_view_shows_overloaded_bundles_and_decisions() -> None:
    live = LiveState()
    live.batches, live.events_consumed = 7, 4200
    live.events_rejected.update({"bad_json": 3})
    hot = BundleLoad(
        "east",
        "acme/orders",
        BundleRange(0, 0x40000000),
        0,
        msg_rate_in=20_000,
        msg_rate_out=19_000,
        topic_count=54,
    )
    lone = BundleLoad(
        "west",
        "acme/pay",
        BundleRange(0x40000000, 0x80000000),
        0,
        msg_rate_in=21_000,
        msg_rate_out=21_000,
        topic_count=1,
    )
    live.over_threshold = [(hot, 1.3), (lone, 1.4)]
    live.outcomes.append(
        Outcome(
            "split-1",
            DecisionKind.SPLIT,
            "east",
            "acme/orders",
            ActionResult.APPLIED,
            "MsgRate",
            "split into 3 bundles",
            0.1,
        )
    )
    text = text_of(render_live(live, mode="apply", elapsed_s=30, duration_s=180))
    assert "0x00000000_0x40000000" in text and "130 %" in text and "39,000" in text
    assert "split into 3 bundles" in text and "applied" in text
    assert "4,200" in text and "30 s of 180 s" in text
    assert "one broker serves" in text  # the explanation for newcomers
    assert text.count("no split can help") == 1  # only the single-topic bundle


def test_summary_lists_splits_with_boundaries_and_offloads_in_readable_sizes() -> None:
    summary = RunSummary(
        bundles_before={"acme/orders": 4},
        bundles_after={"acme/orders": 6},
        splits=[
            {
                "cluster": "east",
                "namespace": "acme/orders",
                "bundle": "0x00000000_0x40000000",
                "boundaries": ["0x1449156f", "0x15bea2e0"],
                "children": 3,
            }
        ],
        offloads=[
            {
                "cluster": "east",
                "topic": "persistent://acme/audit/log",
                "storage_size_bytes": 12 * 1024**3,
                "threshold_bytes": 10 * 1024**3,
                "bytes_offloaded": 1024**3,
                "detail": f"offload up to ledger {n}",
            }
            for n in (7, 9)
        ],
        events_processed=1000,
        events_rejected=2,
        events_rejected_by_reason={"bad_json": 2},
    )
    text = text_of(render_summary(summary))
    assert "0x1449156f 0x15bea2e0" in text
    # Two offloads of one topic: one row, both counted, the bytes added up.
    row = next(line for line in text.splitlines() if "acme/audit/log" in line)
    assert " 2 " in row and "10.0 GiB" in row and "2.0 GiB" in row
    assert "bad_json: 2" in text
    data = json.loads(json.dumps(summary.to_dict()))
    for key in (
        "bundles_before",
        "bundles_after",
        "splits",
        "offloads",
        "events_processed",
        "events_rejected",
    ):
        assert key in data
    assert data["bundles_after"] == {"acme/orders": 6}


def test_summary_names_actions_whose_outcome_is_still_unknown() -> None:
    summary = quiet_summary(
        unknown=[
            {
                "kind": "split",
                "cluster": "east",
                "target": "acme/orders/0x00000000_0x40000000",
                "decision_id": "split-1",
                "detail": "sent, no answer",
            }
        ],
    )
    text = text_of(render_summary(summary))
    assert "outcome unknown" in text and "acme/orders/0x00000000_0x40000000" in text
    assert json.loads(json.dumps(summary.to_dict()))["unknown"][0]["decision_id"] == "split-1"


def test_a_lone_hot_topic_shows_its_remedy_in_the_live_view_and_the_summary() -> None:
    from balancer.core.partitions import LoneHotTopic

    hot = LoneHotTopic(
        cluster="west",
        namespace="acme/pay",
        topic="persistent://acme/pay/ledger",
        hot_topic="persistent://acme/pay/ledger",
        bundle="0x40000000_0x80000000",
        msg_rate=42_000.0,
        throughput_bytes=0.0,
        current_partitions=0,
        recommended_partitions=2,
    )
    live = LiveState()
    lone = BundleLoad(
        "west",
        "acme/pay",
        BundleRange(0x40000000, 0x80000000),
        0,
        msg_rate_in=21_000,
        msg_rate_out=21_000,
        topic_count=3,
    )
    live.over_threshold = [(lone, 1.4)]
    live.lone_hot_topics = [hot]
    text = " ".join(text_of(render_live(live, mode="apply", elapsed_s=1, duration_s=None)).split())
    assert "no split" in text and "make it 2" in text
    summary = quiet_summary(lone_hot_topics=[hot.to_dict()])
    text = text_of(render_summary(summary))
    assert "persistent://acme/pay/ledger" in text and "make it 2 partitions" in text
    assert summary.to_dict()["lone_hot_topics"][0]["recommended_partitions"] == 2


def test_live_view_waits_for_the_configured_number_of_windows() -> None:
    text = text_of(render_live(LiveState(hit_count_threshold=5), mode="apply", elapsed_s=1,
                               duration_s=None))  # fmt: skip
    assert "waiting for 5 windows over the limit" in text
    assert "waiting for 3 windows" not in text


def _move(result: ActionResult, reason: str = "overloaded") -> Outcome:
    from balancer.core.moves.model import MoveDecision, MoveReason

    decision = MoveDecision(
        decision_id="move-1",
        cluster="east",
        namespace="acme/orders",
        bundle=BundleRange(0, 0x40000000),
        source="10.0.0.1:8080",
        destination="10.0.0.3:8080",
        reason=MoveReason(reason),
        bundle_load_ratio=0.2,
        msg_rate=12_000,
        throughput_bytes=12_582_912,
        sessions=58,
        source_load_before=0.97,
        source_load_after=0.77,
        destination_load_before=0.01,
        destination_load_after=0.21,
        window_end_ms=60_000,
    )
    return Outcome(
        "move-1",
        DecisionKind.MOVE,
        "east",
        "acme/orders",
        result,
        reason,
        "owned by 10.0.0.2:8080, not the destination 10.0.0.3:8080"
        if result is ActionResult.LANDED_ELSEWHERE
        else "owned by the destination",
        0.2,
        decision=decision,
        sessions_moved=58,
    )


def _broker_loads() -> dict[str, list[BrokerLoad]]:
    return {
        "east": [
            BrokerLoad("east", "10.0.0.1:8080", 60_000, 0.97, LoadSource.LOAD_REPORT),
            BrokerLoad("east", "10.0.0.3:8080", 60_000, 0.01, LoadSource.BUNDLES),
        ]
    }


def test_live_view_shows_broker_load_per_cluster_and_the_newest_moves() -> None:
    live = LiveState()
    live.broker_loads = _broker_loads()
    live.outcomes.append(_move(ActionResult.APPLIED))
    text = text_of(render_live(live, mode="apply", elapsed_s=30, duration_s=None))
    assert "broker load" in text and "east" in text
    assert "10.0.0.1:8080 97 %" in text and "10.0.0.3:8080* 1 %" in text
    assert "acme/orders/0x00000000_0x40000000 10.0.0.1:8080 -> 10.0.0.3:8080" in text
    assert "(overloaded): applied" in text


def test_summary_lists_moves_applied_and_broker_loads_at_the_end() -> None:
    outcomes = [
        _move(ActionResult.APPLIED),
        _move(ActionResult.LANDED_ELSEWHERE, "idle_broker"),
        _move(ActionResult.DRY_RUN),  # nothing unloaded: not listed
    ]
    moves = moves_of(outcomes)
    assert [m["result"] for m in moves] == ["applied", "landed_elsewhere"]
    summary = quiet_summary(moves=moves, brokers=brokers_of(_broker_loads()))
    text = text_of(render_summary(summary))
    assert "Moves applied" in text
    assert "10.0.0.1:8080 -> 10.0.0.3:8080" in text and "overloaded" in text
    assert "landed_elsewhere: owned by 10.0.0.2:8080" in text
    assert "Broker load at the end" in text and "97 %" in text and "bundles" in text
    doc = json.loads(json.dumps(summary.to_dict()))
    assert doc["moves"][1]["result"] == "landed_elsewhere"
    assert doc["moves"][0]["sessions"] == 58
    assert doc["brokers"][0] == {
        "cluster": "east",
        "broker": "10.0.0.1:8080",
        "load_ratio": 0.97,
        "source": "load_report",
    }


def test_the_handler_keeps_the_planners_newest_broker_loads_for_the_view() -> None:
    from unittest.mock import MagicMock

    from balancer.app.app_handler import AppHandler
    from balancer.controller.move_planning import ClusterLoads
    from tests.reports import batch_report

    controller = MagicMock()
    loads = _broker_loads()["east"]
    controller.mover.last_loads = {
        "east": ClusterLoads(tuple(reversed(loads)), {}),
        "west": ClusterLoads((), {}),  # not planned this window (no rules): left out
    }
    controller.last_move_plans = {"east": object()}
    live = LiveState()
    handler = AppHandler(controller, MagicMock(), live, lambda _ns: MagicMock())
    handler.handle(batch_report(batch_id=1, window_end_ms=60_000))
    assert list(live.broker_loads) == ["east"]
    assert [b.broker for b in live.broker_loads["east"]] == ["10.0.0.1:8080", "10.0.0.3:8080"]


def test_the_summary_keeps_early_moves_behind_many_outcomes_that_did_nothing() -> None:
    """The live view keeps the newest 200 outcomes; a run's rate-limited and duplicate ones
    must not push its early moves (or splits) out of the end-of-run summary."""
    from unittest.mock import MagicMock

    from balancer.app.app_handler import AppHandler

    live = LiveState()
    handler = AppHandler(MagicMock(), MagicMock(), live, lambda _ns: MagicMock())
    handler.on_outcome(_move(ActionResult.APPLIED))
    for _ in range(500):
        handler.on_outcome(_move(ActionResult.RATE_LIMITED))
    assert all(o.result is ActionResult.RATE_LIMITED for o in live.outcomes)
    assert [m["result"] for m in moves_of(list(live.summary_outcomes))] == ["applied"]


def _offload(topic: str, window_end_ms: int) -> Outcome:
    from balancer.core.decisions import OffloadDecision

    decision = OffloadDecision(
        f"offload-{topic}-{window_end_ms}",
        "east",
        "acme/archive",
        f"persistent://acme/archive/{topic}",
        20 << 30,
        0,
        10 << 30,
        window_end_ms,
    )
    return Outcome(
        decision.decision_id,
        DecisionKind.OFFLOAD,
        "east",
        "acme/archive",
        ActionResult.RATE_LIMITED,
        "Size",
        "rate limited: waits for the next window",
        0.0,
        decision=decision,
    )


def test_repeated_offload_outcomes_leave_the_split_and_the_move_in_view() -> None:
    """Issue 43: every window re-decides the rate-limited offloads; their repeats are one
    row each with a count, and the newest split and move stay shown however many there are."""
    live = LiveState()
    live.outcomes.append(
        Outcome("split-1", DecisionKind.SPLIT, "east", "acme/orders", ActionResult.APPLIED,
                "MsgRate", "split into 3 bundles", 0.1)
    )  # fmt: skip
    live.outcomes.append(_move(ActionResult.APPLIED))
    for window in range(3):
        for topic in range(10):  # ten topics, each rate limited in three windows
            live.outcomes.append(_offload(f"log-{topic}", 1_800_000_000_000 + window * 60_000))
    text = text_of(render_live(live, mode="apply", elapsed_s=30, duration_s=None))
    table = text[text.index("Latest decisions") :]
    assert "split into 3 bundles" in table and "owned by the destination" in table
    assert table.count("rate_limited") <= 6  # eight rows at most, two of them the split and move
    assert "rate_limited ×3" in table and "08:02:00" in table  # the newest window's end
    assert "acme/archive/log-9" in table  # which topic each offload row is
    assert "more decisions" in table
