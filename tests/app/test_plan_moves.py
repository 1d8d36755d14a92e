"""`pulsar-balancer plan`'s bundle moves against the simulated brokers: each broker's load
before and after, the moves with their reason, exit 3 on a move, none for a balanced cluster
or from a stats file, a cluster whose broker loads cannot be read named; and `plan` proposes
exactly the moves `run`'s handler decides for the same state."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from balancer.app.cli import main
from balancer.app.commands.plan import EXIT_NOTHING, EXIT_PROPOSALS, live_plan, take_samples
from balancer.app.config import BalancerConfig
from balancer.app.controller_wiring import build_handler, controller_settings
from balancer.app.pulsar_wiring import peer_group_from_config
from balancer.controller.broker_board import BrokerLoadBoard
from balancer.controller.clock import FakeClock
from balancer.controller.journal import Journal
from balancer.core.planning import window_loads
from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.errors import UnauthorizedError
from balancer.sim import parse_scenario, start_peer_group
from tests.reports import batch_report

RESTART = Path("conf/scenarios/broker-restart.yaml")


def balanced_scenario() -> Any:
    """Two brokers sharing evenly spread bundles: nothing to move."""
    return parse_scenario(
        {
            "name": "even",
            "seed": 7,
            "clusters": [{"name": "east", "brokers": 2}],
            "namespaces": [
                {
                    "name": "acme/even",
                    "cluster": "east",
                    "bundles": 8,
                    "topic_groups": [{"name": "t", "count": 80, "total_msg_rate_in": 8000}],
                }
            ],
        }
    )


def config_data(group: Any, tmp_path: Path, **sections: Any) -> dict[str, Any]:
    return {
        "clusters": [{"name": n, "admin_url": u} for n, u in group.admin_urls.items()],
        "controller": {
            "journal_path": str(tmp_path / "state" / "journal.sqlite3"),
            "audit_log_path": str(tmp_path / "audit.jsonl"),
            **sections.pop("controller", {}),
        },
        **sections,
    }


def run_plan(
    capsys: pytest.CaptureFixture[str], group: Any, tmp_path: Path, *args: str, **sections: Any
) -> tuple[int, str, str]:
    path = tmp_path / "balancer.yaml"
    path.write_text(yaml.safe_dump(config_data(group, tmp_path, **sections)))
    code = main(["plan", "--interval-s", "0", "--config", str(path), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_restarted_broker_gets_moves_with_loads_before_and_after(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with start_peer_group(RESTART) as group:
        code, out, err = run_plan(capsys, group, tmp_path, "-o", "json")
        idle = group.model.cluster("standalone").broker_address(2)
    assert code == EXIT_PROPOSALS, err
    doc = json.loads(out)
    assert doc["exit_code"] == EXIT_PROPOSALS
    assert not doc["splits"] and not doc["offloads"]  # the moves alone make it exit 3
    brokers = {b["broker"]: b for b in doc["brokers"]}
    assert len(brokers) == 3
    assert all(b["source"] == "load_report" for b in brokers.values())
    # Its cpu and bandwidth are near 0; memory (weight 1.0, Pulsar's default) keeps a floor.
    least = min(b["load_before"] for b in brokers.values())
    assert brokers[idle]["load_before"] == least < brokers[idle]["load_after"]
    assert max(b["load_after"] for b in brokers.values()) < max(
        b["load_before"] for b in brokers.values()
    )
    assert doc["moves"]
    for move in doc["moves"]:
        assert move["kind"] == "move" and move["destination"] == idle
        assert move["reason"] in {"overloaded", "above_mean", "idle_broker", "split_child"}
        assert move["msg_rate"] > 0 and move["sessions"] > 0
    assert doc["moves_blocked"] == [] and doc["moves_errors"] == []
    # plan never creates the journal it reads the grace period from.
    assert not (tmp_path / "state").exists()


def test_the_text_output_lists_broker_loads_and_each_move(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with start_peer_group(RESTART) as group:
        code, out, err = run_plan(capsys, group, tmp_path)
    assert code == EXIT_PROPOSALS, err
    assert "Brokers of standalone (not balanced now; balanced after" in out
    assert "Moves in standalone" in out
    assert "load_report" in out and "overloaded" in out
    assert "move(s) proposed (exit code 3)" in out


def test_a_balanced_cluster_gets_no_move(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with start_peer_group(balanced_scenario()) as group:
        code, out, err = run_plan(capsys, group, tmp_path, "-o", "json")
    assert code == EXIT_NOTHING, err
    doc = json.loads(out)
    assert len(doc["brokers"]) == 2
    assert doc["moves"] == [] and doc["moves_blocked"] == []


def test_extensible_brokers_are_measured_from_their_load_metrics(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    scenario = yaml.safe_load(RESTART.read_text())
    scenario["clusters"][0]["load_manager"] = "extensible"  # its load-report route fails
    with start_peer_group(parse_scenario(scenario)) as group:
        code, out, err = run_plan(capsys, group, tmp_path, "-o", "json")
    doc = json.loads(out)
    assert {b["source"] for b in doc["brokers"]} == {"metrics"}, err
    assert doc["moves_errors"] == []
    assert code in (EXIT_NOTHING, EXIT_PROPOSALS)


def test_brokers_without_a_load_report_or_metrics_fall_back_to_their_bundles(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = yaml.safe_load(RESTART.read_text())
    scenario["clusters"][0]["load_manager"] = "extensible"  # its load-report route fails
    with start_peer_group(parse_scenario(scenario)) as group:
        monkeypatch.setattr(group.model.brokers, "broker_metrics", lambda c, b: [])
        code, out, err = run_plan(capsys, group, tmp_path, "-o", "json")
    doc = json.loads(out)
    assert {b["source"] for b in doc["brokers"]} == {"bundles"}, err
    assert doc["moves_errors"] == []
    assert code in (EXIT_NOTHING, EXIT_PROPOSALS)


def test_a_cluster_whose_load_reports_are_refused_is_named_and_gets_no_moves(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(self: PulsarPeerGroup, cluster: str, broker: str) -> Any:
        raise UnauthorizedError("refused", status=401, cluster=cluster)

    monkeypatch.setattr(PulsarPeerGroup, "load_report", refused)
    with start_peer_group(RESTART) as group:
        code, out, err = run_plan(capsys, group, tmp_path, "-o", "json")
    doc = json.loads(out)
    assert code == EXIT_NOTHING, err  # splits and offloads still planned: none here
    assert doc["errors"] == []  # the cluster itself was read
    [error] = doc["moves_errors"]
    assert error["cluster"] == "standalone" and "401" in error["error"]
    assert doc["moves"] == [] and doc["brokers"] == []


def test_moves_off_or_a_stats_file_say_so_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with start_peer_group(RESTART) as group:
        code, out, _ = run_plan(capsys, group, tmp_path, moves={"enabled": False})
        assert code == EXIT_NOTHING
        assert "Moves: off (moves.enabled is false)" in out
    saved = tmp_path / "saved.json"
    saved.write_text("{}")
    code = main(["plan", "--stats-file", str(saved), "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == EXIT_NOTHING
    assert doc["moves"] == [] and "stats file" in doc["moves_note"]


def test_a_bundle_moved_lately_per_the_journal_is_not_proposed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with start_peer_group(RESTART) as group:
        _, out, _ = run_plan(capsys, group, tmp_path, "-o", "json")
        first = json.loads(out)["moves"][0]
        journal = Journal(tmp_path / "state" / "journal.sqlite3")
        journal.record_intent(
            decision_id=first["decision_id"] + "-earlier",
            kind="move",
            cluster="standalone",
            namespace=first["namespace"],
            target=f"{first['namespace']}/{first['bundle']}",
            action_key="k",
            payload={},
            batch_id=None,
            at_ms=int(time.time() * 1000) - 60_000,
        )
        journal.close()
        _, out, _ = run_plan(capsys, group, tmp_path, "-o", "json")
    moved = {(m["namespace"], m["bundle"]) for m in json.loads(out)["moves"]}
    assert (first["namespace"], first["bundle"]) not in moved


def test_outside_the_allow_list_a_move_is_not_proposed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with start_peer_group(RESTART) as group:
        code, out, err = run_plan(
            capsys, group, tmp_path, "-o", "json", controller={"allow_namespaces": ["other/*"]}
        )
    doc = json.loads(out)
    assert code == EXIT_NOTHING, err
    # Bundles outside the allow-list are never sources: nothing to deny either.
    assert doc["moves"] == [] and doc["moves_denied"] == []
    assert doc["brokers"], "their brokers' loads are still shown"


def test_plan_proposes_the_moves_run_decides(tmp_path: Path) -> None:
    with start_peer_group(RESTART) as group:
        config = BalancerConfig.from_mapping(
            config_data(group, tmp_path, controller={"mode": "dry-run"})
        )
        live = live_plan(
            config,
            samples=2,
            interval_s=0,
            sleep=lambda s: None,
            allows=controller_settings(config).allows,
        )
        assert live.moves is not None
        with peer_group_from_config(config) as admin:
            board = BrokerLoadBoard(retain_ms=3_600_000)
            samples = take_samples(
                admin, config, samples=2, interval_s=0, sleep=lambda s: None, board=board
            )
            bundles = window_loads(samples)
            now_ms = int(time.time() * 1000)
            handler = build_handler(config, admin, clock=FakeClock(now_ms), board=board)
            handler.handle(batch_report(batch_id=1, window_end_ms=now_ms, bundles=bundles))
            handler.close()
    planned = [(m.namespace, str(m.bundle), m.source, m.destination) for m in live.moves.moves]
    decided = [
        (m.namespace, str(m.bundle), m.source, m.destination)
        for m in handler.last_move_plans["standalone"].moves
    ]
    assert planned and planned == decided
