"""What the controller needs: a Pulsar admin client (PulsarPeerGroup satisfies it) and,
when several balancers watch one peer group, the single-writer lease. Moving bundles needs
`MovePort` too, and the start-up check of Pulsar's own shedder `PulsarConfigPort` (separate
protocols: a client without them still splits and offloads).

The client routes each call to the cluster that owns the namespace (PIP-8 peer groups) and
retries with its own backoff; errors arrive as `balancer.pulsar.errors` types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

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


@runtime_checkable
class MovePort(Protocol):
    """Unload a bundle to a chosen broker, and read who owns what (never by a lookup, which
    assigns an unowned bundle and uses up the pending destination)."""

    def unload_bundle(
        self,
        namespace: str,
        bundle: BundleRange | str,
        *,
        cluster: str | None = None,
        destination_broker: str | None = None,
    ) -> None: ...

    # `GET /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces`: bundle name
    # (`tenant/ns/0x.._0x..`) -> its ownership status; only the keys are read here.
    def owned_bundles(self, cluster: str, broker: str) -> Mapping[str, object]: ...

    def list_brokers(self, cluster: str) -> tuple[str, ...]: ...  # active brokers' ids


@runtime_checkable
class PulsarConfigPort(Protocol):
    """Pulsar's broker configuration: read (runtime, with the dynamic overrides) and set a
    dynamic key (`POST /admin/v2/brokers/configuration/{name}/{value}`)."""

    def runtime_configuration(self, cluster: str) -> Mapping[str, str]: ...

    def set_dynamic_configuration(self, cluster: str, name: str, value: str) -> None: ...


@runtime_checkable
class DynamicConfigPort(PulsarConfigPort, Protocol):
    """What a rolling restart needs besides: which keys are overridden in the configuration
    store (`GET .../configuration/values`) and removing an override (`DELETE
    .../configuration/{name}`), so a switch that came from broker.conf is left that way."""

    def dynamic_configuration(self, cluster: str) -> Mapping[str, str]: ...

    def delete_dynamic_configuration(self, cluster: str, name: str) -> None: ...


class WriterLease(Protocol):
    """Whether this process may act on Pulsar now (`balancer.kafka.lease` holds one on Kafka).

    Asked immediately before every split and offload call: a lease is valid only until a
    local deadline, so the answer can change between two calls.
    """

    def status(self) -> LeaseStatus: ...
