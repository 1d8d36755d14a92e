"""`controller.writer_lease`: one balancer of a peer group acts, the others stand by.

Kept apart from `config` (already long); `BalancerConfig` nests it under `controller`.
The group and topic default to a name derived from the peer group's sorted cluster names, so
two balancers of one peer group meet without configuration.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

LEASE_NAME_PREFIX = "pulsar-balancer-writer-lease"
_TOPIC_CHARS = re.compile(r"[^A-Za-z0-9._-]")
_KAFKA_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def derived_lease_name(cluster_names: Iterable[str]) -> str:
    """Group id and topic of a peer group's lease: readable, and unique per set of names.

    The hash keeps two peer groups apart whose names only differ in characters a Kafka topic
    cannot hold (`a:b` and `a_b`).
    """
    names = sorted(set(cluster_names))
    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:10]
    readable = _TOPIC_CHARS.sub("_", "_".join(names))[:180]
    return f"{LEASE_NAME_PREFIX}.{readable}.{digest}"


class WriterLeaseConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    # Only in controller.mode apply (dry-run touches nothing). Off: this balancer acts
    # whatever other balancers of the peer group do.
    enabled: bool = True
    group: str | None = Field(default=None, min_length=1)  # Kafka group id; None: derived
    topic: str | None = None  # one-partition topic the group shares; None: derived
    # Kafka's session timeout: a holder that stops heartbeating loses the lease after this,
    # and a standby takes over then (plus the broker's rebalance). Kafka brokers accept
    # 6..1800 s by default (group.min/max.session.timeout.ms).
    lease_s: float = Field(default=30.0, ge=6, le=1800)
    # The holder stops acting this long before Kafka could give the lease to another
    # balancer: room for a late heartbeat answer and for the call in flight.
    safety_margin_s: float = Field(default=5.0, ge=0)

    @field_validator("topic")
    @classmethod
    def _topic_name(cls, value: str | None) -> str | None:
        if value is not None and not _KAFKA_TOPIC.match(value):
            raise ValueError("must be a Kafka topic name: 1-249 of A-Z a-z 0-9 . _ -")
        return value

    @model_validator(mode="after")
    def _margin_fits(self) -> Self:
        if self.safety_margin_s >= self.lease_s / 2:
            raise ValueError(
                f"safety_margin_s ({self.safety_margin_s:g}) must be below half of lease_s "
                f"({self.lease_s:g}): the holder would act for less than half the lease"
            )
        return self

    def group_id(self, cluster_names: Iterable[str]) -> str:
        return self.group or derived_lease_name(cluster_names)

    def topic_name(self, cluster_names: Iterable[str]) -> str:
        return self.topic or derived_lease_name(cluster_names)
