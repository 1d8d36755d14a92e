"""Scenario files: every shipped scenario loads, and a bad one fails naming the bad key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from balancer.sim import PeerGroup
from balancer.sim.scenarios import ScenarioError, load_scenario, parse_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "conf" / "scenarios"
REQUIRED = {
    "default",
    "hot-bundle",
    "zipf-many-namespaces",
    "single-heavy-topic",
    "three-cluster-peers",
    "offload-growth",
    # issue 35: brokers
    "broker-restart",
    "scale-out-5-to-10",
    "hot-broker-small-bundles",
    "mixed-capacity",
    "isolation-policy",
}


def minimal(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "m",
        "clusters": [{"name": "a"}, {"name": "b"}],
        "namespaces": [{"name": "t/ns", "cluster": "a", "topic_groups": [{"name": "x"}]}],
    }
    doc.update(changes)
    return doc


def test_the_required_scenarios_ship() -> None:
    assert {p.stem for p in SCENARIOS.glob("*.yaml")} >= REQUIRED


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_scenario_loads(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.name == path.stem
    assert scenario.namespaces
    model = PeerGroup.from_scenario(scenario).model
    model.clock.advance(3600)
    for ns in model.namespaces.values():
        assert ns.topic_indices.size, f"{ns.name} has no topics"
        stats = model.topic_stats(int(ns.topic_indices[0]))
        assert stats["msgRateIn"] >= 0 and stats["storageSize"] >= 0


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        (minimal(colour="red"), "colour: Extra inputs are not permitted"),
        (
            minimal(
                namespaces=[
                    {"name": "t/ns", "cluster": "a", "topic_groups": [{"name": "x", "zipf": 1}]}
                ]
            ),
            "namespaces.0.topic_groups.0.zipf",
        ),
        (minimal(broker={"max_msg_rate": -1}), "broker.max_msg_rate"),
        (minimal(broker={"default_split_algorithm": "nope"}), "broker.default_split_algorithm"),
        (minimal(namespaces=[{"name": "no-slash", "cluster": "a"}]), "namespaces.0.name"),
        (minimal(namespaces=[{"name": "t/ns", "cluster": "zz"}]), "namespaces.0.cluster"),
        (minimal(clusters=[{"name": "a", "peers": ["q"]}]), "clusters.0.peers: unknown cluster"),
        (minimal(clusters=[{"name": "a", "peers": ["a"]}]), "its own peer"),
        (minimal(clusters=[{"name": "a"}, {"name": "a"}]), "clusters: duplicate name 'a'"),
        (minimal(clusters=[]), "clusters"),
        (
            minimal(
                namespaces=[
                    {
                        "name": "t/ns",
                        "cluster": "a",
                        "changes": [{"kind": "ramp", "from_s": 5, "to_s": 5, "factor": 2}],
                    }
                ]
            ),
            "namespaces.0.changes.0.ramp",
        ),
        (
            minimal(namespaces=[{"name": "t/ns", "cluster": "a", "changes": [{"kind": "jump"}]}]),
            "namespaces.0.changes.0",
        ),
        (
            minimal(
                namespaces=[{"name": "t/ns", "cluster": "a", "daily_cycle": {"amplitude": 1.5}}]
            ),
            "namespaces.0.daily_cycle.amplitude",
        ),
    ],
    ids=[
        "unknown-top-level-key",
        "unknown-nested-key",
        "negative-threshold",
        "unknown-algorithm",
        "namespace-without-tenant",
        "namespace-on-unknown-cluster",
        "unknown-peer",
        "self-peer",
        "duplicate-cluster",
        "no-clusters",
        "ramp-ends-before-it-starts",
        "unknown-change-kind",
        "amplitude-too-large",
    ],
)
def test_bad_scenarios_name_the_bad_key(doc: dict[str, Any], needle: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(doc, source="s.yaml")
    assert str(caught.value).startswith("s.yaml: ")
    assert needle in str(caught.value)


def test_not_a_mapping() -> None:
    with pytest.raises(ScenarioError, match="must be a mapping"):
        parse_scenario(["a"])


def test_bad_yaml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n", encoding="utf-8")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(bad)
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")


def test_duplicate_topic_across_outstanding_is_an_error() -> None:
    doc = minimal(
        namespaces=[
            {
                "name": "t/ns",
                "cluster": "a",
                "outstanding": [
                    {"topic": "x", "msg_rate_in": 1},
                    {"topic": "x", "msg_rate_in": 2},
                ],
            }
        ]
    )
    with pytest.raises(ScenarioError, match=r"namespaces\.0\.outstanding: duplicate name 'x'"):
        parse_scenario(doc)
