"""`plan --save` then `apply PLAN` against the simulator: exactly the saved actions are
carried out, once; a changed premise is refused and named, the rest applied; an expired,
tampered or truncated plan is refused whole; `--only` selects; approval is required."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from balancer.app.cli import build_parser, main
from balancer.app.commands.apply import apply_command
from balancer.app.config import load_config
from balancer.app.pulsar_wiring import peer_group_from_config
from balancer.controller.journal import Journal
from balancer.core.bundles import BundleRange, parse_position
from balancer.sim import parse_scenario, start_peer_group

HOT = Path("conf/scenarios/hot-bundle.yaml")
RESTART = Path("conf/scenarios/broker-restart.yaml")
GROWTH = Path("conf/scenarios/offload-growth.yaml")


def two_hot_namespaces() -> Any:
    """hot-bundle.yaml's namespace twice: two independent splits."""
    data = yaml.safe_load(HOT.read_text())
    (hot,) = data["namespaces"]
    # Names whose outstanding partitions share a bundle (the topic name hash decides).
    data["namespaces"] = [{**hot, "name": "acme/e"}, {**hot, "name": "acme/b"}]
    return parse_scenario(data)


class Rig:
    def __init__(self, group: Any, tmp_path: Path, **controller: Any) -> None:
        self.group = group
        self.tmp = tmp_path
        self.plan = tmp_path / "plan.json"
        self.audit = tmp_path / "audit.jsonl"
        moves = controller.pop("moves", True)
        offload = controller.pop("offload", {})
        self.config = tmp_path / "balancer.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "clusters": [{"name": n, "admin_url": u} for n, u in group.admin_urls.items()],
                    "controller": {
                        "journal_path": str(tmp_path / "journal.sqlite3"),
                        "audit_log_path": str(self.audit),
                        "writer_lease": {"enabled": False},
                        **controller,
                    },
                    "moves": {"enabled": moves},
                    "offload": offload,
                }
            )
        )

    def save(self, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
        code = main(
            ["plan", "--interval-s", "0", "--config", str(self.config), "--save", str(self.plan)]
        )
        _out, err = capsys.readouterr()
        assert code == 3, err
        assert "saved plan-" in err
        doc: dict[str, Any] = json.loads(self.plan.read_text())
        return doc

    def apply(self, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
        args = build_parser().parse_args(
            ["apply", str(self.plan), "--config", str(self.config), "--yes", "-o", "json", *extra]
        )
        # Simulated time moves when apply waits (a moved bundle's next lookup places it).
        code = apply_command(args, sleep=self.group.clock.advance)
        out, err = capsys.readouterr()
        report: dict[str, Any] = json.loads(out) if out.strip() else {"stderr": err}
        return code, report

    def statuses(self, report: dict[str, Any]) -> dict[str, str]:
        return {i["id"]: i["status"] for i in report["items"]}


@pytest.fixture
def hot(tmp_path: Path) -> Iterator[Rig]:
    with start_peer_group(HOT) as group:
        yield Rig(group, tmp_path)


def test_plan_then_apply_carries_out_exactly_the_saved_actions_once(
    hot: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = hot.save(capsys)
    assert doc["schema"] == "pulsar-balancer-plan" and doc["version"] == 2
    assert doc["plan_id"].startswith("plan-") and len(doc["config_sha256"]) == 64
    kinds = [a["kind"] for a in doc["actions"]]
    assert "split" in kinds
    split = next(a for a in doc["actions"] if a["kind"] == "split")
    layout = next(x for x in doc["layouts"] if x["namespace"] == split["namespace"])
    assert len(layout["boundaries"]) == 5  # the 4 bundles as read
    assert split["inputs"]["msg_rate"] > split["inputs"]["limits"]["max_msg_rate"]

    code, report = hot.apply(capsys)
    assert code == 0, report
    assert set(hot.statuses(report).values()) == {"applied"}
    # Exactly the saved split: its bundle, its boundaries, nothing else.
    splits = hot.group.splits()
    assert [(str(s.parent), s.boundaries) for s in splits] == [
        (split["bundle"], tuple(parse_position(b) for b in split["boundaries"]))
    ]
    moved = [(m.namespace, str(m.bundle)) for m in hot.group.model.brokers.moves]
    assert moved == [(a["namespace"], a["bundle"]) for a in doc["actions"] if a["kind"] == "move"]
    audit = [json.loads(line) for line in hot.audit.read_text().splitlines()]
    assert audit and all(r["plan_id"] == doc["plan_id"] for r in audit)
    assert {r["decision"]["kind"] for r in audit if "decision" in r} == set(kinds)

    # The same plan again: the journal knows it; nothing is sent again.
    code, again = hot.apply(capsys)
    assert code == 0, again
    assert set(hot.statuses(again).values()) == {"already_applied"}
    assert len(hot.group.splits()) == 1
    assert len(hot.group.model.brokers.moves) == len(moved)


def test_a_concurrent_split_makes_its_item_stale_and_the_rest_is_applied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with start_peer_group(two_hot_namespaces()) as group:
        rig = Rig(group, tmp_path, moves=False)
        doc = rig.save(capsys)
        splits = {a["namespace"]: a for a in doc["actions"] if a["kind"] == "split"}
        assert set(splits) == {"acme/e", "acme/b"}
        # Someone else (Pulsar's own auto-split, an operator) splits acme/e's hot bundle.
        with peer_group_from_config(load_config(rig.config)) as admin:
            admin.split_bundle(
                "acme/e", BundleRange.parse(splits["acme/e"]["bundle"]),
                algorithm="range_equally_divide",
            )  # fmt: skip
        code, report = rig.apply(capsys)
        statuses = rig.statuses(report)
    assert code == 3, report
    assert statuses[splits["acme/e"]["id"]] == "stale"
    assert statuses[splits["acme/b"]["id"]] == "applied"
    stale = next(i for i in report["items"] if i["id"] == splits["acme/e"]["id"])
    assert "no longer in the layout of acme/e" in stale["detail"]
    # Never adapted: acme/e has the other split only, with its own boundaries.
    a_splits = [s for s in group.splits() if s.namespace == "acme/e"]
    assert len(a_splits) == 1 and a_splits[0].algorithm == "range_equally_divide"


def test_a_move_whose_bundle_left_its_source_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with start_peer_group(RESTART) as group:
        rig = Rig(group, tmp_path)
        doc = rig.save(capsys)
        moves = [a for a in doc["actions"] if a["kind"] == "move"]
        assert len(moves) >= 2
        first = moves[0]
        with peer_group_from_config(load_config(rig.config)) as admin:  # moved meanwhile
            admin.unload_bundle(first["namespace"], first["bundle"], cluster=first["cluster"])
        group.clock.advance(5)  # the next lookup placed it
        code, report = rig.apply(capsys)
    statuses = rig.statuses(report)
    assert code == 3, report
    assert statuses[first["id"]] == "stale"
    assert all(statuses[m["id"]] == "applied" for m in moves[1:]), report


@pytest.mark.parametrize("meanwhile", [False, True])
def test_an_offload_goes_exactly_to_its_planned_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], meanwhile: bool
) -> None:
    with start_peer_group(GROWTH) as group:
        rig = Rig(group, tmp_path, offload={"default_threshold": "1G"})
        doc = rig.save(capsys)
        [offload] = doc["actions"]
        assert offload["kind"] == "offload" and offload["offload_point"]["entryId"] == 0
        topic = offload["topic"].removeprefix("persistent://")
        if meanwhile:  # someone offloaded it up to the same point since the plan
            answer = httpx.put(
                f"{group.admin_urls['standalone']}/admin/v2/persistent/{topic}/offload",
                json=offload["offload_point"],
                timeout=10,
            )
            assert answer.status_code == 204, answer.text
            group.clock.advance(61)  # offload_duration_s: 60
        group.clock.advance(600)  # the topic grows on (1.2 GiB): `run` would offload further now
        code, report = rig.apply(capsys)
        journal = Journal.open_read_only(tmp_path / "journal.sqlite3")
        entries = journal.entries()
        journal.close()
    (item,) = report["items"]
    if meanwhile:
        assert code == 3 and item["status"] == "stale", report
        assert "already offloaded" in item["detail"]
        assert entries == []
        return
    assert code == 0 and item["status"] == "applied" and item["result"] == "started", report
    (entry,) = entries
    assert entry.payload["call"]["message_id"] == offload["offload_point"]


def test_an_expired_plan_is_refused_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with start_peer_group(HOT) as group:
        rig = Rig(group, tmp_path, plan_max_age_s=0.001)
        rig.save(capsys)
        code, report = rig.apply(capsys)
        assert group.splits() == []
    assert code == 3
    assert "expired" in report["message"] and "plan_max_age_s" in report["message"]
    assert report["items"] == []


@pytest.mark.parametrize("damage", ["tampered", "truncated"])
def test_a_damaged_plan_file_gets_one_line(
    hot: Rig, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    hot.save(capsys)
    text = hot.plan.read_text()
    if damage == "tampered":  # a boundary moved by hand
        doc = json.loads(text)
        split = next(a for a in doc["actions"] if a["kind"] == "split")
        split["boundaries"] = ["0x20000000"]
        hot.plan.write_text(json.dumps(doc))
    else:
        hot.plan.write_text(text[: len(text) // 2])
    code = main(["apply", str(hot.plan), "--config", str(hot.config), "--yes"])
    _out, err = capsys.readouterr()
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: plan file ")
    assert ("changed after it was made" if damage == "tampered" else "truncated?") in err
    assert hot.group.splits() == []


def test_only_selects_the_named_actions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with start_peer_group(two_hot_namespaces()) as group:
        rig = Rig(group, tmp_path, moves=False)
        doc = rig.save(capsys)
        ids = [a["id"] for a in doc["actions"]]
        assert ids == ["split-1", "split-2"]
        code, report = rig.apply(capsys, "--only", "split-2")
        applied = [s.namespace for s in group.splits()]
        bad = main(["apply", str(rig.plan), "--config", str(rig.config), "--only", "move-9"])
        _out, err = capsys.readouterr()
    assert code == 0, report
    assert rig.statuses(report) == {"split-1": "not_selected", "split-2": "applied"}
    assert applied == [doc["actions"][1]["namespace"]]
    assert bad == 2 and "--only move-9: not in plan" in err


def test_without_a_terminal_or_yes_nothing_is_applied(
    hot: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    hot.save(capsys)
    code = main(["apply", str(hot.plan), "--config", str(hot.config)])
    _out, err = capsys.readouterr()
    assert code == 2
    assert "no terminal to ask for approval" in err and "--yes" in err
    assert hot.group.splits() == []


def test_a_typed_no_applies_nothing_and_dry_run_sends_nothing(
    hot: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    hot.save(capsys)
    args = build_parser().parse_args(["apply", str(hot.plan), "--config", str(hot.config)])
    asked: list[str] = []

    def answer(question: str) -> str:
        asked.append(question)
        return "no"

    code = apply_command(args, ask=answer, is_tty=lambda: True)
    out, _err = capsys.readouterr()
    assert code == 2 and asked and "Type 'yes'" in asked[0]
    assert "split-1: split standalone public/default/0x00000000_0x40000000 at" in out
    code, report = hot.apply(capsys, "--dry-run")
    assert code == 0, report
    assert set(hot.statuses(report).values()) == {"would_apply"}
    assert hot.group.splits() == []
    assert not hot.audit.exists() or hot.audit.read_text() == ""
