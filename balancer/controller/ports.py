"""What the controller needs: a Pulsar admin client (PulsarPeerGroup satisfies it) and,
when several balancers watch one peer group, the single-writer lease.

The client routes each call to the cluster that owns the namespace (PIP-8 peer groups) and
retries with its own backoff; errors arrive as `balancer.pulsar.errors` types.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from balancer.core.bundles import BundleRange, NamespaceBundles
from balancer.core.lease import LeaseStatus
from balancer.pulsar.models import InternalStats, MessageId, OffloadStatus


class AdminPort(Protocol):
    def get_bundles(self, namespace: str) -> NamespaceBundles: ...

    def split_bundle(
        self,
        namespace: str,
        bundle: BundleRange | str,
        *,
        algorithm: str,
        boundaries: Sequence[int] = (),
        unload: bool = False,
    ) -> None: ...

    def internal_stats(self, topic: str) -> InternalStats: ...

    def trigger_offload(self, topic: str, message_id: MessageId) -> None: ...

    def offload_status(self, topic: str) -> OffloadStatus: ...


class WriterLease(Protocol):
    """Whether this process may act on Pulsar now (`balancer.kafka.lease` holds one on Kafka).

    Asked immediately before every split and offload call: a lease is valid only until a
    local deadline, so the answer can change between two calls.
    """

    def status(self) -> LeaseStatus: ...
