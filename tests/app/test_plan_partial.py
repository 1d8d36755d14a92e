"""`plan` plans what it can (issue 33): a topic deleted between two calls is noted as
skipped, an unreachable cluster is named in the output (text and JSON `errors`) while the
others are planned, and the exit code is 2 only when no cluster could be read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from balancer.app.cli import build_parser, main
from balancer.app.commands.plan import (
    EXIT_ERROR,
    EXIT_NOTHING,
    EXIT_PROPOSALS,
    plan_command,
)
from balancer.sim import start_peer_group
from balancer.sim.state import SimError

E2E_SCENARIO = Path("tests/e2e/scenario.yaml")


def plan(group: Any, *extra: str, clusters: tuple[str, ...] = ("east", "west")) -> int:
    admin = [f"--admin-url={c}={group.admin_urls[c]}" for c in clusters]
    args = build_parser().parse_args(["plan", *admin, "--interval-s", "0", *extra])
    return int(plan_command(args, sleep=lambda s: None))


def test_an_unreachable_cluster_is_named_and_the_others_are_planned(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with start_peer_group(E2E_SCENARIO) as group:
        group.stop_cluster("west")  # the hot bundle's cluster: east's offload is still planned
        code = plan(group, "-o", "json")
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert code == EXIT_PROPOSALS == doc["exit_code"], err
    [error] = doc["errors"]
    assert (
        error["cluster"] == "west"
        and str(group.admin_urls["west"].split(":")[-1]) in (error["error"])
    )
    assert [o["cluster"] for o in doc["offloads"]] == ["east"] and doc["splits"] == []
    assert "Traceback" not in err


def test_the_text_output_names_the_cluster_not_read(capsys: pytest.CaptureFixture[str]) -> None:
    with start_peer_group(E2E_SCENARIO) as group:
        group.stop_cluster("east")
        code = plan(group)
    out, err = capsys.readouterr()
    assert code == EXIT_PROPOSALS, err  # west's hot bundle is still split
    assert "Not read: cluster east" in " ".join(out.split())


def test_no_cluster_read_is_exit_2_naming_each(capsys: pytest.CaptureFixture[str]) -> None:
    with start_peer_group(E2E_SCENARIO) as group:
        group.stop_cluster("east")
        group.stop_cluster("west")
        admin = [f"--admin-url={c}={u}" for c, u in group.admin_urls.items()]
        code = main(["plan", *admin, "--interval-s", "0", "-o", "json"])
    out, err = capsys.readouterr()
    assert code == EXIT_ERROR and out == ""
    [line] = err.strip().splitlines()
    assert "cluster east" in line and "cluster west" in line


@pytest.mark.parametrize("calls_before_gone", [0, 1], ids=["offload_status", "internal_stats"])
def test_a_topic_deleted_between_two_calls_is_noted_as_skipped(
    capsys: pytest.CaptureFixture[str], calls_before_gone: int
) -> None:
    """The broker-stats snapshot still lists the topic (Pulsar refreshes it every
    statsUpdateFrequencyInSecs) when it is deleted: its offload status, or its internalStats
    asked right after, answers 404 "Topic not found"."""
    with start_peer_group(E2E_SCENARIO) as group:
        model = group.model
        lookup = model.topic_index
        found: list[str] = []

        def topic_index(ns: Any, local_name: str) -> int:
            if ns.name == "e2e/archive":
                found.append(local_name)
                if len(found) > calls_before_gone:  # deleted: gone from the metadata
                    raise SimError(404, f"Topic persistent://{ns.name}/{local_name} not found")
            return lookup(ns, local_name)

        model.topic_index = topic_index  # type: ignore[method-assign]
        code = plan(group, "-o", "json", clusters=("east",))  # east's offload: the only proposal
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert code == EXIT_NOTHING == doc["exit_code"], err  # a vanished topic is no error
    assert doc["offloads"] == [] and doc["errors"] == []
    [skipped] = [s for s in doc["skipped"] if s["reason"] == "vanished"]
    assert skipped["cluster"] == "east" and skipped["target"].endswith(f"/{found[0]}")
    assert "404" in skipped["detail"]
