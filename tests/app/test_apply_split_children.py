"""A saved plan's split keeps whether its children are unloaded (issue 41, point 13): where
the plan moves bundles of the split's cluster it keeps them on the parent's broker, as `run`
does, so the planned child moves find them there. A version-1 plan (no such field) is read
with a stated rule."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from balancer.core.plan_document import content_hash, plan_id_of
from balancer.sim import start_peer_group
from tests.app.test_apply import HOT, Rig


@pytest.fixture
def hot(tmp_path: Path) -> Iterator[Rig]:
    with start_peer_group(HOT) as group:
        yield Rig(group, tmp_path)


def as_version_1(rig: Rig) -> dict[str, Any]:
    """The saved plan rewritten as a version-1 plan file (no `unload_children`)."""
    doc: dict[str, Any] = json.loads(rig.plan.read_text())
    doc["version"] = 1
    for a in doc["actions"]:
        a.pop("unload_children", None)
    body = {k: v for k, v in doc.items() if k not in ("plan_id", "content_sha256")}
    digest = content_hash(body)
    doc = {"plan_id": plan_id_of(digest), "content_sha256": digest, **body}
    rig.plan.write_text(json.dumps(doc))
    return doc


def test_the_split_keeps_its_children_for_the_planned_child_move(
    hot: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = hot.save(capsys)
    assert doc["version"] == 2
    split, move = doc["actions"]
    assert move["after_split"] == split["decision_id"]  # the plan moves a child of the split
    assert split["unload_children"] is False
    owner = hot.group.model.namespaces[split["namespace"]].owners
    parent_owner = next(o for b, o in owner.items() if str(b) == split["bundle"])

    code, report = hot.apply(capsys)
    assert code == 0, report
    (record,) = hot.group.splits()
    assert record.unloaded is False, "apply sent the split with unload=true"
    ns = hot.group.model.namespaces[split["namespace"]]
    stayed = [c for c in record.children if str(c) != move["bundle"]]
    assert stayed and all(ns.owners[c] == parent_owner for c in stayed)
    assert [(m.namespace, str(m.bundle)) for m in hot.group.model.brokers.moves] == [
        (move["namespace"], move["bundle"])
    ]


def test_a_version_1_plan_with_moves_keeps_the_children(
    hot: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    hot.save(capsys)
    as_version_1(hot)
    code, report = hot.apply(capsys)
    assert code == 0, report
    (record,) = hot.group.splits()
    assert record.unloaded is False


def test_a_version_1_plan_without_moves_unloads_as_the_config_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with start_peer_group(HOT) as group:
        rig = Rig(group, tmp_path, moves=False, unload_after_split=True)
        doc = rig.save(capsys)
        assert [a["unload_children"] for a in doc["actions"]] == [True]
        as_version_1(rig)
        code, report = rig.apply(capsys)
        assert code == 0, report
        (record,) = group.splits()
        assert record.unloaded is True


def test_a_move_whose_planned_source_left_the_cluster_is_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The source broker is scaled down between the plan and the apply: the move's premise
    is gone (stale, named), not an error reading it."""
    with start_peer_group(HOT) as group:
        rig = Rig(group, tmp_path)
        doc = rig.save(capsys)
        move = next(a for a in doc["actions"] if a["kind"] == "move")
        cluster = group.model.cluster(move["cluster"])
        source = next(
            b for b in range(cluster.broker_count) if cluster.broker_address(b) == move["source"]
        )
        group.stop_broker(move["cluster"], source)
        code, report = rig.apply(capsys, "--only", move["id"])
    (item,) = [i for i in report["items"] if i["id"] == move["id"]]
    assert item["status"] == "stale", item
    assert f"planned source {move['source']} left the cluster" in item["detail"]
    assert code == 3 and group.model.brokers.moves == []
