"""`plan --drain BROKER...` against the simulator (issue 43, points 1 and 5): every bundle of
the named broker is proposed to move to brokers that stay, the draining broker is shown, an
unknown broker is a clear error; `plan --save` records the drain moves and `apply` carries
them out once, leaving the broker owning nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from balancer.app.cli import build_parser, main
from balancer.app.commands.apply import apply_command
from balancer.app.commands.plan import EXIT_ERROR, EXIT_PROPOSALS
from balancer.sim import parse_scenario, start_peer_group

CLUSTER = "east"


def even_scenario() -> Any:
    """Three brokers sharing evenly spread bundles: nothing to move without a drain."""
    return parse_scenario(
        {
            "name": "even-3",
            "seed": 11,
            "clusters": [{"name": CLUSTER, "brokers": 3}],
            "namespaces": [
                {
                    "name": "acme/even",
                    "cluster": CLUSTER,
                    "bundles": 12,
                    "topic_groups": [{"name": "t", "count": 120, "total_msg_rate_in": 6000}],
                }
            ],
        }
    )


def write_config(group: Any, tmp_path: Path) -> Path:
    path = tmp_path / "balancer.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": n, "admin_url": u} for n, u in group.admin_urls.items()],
                "controller": {
                    "journal_path": str(tmp_path / "journal.sqlite3"),
                    "audit_log_path": str(tmp_path / "audit.jsonl"),
                    "writer_lease": {"enabled": False},
                },
                "moves": {"enabled": True},
            }
        )
    )
    return path


def owned(group: Any, broker: int) -> list[str]:
    return sorted(f"{ns.name}/{b}" for ns, b in group.model.brokers.owned(CLUSTER, broker))


def test_plan_drain_proposes_every_bundle_off_the_broker_and_shows_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with start_peer_group(even_scenario()) as group:
        config = write_config(group, tmp_path)
        target = group.model.cluster(CLUSTER).broker_address(0)
        before = owned(group, 0)
        code = main(
            ["plan", "--interval-s", "0", "--config", str(config), "--drain", target, "-o", "json"]
        )
        out, err = capsys.readouterr()
        text_code = main(["plan", "--interval-s", "0", "--config", str(config), "--drain", target])
        text, _ = capsys.readouterr()
    assert code == EXIT_PROPOSALS, err
    doc = json.loads(out)
    assert before
    assert doc["draining"] == [{"cluster": CLUSTER, "broker": target}]
    drained = [m for m in doc["moves"] if m["source"] == target]
    assert sorted(f"{m['namespace']}/{m['bundle']}" for m in drained) == before
    assert all(m["reason"] == "drain" for m in drained)
    assert all(m["destination"] != target for m in doc["moves"])
    assert doc["drain_blocked"] == []
    assert text_code == EXIT_PROPOSALS
    assert f"{target} (draining)" in text and "drain" in text


def test_plan_drain_of_an_unknown_broker_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with start_peer_group(even_scenario()) as group:
        config = write_config(group, tmp_path)
        code = main(
            ["plan", "--interval-s", "0", "--config", str(config), "--drain", "10.9.9.9:8080"]
        )
    _out, err = capsys.readouterr()
    assert code == EXIT_ERROR
    assert "--drain 10.9.9.9:8080: not a broker of the clusters planned" in err


def test_bundles_that_cannot_leave_are_named_and_the_exit_code_is_not_nothing_to_do(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Draining two of three brokers: the one left cannot take everything (overload 85 %).
    scenario = even_scenario()
    with start_peer_group(scenario) as group:
        config = write_config(group, tmp_path)
        c = group.model.cluster(CLUSTER)
        drain = [c.broker_address(0), c.broker_address(1)]
        data = yaml.safe_load(config.read_text())
        data["moves"]["overload_ratio"] = 0.02  # room for almost nothing
        config.write_text(yaml.safe_dump(data))
        code = main(
            ["plan", "--interval-s", "0", "--config", str(config), "--drain", *drain, "-o", "json"]
        )
        out, err = capsys.readouterr()
        main(["plan", "--interval-s", "0", "--config", str(config), "--drain", *drain])
        text, _ = capsys.readouterr()
    assert code == EXIT_PROPOSALS, err
    doc = json.loads(out)
    assert doc["drain_blocked"]
    assert {b["reason"] for b in doc["drain_blocked"]} == {"no_room"}
    assert {b["broker"] for b in doc["drain_blocked"]} <= set(drain)
    assert "cannot leave" in text


def test_plan_drain_save_then_apply_empties_the_broker_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with start_peer_group(even_scenario()) as group:
        config = write_config(group, tmp_path)
        target = group.model.cluster(CLUSTER).broker_address(0)
        plan = tmp_path / "drain.json"
        code = main(
            [
                "plan",
                "--interval-s",
                "0",
                "--config",
                str(config),
                "--drain",
                target,
                "--save",
                str(plan),
            ]
        )
        _out, err = capsys.readouterr()
        assert code == EXIT_PROPOSALS, err
        doc = json.loads(plan.read_text())
        drains = [a for a in doc["actions"] if a["kind"] == "move" and a["reason"] == "drain"]
        assert len(drains) == len(owned(group, 0)) > 0

        def apply() -> tuple[int, dict[str, Any]]:
            args = build_parser().parse_args(
                ["apply", str(plan), "--config", str(config), "--yes", "-o", "json"]
            )
            code = apply_command(args, sleep=group.clock.advance)
            out, err = capsys.readouterr()
            return code, (json.loads(out) if out.strip() else {"stderr": err})

        code, report = apply()
        assert code == 0, report
        assert {i["status"] for i in report["items"]} == {"applied"}
        assert owned(group, 0) == []
        moved = len(group.model.brokers.moves)
        # Never twice: the journal knows the plan.
        code, again = apply()
        assert code == 0, again
        assert {i["status"] for i in again["items"]} == {"already_applied"}
        assert len(group.model.brokers.moves) == moved


def test_plan_drain_during_a_roll_shows_it_and_drains_by_its_order(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from balancer.app import marks_read
    from balancer.core.rollout_record import new_rollout

    with start_peer_group(even_scenario()) as group:
        config = write_config(group, tmp_path)
        ids = [group.model.cluster(CLUSTER).broker_address(i) for i in range(3)]
        # The roll restarts `target` first and `last` last; without the order the drain
        # would send everything to ids[2] (the least loaded after each move).
        target, last, middle = ids
        roll = new_rollout(CLUSTER, (target, middle, last), {}, by="ops", at_ms=1)
        read = marks_read.MarksRead((), rollouts={CLUSTER: roll})
        monkeypatch.setattr(marks_read, "read_marks", lambda *_a, **_k: read)
        before = owned(group, 0)
        code = main(
            ["plan", "--interval-s", "0", "--config", str(config), "--drain", target, "-o", "json"]
        )
        out, err = capsys.readouterr()
        main(["plan", "--interval-s", "0", "--config", str(config), "--drain", target])
        text, _ = capsys.readouterr()
    assert code == EXIT_PROPOSALS, err
    doc = json.loads(out)
    assert doc["rolling"] == [{"cluster": CLUSTER, "order": [target, middle, last]}]
    drained = [m for m in doc["moves"] if m["source"] == target]
    assert sorted(f"{m['namespace']}/{m['bundle']}" for m in drained) == before
    # No broker restarted yet: the first drain's bundles go to the one that restarts last.
    assert {m["destination"] for m in drained} == {last}
    assert f"Roll in progress on {CLUSTER}" in " ".join(text.split())
