"""Moves against the simulator's Pulsar rules, end to end (issue 41): the modular load
manager's range-keyed destination (one move per range in flight), an anti-affinity peer
outside the allow-list, and isolation patterns Python cannot read."""

from __future__ import annotations

import logging
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from balancer.sim import parse_scenario
from tests.controller.test_controller import make_client
from tests.controller.test_moves_integration import CLUSTER, MoveRig, broker_id, owners, start


def namespace(name: str, *, rate: int, bundles: int = 4, **keys: Any) -> dict[str, Any]:
    return {
        "name": name,
        "cluster": CLUSTER,
        "bundles": bundles,
        "topic_groups": [{"name": "t", "count": 40, "total_msg_rate_in": rate}],
        **keys,
    }


def scenario(namespaces: list[dict[str, Any]], **cluster: Any) -> Any:
    return parse_scenario(
        {
            "name": "rules",
            "seed": 41,
            "clusters": [
                {
                    "name": CLUSTER,
                    "brokers": 3,
                    "broker_capacity": {"nic_limit_mbit": 1000, "cpu_cores": 4},
                    **cluster,
                }
            ],
            "namespaces": namespaces,
        }
    )


def test_two_namespaces_with_the_same_ranges_never_have_one_range_in_flight_twice(
    tmp_path: Path,
) -> None:
    """Both namespaces have the same four ranges, all on broker 0; brokers 1 and 2 are
    idle. Each move lands on the destination asked for: no move of a range is sent while
    another of that range is not owned again (the simulator keeps one destination per
    range, as Pulsar does: today two moves of a range in one cycle overwrite each other)."""
    doc = scenario(
        [
            namespace("public/a", rate=24000, owner_broker=0),
            namespace("public/b", rate=24000, owner_broker=0),
        ]
    )
    for sim in start(doc):
        with make_client(sim) as client:
            rig = MoveRig(sim, client, tmp_path)
            for _ in range(4):
                rig.window()
            rig.advance(1)
            rig.handler.controller.reconcile()
            moved = sim.model.brokers.moves
            assert moved
            assert all(m.outcome == "landed" for m in moved), [
                (m.namespace, str(m.bundle), m.outcome) for m in moved
            ]
            by_range: dict[str, list[Any]] = {}
            for m in moved:
                by_range.setdefault(str(m.bundle), []).append(m)
            for same in by_range.values():
                for first, second in pairwise(same):
                    assert first.landed_ms is not None and second.time_ms >= first.landed_ms
            rig.handler.close()


def test_an_anti_affinity_peer_outside_the_allow_list_still_counts(tmp_path: Path) -> None:
    """acme/a (group g, one bundle, the only one the allow-list lets move) crowds broker 0
    beside other/heavy; other/peer (group g, outside the allow-list) is alone on broker 1,
    the least loaded; broker 2 carries other/busy. acme/a may not go to its peer's broker
    while broker 2 holds none of the group (today the peer, never moved, was left out of
    the count and acme/a went to broker 1)."""
    doc = scenario(
        [
            namespace("acme/a", rate=8000, bundles=1, owner_broker=0, anti_affinity_group="g"),
            namespace("other/heavy", rate=16000, owner_broker=0),
            namespace("other/peer", rate=2500, owner_broker=1, anti_affinity_group="g"),
            namespace("other/busy", rate=4000, owner_broker=2),
        ]
    )
    for sim in start(doc):
        with make_client(sim) as client:
            rig = MoveRig(sim, client, tmp_path, controller={"allow_namespaces": ["acme/*"]})
            for _ in range(2):
                rig.window()
            moved = sim.model.brokers.moves
            assert [(m.namespace, m.destination) for m in moved] == [("acme/a", 2)]
            assert owners(sim)["acme/a/0x00000000_0xffffffff"] == broker_id(sim, 2)
            rig.handler.close()


def test_isolation_patterns_python_cannot_read_stop_moves_in_the_cluster(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A policy written with Java's quoting (`\\Q...\\E`): Pulsar isolates acme/iso on broker
    0; read as matching nothing, brokers 1 and 2 would look shared and take anything."""
    doc = scenario(
        [
            namespace("acme/iso", rate=2000, owner_broker=0),
            namespace("acme/x", rate=30000, owner_broker=1),
        ],
        isolation_policies=[
            {"name": "iso", "namespaces": [r"\Qacme/iso\E"], "primary": [0], "min_limit": 1}
        ],
    )
    for sim in start(doc):
        with make_client(sim) as client:
            rig = MoveRig(sim, client, tmp_path)
            with caplog.at_level(logging.ERROR, logger="balancer.controller.move_planning"):
                rig.window()
                rig.window()
            assert sim.model.brokers.moves == []
            mover = rig.handler.mover
            assert mover is not None
            assert mover.unreadable_rules[CLUSTER] == (r"\Qacme/iso\E",)
            lines = [r for r in caplog.records if "unreadable" in r.getMessage()]
            assert len(lines) == 1  # one line per change, not per window
            rig.handler.close()


def test_pulsar_system_namespaces_are_never_moved(tmp_path: Path) -> None:
    """pulsar/system crowds broker 0 with public/a; every namespace is allow-listed. Only
    public/a's bundles move (NamespaceService.isSystemServiceNamespace: never ours to move);
    the brokers' heartbeat namespaces (listed by ownedNamespaces) neither."""
    doc = scenario(
        [
            namespace("pulsar/system", rate=20000, owner_broker=0),
            namespace("public/a", rate=12000, owner_broker=0),
        ]
    )
    for sim in start(doc):
        with make_client(sim) as client:
            rig = MoveRig(sim, client, tmp_path, controller={"allow_namespaces": ["*"]})
            for _ in range(3):
                rig.window()
            moved = sim.model.brokers.moves
            assert moved and {m.namespace for m in moved} == {"public/a"}
            rig.handler.close()
