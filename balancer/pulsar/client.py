"""Typed Pulsar admin REST client for a peer group of clusters (PIP-8).

    group = PulsarPeerGroup(
        {"a": ClusterEndpoint("a", "https://pulsar-a:8443"), "b": ClusterEndpoint(...)},
        ClientSettings(
            token=TokenSource(file=Path("/var/run/secrets/pulsar/token")),
            tls=TlsSettings(ca_bundle=Path("/etc/pulsar/ca.pem")),
        ),
    )
    layout = group.get_bundles("tenant/ns", cluster="a")   # "a": where its stats came from
    group.split_bundle("tenant/ns", layout.bundles[0], cluster="a",
                       algorithm="specified_positions_divide", boundaries=[0x20000000])

Namespace and topic calls go to the owner learnt from an earlier cross-cluster 307, else to
`cluster=` (the cluster the namespace's stats came from; inside a `routed_to(cluster)` block
that cluster is the default), else to the entry cluster. Only split, unload and a topic's
stats and internalStats redirect to the peer holding the namespace; other reads (bundles,
topic list, offload status) are answered by the cluster asked, so they must be routed, not
discovered (`balancer.pulsar.routing`). Cluster calls (stats of a broker, peers, tenants) name
the cluster to ask; configuration-store reads asked of no cluster in particular fall back to
the next cluster when one does not answer. Every method raises a `PulsarAdminError` subclass
on failure (see `balancer.pulsar.errors`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from balancer.core.bundles import BundleRange, InvalidBundle, NamespaceBundles
from balancer.core.topics import TopicDomain, parse_topic
from balancer.pulsar.admin_base import bundle_text, enc, ns_path, split_namespace, topic_path
from balancer.pulsar.broker_admin import BrokerAdmin, _broker_id
from balancer.pulsar.models import (
    BrokerTopicStats,
    InternalStats,
    MessageId,
    OffloadStatus,
    TopicHashPositions,
    TopicStats,
    parse_string_list,
)
from balancer.pulsar.routing import ClusterEndpoint
from balancer.pulsar.settings import ClientSettings
from balancer.pulsar.transport import Call


class PulsarPeerGroup(BrokerAdmin):
    """Admin client for one or more Pulsar clusters forming a peer group.

    `clusters` maps each cluster name to its endpoint (a list of endpoints works too);
    `settings` holds the group's defaults (token, TLS, timeouts, retries, the entry cluster,
    redirect limits) and the injectable clock and transport. A redirect back to a URL already
    visited with the same query raises RedirectLoopError (X -> leader -> X?authoritative=true
    is followed).
    """

    @classmethod
    def single(
        cls, name: str, admin_url: str, settings: ClientSettings | None = None
    ) -> PulsarPeerGroup:
        """A client for one cluster (a peer group of one)."""
        return cls({name: ClusterEndpoint(name, admin_url)}, settings)

    # -- namespaces and bundles -------------------------------------------------------------

    def get_bundles(self, namespace: str, *, cluster: str | None = None) -> NamespaceBundles:
        """`GET /admin/v2/namespaces/{t}/{ns}/bundles`, as `cluster` knows them.

        Pulsar answers this locally (no redirect): a cluster that is not the namespace's
        home answers its own, possibly stale, layout. Ask the cluster the stats came from.
        """
        path, template = ns_path(namespace, "/bundles")
        call = Call("GET", path, template + "/bundles", namespace=namespace, home=cluster)
        return self._parse(call, lambda body: NamespaceBundles.from_json(namespace, body))

    def split_bundle(
        self,
        namespace: str,
        bundle: BundleRange | str,
        *,
        algorithm: str,
        boundaries: Sequence[int] = (),
        unload: bool = False,
        cluster: str | None = None,
    ) -> None:
        """`PUT .../{bundle}/split?unload=&splitAlgorithmName=` with the boundaries as body.

        `bundle` may be a range or Pulsar's `LARGEST` / `HOT`; `algorithm` is Pulsar's name
        (`balancer.core.split.SplitAlgorithm` spells them; `balanced_flow_divide` is ours
        and never sent). Pulsar answers 204 also when the algorithm finds no valid boundary
        (the split is then a no-op).
        """
        if not isinstance(algorithm, str) or not algorithm:
            raise ValueError("split algorithm name must be a non-empty string")
        body: list[int] = []
        for value in boundaries:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"split boundary {value!r} must be an integer")
            if not 0 <= value <= 0xFFFFFFFF:
                raise ValueError(f"split boundary {value} is outside 0x00000000..0xffffffff")
            body.append(value)
        text = bundle_text(bundle, allow_special=True)
        path, template = ns_path(namespace, f"/{enc(text)}/split")
        call = Call(
            "PUT",
            path,
            template + "/{bundle}/split",
            params=(("unload", "true" if unload else "false"), ("splitAlgorithmName", algorithm)),
            json_body=body,
            namespace=namespace,
            home=cluster,
            idempotent=False,  # a second split would split the children
        )
        self._t.send(call)

    def unload_bundle(
        self,
        namespace: str,
        bundle: BundleRange | str,
        *,
        cluster: str | None = None,
        destination_broker: str | None = None,
    ) -> None:
        """`PUT /admin/v2/namespaces/{t}/{ns}/{bundle}/unload[?destinationBroker=host:port]`.

        With a destination (Pulsar 3.0+): ConflictError (409) when it is not an active
        broker; the modular load manager answers 204 BEFORE the destination owns the bundle
        (its next lookup takes it, or another broker: read ownership back), the extensible
        one once it does. Never re-sent after a 5xx or a lost answer (OutcomeUnknownError):
        a second unload would move the bundle again.
        """
        path, template = ns_path(namespace, f"/{enc(bundle_text(bundle))}/unload")
        params: tuple[tuple[str, str], ...] = ()
        if destination_broker is not None:
            params = (("destinationBroker", _broker_id(destination_broker)),)
        self._t.send(
            Call(
                "PUT",
                path,
                template + "/{bundle}/unload",
                params=params,
                namespace=namespace,
                home=cluster,
                idempotent=destination_broker is None,
            )
        )

    def topic_hash_positions(
        self,
        namespace: str,
        bundle: BundleRange | str,
        topics: Iterable[str] = (),
        *,
        cluster: str | None = None,
    ) -> TopicHashPositions:
        """PIP-143 `GET .../{bundle}/topicHashPositions?topics=a&topics=b`.

        No topics: every topic of the bundle. A partitioned base name expands to its
        partitions in the bundle. No peer redirect: a broker of the cluster asked must own
        the bundle (else PreconditionFailedError); another one answers 307 to the owner.
        """
        if isinstance(topics, str):
            raise ValueError("topics must be an iterable of names, not one string")
        params = tuple(("topics", parse_topic(t).full) for t in topics)
        path, template = ns_path(namespace, f"/{enc(bundle_text(bundle))}/topicHashPositions")
        call = Call(
            "GET",
            path,
            template + "/{bundle}/topicHashPositions",
            params=params,
            namespace=namespace,
            home=cluster,
        )
        return self._parse(call, TopicHashPositions.from_json)

    def topics_of_bundle(
        self,
        namespace: str,
        bundle: BundleRange | str,
        *,
        domain: TopicDomain = TopicDomain.PERSISTENT,
        cluster: str | None = None,
    ) -> tuple[str, ...]:
        """`GET /admin/v2/{domain}/{t}/{ns}?bundle=0x..._0x...`: full topic names."""
        tenant, ns = split_namespace(namespace)
        call = Call(
            "GET",
            f"/admin/v2/{domain.value}/{enc(tenant)}/{enc(ns)}",
            "/admin/v2/{domain}/{tenant}/{namespace}",
            params=(("bundle", bundle_text(bundle)),),
            namespace=namespace,
            home=cluster,
        )
        return self._parse(call, lambda body: parse_string_list(body, "topics of a bundle"))

    def lookup_bundle(self, topic: str, *, cluster: str | None = None) -> BundleRange:
        """`GET /lookup/v2/topic/{domain}/{t}/{ns}/{topic}/bundle` (plain text)."""
        name = parse_topic(topic)
        call = Call(
            "GET",
            f"/lookup/v2/topic/{name.domain.value}/{enc(name.tenant)}/{enc(name.namespace)}/"
            f"{enc(name.local_name)}/bundle",
            "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}/bundle",
            namespace=name.namespace_name,
            home=cluster,
        )
        response = self._t.send(call)
        text = response.text.strip().strip('"')  # some proxies wrap plain text in quotes
        try:
            return BundleRange.parse(text)
        except InvalidBundle as exc:
            raise self._t.invalid_response(call, response, str(exc)) from None

    # -- topics -----------------------------------------------------------------------------

    def topic_stats(self, topic: str, *, cluster: str | None = None) -> TopicStats:
        """`GET .../{topic}/stats`; 307 to the peer holding the namespace
        (`PersistentTopicsBase.internalGetStatsAsync`), and to the owner broker."""
        name = parse_topic(topic)
        path, template = topic_path(name, "/stats")
        call = Call("GET", path, template, namespace=name.namespace_name, home=cluster)
        return self._parse(call, lambda body: TopicStats.from_json(body, f"stats of {name}"))

    def internal_stats(self, topic: str, *, cluster: str | None = None) -> InternalStats:
        """`GET .../{topic}/internalStats`: ledgers oldest first, plus currentLedgerSize;
        redirected to the peer holding the namespace, as `topic_stats`."""
        name = parse_topic(topic)
        path, template = topic_path(name, "/internalStats")
        call = Call("GET", path, template, namespace=name.namespace_name, home=cluster)
        return self._parse(call, InternalStats.from_json)

    def trigger_offload(
        self, topic: str, message_id: MessageId, *, cluster: str | None = None
    ) -> None:
        """`PUT .../{topic}/offload`: offload every ledger before `message_id.ledger_id`.

        Never redirected to a peer: a cluster without the topic answers 404.

        ConflictError (409) when an offload is already running for the topic.
        """
        name = parse_topic(topic)
        path, template = topic_path(name, "/offload")
        self._t.send(
            Call(
                "PUT",
                path,
                template,
                json_body=message_id.to_json(),
                namespace=name.namespace_name,
                home=cluster,
                idempotent=False,  # the controller reads the offload status back instead
            )
        )

    def offload_status(self, topic: str, *, cluster: str | None = None) -> OffloadStatus:
        """`GET .../{topic}/offload` (like the trigger: no peer redirect, 404 elsewhere)."""
        name = parse_topic(topic)
        path, template = topic_path(name, "/offload")
        call = Call("GET", path, template, namespace=name.namespace_name, home=cluster)
        return self._parse(call, OffloadStatus.from_json)

    # -- clusters, tenants, brokers ---------------------------------------------------------

    def broker_topic_stats(self, cluster: str, broker_url: str | None = None) -> BrokerTopicStats:
        """`GET /admin/v2/broker-stats/topics` of one broker of `cluster`.

        Without `broker_url` the cluster's admin URL is asked (one broker behind it); pass a
        broker's own web service URL to poll each broker of a multi-broker cluster.
        """
        if broker_url is not None:
            ClusterEndpoint(cluster, broker_url)  # same validation as a cluster admin URL
        call = Call(
            "GET",
            "/admin/v2/broker-stats/topics",
            "/admin/v2/broker-stats/topics",
            cluster=cluster,
            url_override=broker_url,
        )
        response = self._t.send(call)
        if not response.content.strip():
            # PulsarStats has written no snapshot yet (the first update runs
            # statsUpdateInitialDelayInSecs after the broker starts): no data, not an error.
            return BrokerTopicStats.not_yet(cluster)
        return self._decode(call, response, lambda body: BrokerTopicStats.from_json(cluster, body))
