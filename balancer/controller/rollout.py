"""Start and finish a rolling restart (`pulsar-balancer roll`, issue 43 point 4).

Start: read Pulsar's shedder and auto-split switches (`GET /admin/v2/brokers/configuration/
runtime`) and which of them an override sets (`GET .../configuration/values`), write the
rollout record with the values to restore, the switches no override set (`unset`: broker.conf's)
and the restart order (acks from Kafka), and only then set both to false (`POST
.../configuration/{name}/false`). A crash at any point leaves either no record (nothing was
changed) or a record naming what to restore; a second `start` while the record says rolling
pauses them again and never reads the paused switches as the ones to restore.

Finish: put each switch back as it was: an overridden one to the value recorded (`POST`), an
unset one by deleting the pause's override (`DELETE .../configuration/{name}`,
`BrokersBase.deleteDynamicConfiguration`), so that broker.conf rules it again and a later
change there is not silently masked; then mark the record finished. A crash in between leaves
it rolling: the next finish restores again (a POST of the same value; a DELETE only of an
override still there: Pulsar answers 500 when the configuration store has no overrides node).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from balancer.controller.ports import DynamicConfigPort, PulsarConfigPort
from balancer.controller.pulsar_shedder import AUTO_SPLIT, SHEDDING
from balancer.core.rollout import check_order
from balancer.core.rollout_record import Rollout, finished, new_rollout

log = logging.getLogger(__name__)

PAUSED_SWITCHES: tuple[str, ...] = (SHEDDING, AUTO_SPLIT)
_PULSAR_DEFAULT = "true"  # both default to true in ServiceConfiguration


class RolloutStore(Protocol):
    """Where the rollout record lives (`balancer.kafka.drain_marks.KafkaDrainMarks`)."""

    def refresh(self) -> bool: ...

    def rollout(self, cluster: str) -> Rollout | None: ...

    def write_rollout(self, rollout: Rollout) -> None: ...


class RollInProgressError(ValueError):
    """`roll start` with another order while a roll is in progress."""


def start_rollout(
    store: RolloutStore,
    admin: DynamicConfigPort,
    cluster: str,
    order: Sequence[str],
    *,
    by: str,
    now_ms: int,
) -> tuple[Rollout, bool]:
    """The cluster's rollout, and whether this call started it (False: already rolling in
    this order; nothing changed)."""
    order = check_order(order)
    store.refresh()
    current = store.rollout(cluster)
    if current is not None and current.rolling:
        if current.order != order:
            raise RollInProgressError(
                f"a roll of {cluster} is in progress (started by {current.started_by}, order "
                f"{', '.join(current.order)}): `roll finish` it first"
            )
        _pause(admin, cluster, current)  # a start that died half-way: pause the rest
        return current, False
    config = admin.runtime_configuration(cluster)
    overridden = admin.dynamic_configuration(cluster)
    paused = {
        name: str(config.get(name, _PULSAR_DEFAULT)).strip().lower() or _PULSAR_DEFAULT
        for name in PAUSED_SWITCHES
    }
    unset = [name for name in PAUSED_SWITCHES if name not in overridden]
    rollout = new_rollout(cluster, order, paused, by=by, at_ms=now_ms, unset=unset)
    store.write_rollout(rollout)  # journaled before any switch changes
    _pause(admin, cluster, rollout)
    return rollout, True


def _pause(admin: PulsarConfigPort, cluster: str, rollout: Rollout) -> None:
    for name in PAUSED_SWITCHES:
        admin.set_dynamic_configuration(cluster, name, "false")
        log.warning("roll of %s: %s=false (was %s; `roll finish` restores it)",
                    cluster, name, rollout.paused.get(name))  # fmt: skip


def finish_rollout(
    store: RolloutStore, admin: DynamicConfigPort, cluster: str, *, by: str, now_ms: int
) -> Rollout | None:
    """Restore the switches a rolling record names and mark it finished; None when no roll
    of the cluster is in progress (nothing to restore)."""
    store.refresh()
    current = store.rollout(cluster)
    if current is None or not current.rolling:
        return None
    overridden = admin.dynamic_configuration(cluster) if current.unset else {}
    for name, value in sorted(current.paused.items()):
        if name not in current.unset:
            admin.set_dynamic_configuration(cluster, name, value)
            log.warning("roll of %s finished: %s=%s restored", cluster, name, value)
        elif name in overridden:
            admin.delete_dynamic_configuration(cluster, name)
            log.warning("roll of %s finished: %s's override deleted (broker.conf's value, %s "
                        "when the roll started, applies again)", cluster, name, value)  # fmt: skip
    store.write_rollout(finished(current, by=by, at_ms=now_ms))
    return current
