"""Pulsar's own shedder and auto-split, checked at start: they fight an outside mover.

Pulsar's load manager unloads bundles from brokers it finds overloaded
(`loadBalancerSheddingEnabled`, default true) and splits hot bundles itself
(`loadBalancerAutoBundleSplitEnabled`, default true); both are dynamic configuration, read
from `GET /admin/v2/brokers/configuration/runtime`. While the shedder runs, it moves the
bundles we placed again (by its own rules) and the two balancers chase each other.

`check_pulsar_switches` reads both per cluster at start: when one is on it logs a WARNING
that says how to turn it off and back on, and exports it as a gauge; with the explicit
switches (`controller.disable_pulsar_shedder`, `controller.disable_pulsar_auto_split`) it
sets it to false (`POST /admin/v2/brokers/configuration/{name}/false`; never in dry-run) and
logs how to restore it. Turning the shedder off does not block admin unloads (ours). A
read or write that fails is logged and counted, never fatal.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from balancer.controller.ports import PulsarConfigPort
from balancer.pulsar.errors import PulsarAdminError

log = logging.getLogger(__name__)

SHEDDING = "loadBalancerSheddingEnabled"
AUTO_SPLIT = "loadBalancerAutoBundleSplitEnabled"
# Each key's metric label, its name in the log lines, our config switch, what it fights.
_SWITCHES = {
    SHEDDING: ("shedding", "shedder", "controller.disable_pulsar_shedder", "moves"),
    AUTO_SPLIT: (
        "auto_split",
        "auto-split",
        "controller.disable_pulsar_auto_split",
        "splits and moves",
    ),
}
_PULSAR_DEFAULT = True  # both default to true in broker.conf


class SwitchSink(Protocol):
    """The part of `balancer.ops.exporter.BalancerMetrics` this check feeds."""

    def set_pulsar_switch(self, cluster: str, switch: str, enabled: bool) -> None: ...

    def record_pulsar_config_error(self, cluster: str) -> None: ...


@dataclass(frozen=True, slots=True)
class SwitchState:
    """One cluster's switches after the check (None: could not be read)."""

    cluster: str
    shedding: bool | None
    auto_split: bool | None
    turned_off: tuple[str, ...] = ()  # the keys this check set to false
    errors: tuple[str, ...] = ()


def _command(name: str, value: str) -> str:
    return f"pulsar-admin brokers update-dynamic-config --config {name} --value {value}"


def _parse(config: Mapping[str, str], name: str) -> tuple[bool, str]:
    raw = config.get(name)
    if raw is None:
        return _PULSAR_DEFAULT, " (not in the runtime configuration: Pulsar's default)"
    return str(raw).strip().lower() == "true", ""


def check_pulsar_switches(
    admin: PulsarConfigPort,
    clusters: Iterable[str],
    *,
    disable_shedder: bool = False,
    disable_auto_split: bool = False,
    dry_run: bool = True,
    metrics: SwitchSink | None = None,
) -> list[SwitchState]:
    """Read (and, when told to and not in dry-run, turn off) Pulsar's shedder and auto-split
    on each cluster. Never raises for a cluster that cannot be read or written."""
    disable = {SHEDDING: disable_shedder, AUTO_SPLIT: disable_auto_split}
    states = []
    for cluster in clusters:
        try:
            config = admin.runtime_configuration(cluster)
        except PulsarAdminError as exc:
            log.warning(
                "cannot read Pulsar's runtime configuration of cluster %s (%s): whether its "
                "shedder or auto-split fights our moves is unknown", cluster, exc,
            )  # fmt: skip
            if metrics is not None:
                metrics.record_pulsar_config_error(cluster)
            states.append(SwitchState(cluster, None, None, errors=(str(exc),)))
            continue
        enabled: dict[str, bool] = {}
        turned_off: list[str] = []
        errors: list[str] = []
        for name, (label, what, switch, fights) in _SWITCHES.items():
            on, note = _parse(config, name)
            if on and disable[name] and not dry_run:
                try:
                    admin.set_dynamic_configuration(cluster, name, "false")
                except PulsarAdminError as exc:
                    log.error("cannot turn Pulsar's %s off on cluster %s: %s", what, cluster, exc)
                    if metrics is not None:
                        metrics.record_pulsar_config_error(cluster)
                    errors.append(f"{name}: {exc}")
                else:
                    on = False
                    turned_off.append(name)
                    log.warning(
                        "turned Pulsar's %s off on cluster %s (%s=false, as %s says); "
                        "to restore it: %s",
                        what, cluster, name, switch, _command(name, "true"),
                    )  # fmt: skip
            elif on:
                log.warning(
                    "Pulsar's %s is on on cluster %s (%s=true%s): it will fight our %s. "
                    "Turn it off with `%s` (back on: `%s`), or set %s: true%s",
                    what, cluster, name, note, fights, _command(name, "false"),
                    _command(name, "true"), switch,
                    " (not applied in dry-run)" if disable[name] else "",
                )  # fmt: skip
            else:
                log.info("Pulsar's %s is off on cluster %s (%s=false)", what, cluster, name)
            enabled[name] = on
            if metrics is not None:
                metrics.set_pulsar_switch(cluster, label, on)
        states.append(
            SwitchState(
                cluster, enabled[SHEDDING], enabled[AUTO_SPLIT], tuple(turned_off), tuple(errors)
            )
        )
    return states
