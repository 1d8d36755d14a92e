"""The single-writer lease wired from the config (`controller.writer_lease`)."""

from __future__ import annotations

import os
import socket

from balancer.app.config import BalancerConfig
from balancer.app.stream_settings import kafka_security
from balancer.kafka.lease import KafkaWriterLease


def lease_identity() -> str:
    """How other balancers and operators name this one: host (the pod's name) and pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


def build_writer_lease(config: BalancerConfig) -> KafkaWriterLease | None:
    """The lease of the config's peer group, or None when this balancer needs none."""
    if not config.controller.uses_writer_lease:
        return None
    lease = config.controller.writer_lease
    names = [c.name for c in config.clusters]
    return KafkaWriterLease(
        bootstrap_servers=",".join(config.kafka.bootstrap_servers),
        group_id=lease.group_id(names),
        topic=lease.topic_name(names),
        identity=lease_identity(),
        lease_s=lease.lease_s,
        safety_margin_s=lease.safety_margin_s,
        client_kwargs=kafka_security(config).client_kwargs(),
    )
