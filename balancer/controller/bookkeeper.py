"""Bytes still in BookKeeper for the topics that may need an offload.

broker-stats/topics has no `offloadedStorageSize`, and its `storageSize`
(`ManagedLedgerImpl.getTotalSize`) still counts offloaded ledgers until retention deletes
them: from the stream alone, a topic once over its threshold stays over after its offload.
Before detection, each topic whose `storageSize` passes its namespace's threshold gets its
offloaded bytes from `internalStats` (the ledgers marked `offloaded`, the same answer the
controller computes the offload point from); the detector then compares
`storageSize - offloadedStorageSize` with the threshold as before, and stays pure. Only
topics over their threshold are asked about, so polling stays cheap: an offloaded topic costs
one read per window until retention trims it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from balancer.controller.ports import AdminPort
from balancer.core.load import TopicLoad
from balancer.core.thresholds import Thresholds
from balancer.core.topics import InvalidTopicName, parse_topic
from balancer.pulsar.errors import PulsarAdminError
from balancer.pulsar.routing import routed_to

log = logging.getLogger(__name__)


def offloaded_bytes(admin: AdminPort, topic: str) -> int:
    """Bytes of the topic's ledgers already in tiered storage (Pulsar's `getOffloadedSize`)."""
    stats = admin.internal_stats(topic)
    return sum(lg.size for lg in stats.ledgers[:-1] if lg.offloaded)


class BookKeeperCheck:
    """Fills `offloaded_storage_size` of the large topics that pass their threshold."""

    def __init__(self, admin: AdminPort) -> None:
        self.admin = admin
        self.reads = 0  # internalStats read for this check
        self.failures = 0  # reads that failed: the topic waits for the next window

    def fill(
        self, large_topics: Sequence[tuple[str, TopicLoad]], thresholds: Thresholds
    ) -> list[tuple[str, TopicLoad]]:
        """The topics with their offloaded bytes filled in where they matter.

        A topic under its threshold by `storageSize` is passed on unread (it cannot be over
        by what is in BookKeeper). A topic whose read fails is left out of this window: no
        offload decision on a size that may count offloaded bytes.
        """
        out: list[tuple[str, TopicLoad]] = []
        for cluster, load in large_topics:
            try:
                namespace = parse_topic(load.topic).namespace_name
            except InvalidTopicName:
                out.append((cluster, load))  # the detector skips it
                continue
            threshold = thresholds.policy_for(namespace).offload_threshold_bytes
            if threshold is None or load.storage_size <= threshold:
                out.append((cluster, load))
                continue
            self.reads += 1
            try:
                # The cluster the stats came from: another cluster of the peer group does
                # not hold the topic (Pulsar answers topic routes locally, with no 307).
                with routed_to(cluster):
                    offloaded = offloaded_bytes(self.admin, load.topic)
            except PulsarAdminError as exc:
                self.failures += 1
                log.warning(
                    "bytes in BookKeeper of %s not read (%s): no offload decision this window",
                    load.topic,
                    type(exc).__name__,
                )
                continue
            out.append((cluster, replace(load, offloaded_storage_size=offloaded)))
        return out
