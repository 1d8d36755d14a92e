"""The start-up check of Pulsar's own shedder and auto-split (a fake `PulsarConfigPort`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pytest

from balancer.controller.pulsar_shedder import AUTO_SPLIT, SHEDDING, check_pulsar_switches
from balancer.pulsar.errors import PulsarAdminError, ServerError, UnavailableError


class FakeConfig:
    def __init__(self, config: dict[str, dict[str, str]]) -> None:
        self.config = config
        self.writes: list[tuple[str, str, str]] = []
        self.fail_read: set[str] = set()
        self.fail_write: set[str] = set()

    def runtime_configuration(self, cluster: str) -> Mapping[str, str]:
        if cluster in self.fail_read:
            raise UnavailableError("connect refused")
        return dict(self.config[cluster])

    def set_dynamic_configuration(self, cluster: str, name: str, value: str) -> None:
        if cluster in self.fail_write:
            raise ServerError("boom", status=500)
        self.writes.append((cluster, name, value))
        self.config[cluster][name] = value


class Sink:
    def __init__(self) -> None:
        self.switches: dict[tuple[str, str], bool] = {}
        self.errors: dict[str, int] = {}

    def set_pulsar_switch(self, cluster: str, switch: str, enabled: bool) -> None:
        self.switches[(cluster, switch)] = enabled

    def record_pulsar_config_error(self, cluster: str) -> None:
        self.errors[cluster] = self.errors.get(cluster, 0) + 1


ON = {SHEDDING: "true", AUTO_SPLIT: "true"}
OFF = {SHEDDING: "false", AUTO_SPLIT: "false"}


def test_on_warns_with_the_commands_and_exports_without_touching(
    caplog: pytest.LogCaptureFixture,
) -> None:
    admin, sink = FakeConfig({"east": dict(ON), "west": dict(OFF)}), Sink()
    with caplog.at_level(logging.WARNING):
        states = check_pulsar_switches(admin, ["east", "west"], dry_run=False, metrics=sink)
    assert admin.writes == []
    assert [(s.cluster, s.shedding, s.auto_split) for s in states] == [
        ("east", True, True),
        ("west", False, False),
    ]
    assert sink.switches == {
        ("east", "shedding"): True,
        ("east", "auto_split"): True,
        ("west", "shedding"): False,
        ("west", "auto_split"): False,
    }
    text = caplog.text
    assert "Pulsar's shedder is on on cluster east" in text and "fight our moves" in text
    assert (
        "pulsar-admin brokers update-dynamic-config --config loadBalancerSheddingEnabled "
        "--value false" in text
    )
    assert "--config loadBalancerSheddingEnabled --value true" in text
    assert "controller.disable_pulsar_shedder: true" in text
    assert "west" not in text  # off: nothing to warn about


def test_the_switches_turn_them_off_and_say_how_to_restore(
    caplog: pytest.LogCaptureFixture,
) -> None:
    admin, sink = FakeConfig({"east": dict(ON)}), Sink()
    with caplog.at_level(logging.WARNING):
        (state,) = check_pulsar_switches(
            admin, ["east"], disable_shedder=True, disable_auto_split=True, dry_run=False,
            metrics=sink,
        )  # fmt: skip
    assert admin.writes == [("east", SHEDDING, "false"), ("east", AUTO_SPLIT, "false")]
    assert state.turned_off == (SHEDDING, AUTO_SPLIT)
    assert (state.shedding, state.auto_split) == (False, False)
    assert sink.switches[("east", "shedding")] is False
    assert "to restore it: pulsar-admin brokers update-dynamic-config --config " in caplog.text


def test_only_the_switch_given_is_turned_off() -> None:
    admin = FakeConfig({"east": dict(ON)})
    (state,) = check_pulsar_switches(admin, ["east"], disable_shedder=True, dry_run=False)
    assert admin.writes == [("east", SHEDDING, "false")]
    assert (state.shedding, state.auto_split) == (False, True)


def test_dry_run_never_writes(caplog: pytest.LogCaptureFixture) -> None:
    admin = FakeConfig({"east": dict(ON)})
    with caplog.at_level(logging.WARNING):
        (state,) = check_pulsar_switches(
            admin, ["east"], disable_shedder=True, disable_auto_split=True, dry_run=True
        )
    assert admin.writes == [] and state.shedding is True
    assert "(not applied in dry-run)" in caplog.text


def test_a_missing_key_is_pulsars_default_true() -> None:
    (state,) = check_pulsar_switches(FakeConfig({"east": {}}), ["east"])
    assert (state.shedding, state.auto_split) == (True, True)


def test_a_failed_read_or_write_is_counted_never_fatal() -> None:
    admin, sink = FakeConfig({"east": dict(ON), "west": dict(ON)}), Sink()
    admin.fail_read.add("east")
    admin.fail_write.add("west")
    east, west = check_pulsar_switches(
        admin, ["east", "west"], disable_shedder=True, dry_run=False, metrics=sink
    )
    assert (east.shedding, east.auto_split) == (None, None) and east.errors
    assert west.shedding is True and west.turned_off == () and west.errors
    assert sink.errors == {"east": 1, "west": 1}
    assert ("east", "shedding") not in sink.switches  # unknown: no value exported
    assert isinstance(ServerError("x"), PulsarAdminError)
