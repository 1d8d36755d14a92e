"""`controller.writer_lease`: defaults, names derived from the peer group, and its limits."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from balancer.app.config import BalancerConfig, ConfigError
from balancer.app.lease_config import LEASE_NAME_PREFIX, derived_lease_name
from balancer.app.lease_wiring import build_writer_lease

CLUSTERS = [
    {"name": "west", "admin_url": "http://127.0.0.1:8081"},
    {"name": "east", "admin_url": "http://127.0.0.1:8080"},
]


def config(controller: dict[str, Any] | None = None, **extra: Any) -> BalancerConfig:
    data = {"clusters": CLUSTERS, "controller": {"mode": "apply", **(controller or {})}, **extra}
    return BalancerConfig.from_mapping(data)


def test_on_by_default_in_apply_mode_with_a_30_s_lease() -> None:
    lease = config().controller.writer_lease
    assert lease.enabled and lease.lease_s == 30 and lease.safety_margin_s == 5
    assert config().controller.uses_writer_lease
    assert not config({"mode": "dry-run"}).controller.uses_writer_lease
    assert not config({"writer_lease": {"enabled": False}}).controller.uses_writer_lease


def test_two_balancers_of_one_peer_group_derive_the_same_names() -> None:
    a = derived_lease_name(["west", "east"])
    b = derived_lease_name(["east", "west", "east"])
    assert a == b and a.startswith(f"{LEASE_NAME_PREFIX}.east_west.")
    lease = config().controller.writer_lease
    assert lease.group_id(["west", "east"]) == lease.topic_name(["east", "west"]) == a


def test_other_peer_groups_get_other_names_even_after_escaping() -> None:
    assert derived_lease_name(["a:b"]) != derived_lease_name(["a_b"])
    assert derived_lease_name(["east"]) != derived_lease_name(["east", "west"])
    long = derived_lease_name([f"cluster-{i:03d}-" + "x" * 40 for i in range(20)])
    assert len(long) <= 249  # a legal Kafka topic name


def test_group_and_topic_can_be_named() -> None:
    lease = config({"writer_lease": {"group": "g", "topic": "t.lease"}}).controller.writer_lease
    assert lease.group_id(["east"]) == "g" and lease.topic_name(["east"]) == "t.lease"


@pytest.mark.parametrize(
    ("writer_lease", "named"),
    [
        ({"lease_s": 5}, "controller.writer_lease.lease_s"),
        ({"safety_margin_s": -1}, "controller.writer_lease.safety_margin_s"),
        ({"lease_s": 10, "safety_margin_s": 5}, "controller.writer_lease"),
        ({"topic": "no/slash"}, "controller.writer_lease.topic"),
        ({"group": ""}, "controller.writer_lease.group"),
        ({"lease": 30}, "controller.writer_lease.lease"),
    ],
    ids=["lease-too-short", "negative-margin", "margin-half", "bad-topic", "empty-group", "typo"],
)
def test_bad_values_name_the_key(writer_lease: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError) as info:
        config({"writer_lease": writer_lease})
    assert f"  {named}" in str(info.value)


def test_the_embedded_run_takes_a_short_lease(tmp_path: Path) -> None:
    embedded = BalancerConfig.embedded_default(
        bootstrap_servers=["127.0.0.1:39092"],
        clusters=[("sim-a", "http://127.0.0.1:8081")],
        state_dir=tmp_path,
    )
    assert embedded.controller.uses_writer_lease
    assert embedded.controller.writer_lease.lease_s == 10


def test_wiring_builds_the_lease_only_when_used() -> None:
    assert build_writer_lease(config({"mode": "dry-run"})) is None
    assert build_writer_lease(config({"writer_lease": {"enabled": False}})) is None
    lease = build_writer_lease(config())
    assert lease is not None
    assert lease.group_id == lease.topic == derived_lease_name(["east", "west"])
    assert lease.lease_s == 30 and lease.identity.endswith(f":{os.getpid()}")
    assert not lease.status().held  # not started: not held
