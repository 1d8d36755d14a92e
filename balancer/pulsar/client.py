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

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from balancer.core.bundles import BundleRange, InvalidBundle, NamespaceBundles
from balancer.core.topics import TopicDomain, TopicName, parse_topic
from balancer.pulsar.models import (
    BrokerTopicStats,
    ClusterData,
    InternalStats,
    MessageId,
    OffloadStatus,
    ResponseShapeError,
    TopicHashPositions,
    TopicStats,
    parse_string_list,
)
from balancer.pulsar.routing import ClusterEndpoint
from balancer.pulsar.settings import ClientSettings
from balancer.pulsar.transport import AdminTransport, Call, RequestKey

_T = TypeVar("_T")
_NAME = re.compile(r"^[-=:.\w]+$")  # Pulsar's rule for tenant, namespace and cluster names
_SPECIAL_BUNDLES = ("LARGEST", "HOT")  # Pulsar accepts these in place of a range on split

NS = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"


class SplitAlgorithm(StrEnum):
    """Pulsar's split algorithm names (`splitAlgorithmName`)."""

    RANGE_EQUALLY_DIVIDE = "range_equally_divide"
    TOPIC_COUNT_EQUALLY_DIVIDE = "topic_count_equally_divide"
    SPECIFIED_POSITIONS_DIVIDE = "specified_positions_divide"
    FLOW_OR_QPS_EQUALLY_DIVIDE = "flow_or_qps_equally_divide"


def _enc(part: str) -> str:
    """One path segment, percent-encoded (a `/` inside a name must not become a separator)."""
    return quote(part, safe="")


def _name(value: str, what: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValueError(f"invalid {what} {value!r} (allowed: letters, digits, -=:._)")
    return value


def _split_namespace(namespace: str) -> tuple[str, str]:
    if not isinstance(namespace, str) or namespace.count("/") != 1:
        raise ValueError(f"namespace must be 'tenant/namespace', got {namespace!r}")
    tenant, ns = namespace.split("/")
    return _name(tenant, "tenant"), _name(ns, "namespace")


def _bundle_text(bundle: BundleRange | str, *, allow_special: bool = False) -> str:
    if isinstance(bundle, BundleRange):
        return str(bundle)
    if allow_special and bundle in _SPECIAL_BUNDLES:
        return bundle
    try:
        return str(BundleRange.parse(bundle))
    except InvalidBundle as exc:
        raise ValueError(str(exc)) from None


def _ns_path(namespace: str, suffix: str = "") -> tuple[str, str]:
    tenant, ns = _split_namespace(namespace)
    return f"/admin/v2/namespaces/{_enc(tenant)}/{_enc(ns)}{suffix}", NS


def _topic_path(topic: TopicName, suffix: str) -> tuple[str, str]:
    path = (
        f"/admin/v2/{topic.domain.value}/{_enc(topic.tenant)}/{_enc(topic.namespace)}/"
        f"{_enc(topic.local_name)}{suffix}"
    )
    return path, f"{TOPIC}{suffix}"


class PulsarPeerGroup:
    """Admin client for one or more Pulsar clusters forming a peer group.

    `clusters` maps each cluster name to its endpoint (a list of endpoints works too);
    `settings` holds the group's defaults (token, TLS, timeouts, retries, the entry cluster,
    redirect limits) and the injectable clock and transport. A redirect back to a URL already
    visited with the same query raises RedirectLoopError (X -> leader -> X?authoritative=true
    is followed).
    """

    def __init__(
        self,
        clusters: Mapping[str, ClusterEndpoint] | Iterable[ClusterEndpoint],
        settings: ClientSettings | None = None,
    ) -> None:
        if not isinstance(clusters, Mapping):
            endpoints = list(clusters)
            clusters = {e.name: e for e in endpoints}
            if len(clusters) != len(endpoints):
                raise ValueError("cluster names in a peer group must be unique")
        self._t = AdminTransport(clusters, settings)

    @classmethod
    def single(
        cls, name: str, admin_url: str, settings: ClientSettings | None = None
    ) -> PulsarPeerGroup:
        """A client for one cluster (a peer group of one)."""
        return cls({name: ClusterEndpoint(name, admin_url)}, settings)

    def close(self) -> None:
        self._t.close()

    def __enter__(self) -> PulsarPeerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PulsarPeerGroup({self._t!r})"

    # -- routing and counting ---------------------------------------------------------------

    @property
    def clusters(self) -> Mapping[str, ClusterEndpoint]:
        return self._t.router.clusters

    @property
    def entry_cluster(self) -> str:
        return self._t.router.entry_cluster

    def owner_of(self, namespace: str) -> str | None:
        """The cluster last seen serving `namespace`, or None if not learnt yet."""
        return self._t.router.owner_of(namespace)

    def forget_owner(self, namespace: str) -> None:
        self._t.router.forget_owner(namespace)

    def request_counts(self) -> dict[RequestKey, int]:
        """Attempts sent, per (cluster, method, path template)."""
        return self._t.request_counts()

    def request_count(self, **filters: str | None) -> int:
        """Attempts sent so far matching every filter given (`AdminTransport.request_count`)."""
        return self._t.request_count(**filters)

    def reset_request_counts(self) -> None:
        self._t.reset_request_counts()

    def token_problems(self) -> dict[str, str]:
        """Cluster -> why its token file cannot be used now: deleted, unreadable, empty (a
        sentence without the token; logged once as a WARNING). Empty when every token is
        fine. The last good token is sent meanwhile."""
        return self._t.token_problems()

    # -- plumbing ---------------------------------------------------------------------------

    def _parse(self, call: Call, parse: Callable[[Any], _T]) -> _T:
        return self._decode(call, self._t.send(call), parse)

    def _decode(self, call: Call, response: httpx.Response, parse: Callable[[Any], _T]) -> _T:
        try:
            body = response.json()
            return parse(body)
        except (ValueError, KeyError, TypeError) as exc:
            # ResponseShapeError, InvalidBundle and JSON errors are all ValueErrors.
            detail = (
                str(exc)
                if isinstance(exc, ResponseShapeError | InvalidBundle)
                else (f"{type(exc).__name__}: {exc}")
            )
            raise self._t.invalid_response(call, response, detail) from None

    def _cluster_or_entry(self, cluster: str | None) -> str:
        return self.entry_cluster if cluster is None else cluster

    # -- namespaces and bundles -------------------------------------------------------------

    def get_bundles(self, namespace: str, *, cluster: str | None = None) -> NamespaceBundles:
        """`GET /admin/v2/namespaces/{t}/{ns}/bundles`, as `cluster` knows them.

        Pulsar answers this locally (no redirect): a cluster that is not the namespace's
        home answers its own, possibly stale, layout. Ask the cluster the stats came from.
        """
        path, template = _ns_path(namespace, "/bundles")
        call = Call("GET", path, template + "/bundles", namespace=namespace, home=cluster)
        return self._parse(call, lambda body: NamespaceBundles.from_json(namespace, body))

    def get_replication_clusters(
        self, namespace: str, *, via: str | None = None
    ) -> tuple[str, ...]:
        """`GET /admin/v2/namespaces/{t}/{ns}/replication`: the namespace's clusters, from the
        shared configuration store (any cluster answers the same, no redirect)."""
        path, template = _ns_path(namespace, "/replication")
        call = Call(
            "GET",
            path,
            template + "/replication",
            cluster=self._cluster_or_entry(via),
            any_cluster=via is None,
        )
        return self._parse(call, lambda body: parse_string_list(body, "replication clusters"))

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

        `bundle` may be a range or Pulsar's `LARGEST` / `HOT`. Pulsar answers 204 also when
        the algorithm finds no valid boundary (the split is then a no-op).
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
        text = _bundle_text(bundle, allow_special=True)
        path, template = _ns_path(namespace, f"/{_enc(text)}/split")
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
        self, namespace: str, bundle: BundleRange | str, *, cluster: str | None = None
    ) -> None:
        """`PUT /admin/v2/namespaces/{t}/{ns}/{bundle}/unload`."""
        path, template = _ns_path(namespace, f"/{_enc(_bundle_text(bundle))}/unload")
        self._t.send(
            Call("PUT", path, template + "/{bundle}/unload", namespace=namespace, home=cluster)
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
        path, template = _ns_path(namespace, f"/{_enc(_bundle_text(bundle))}/topicHashPositions")
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
        tenant, ns = _split_namespace(namespace)
        call = Call(
            "GET",
            f"/admin/v2/{domain.value}/{_enc(tenant)}/{_enc(ns)}",
            "/admin/v2/{domain}/{tenant}/{namespace}",
            params=(("bundle", _bundle_text(bundle)),),
            namespace=namespace,
            home=cluster,
        )
        return self._parse(call, lambda body: parse_string_list(body, "topics of a bundle"))

    def lookup_bundle(self, topic: str, *, cluster: str | None = None) -> BundleRange:
        """`GET /lookup/v2/topic/{domain}/{t}/{ns}/{topic}/bundle` (plain text)."""
        name = parse_topic(topic)
        call = Call(
            "GET",
            f"/lookup/v2/topic/{name.domain.value}/{_enc(name.tenant)}/{_enc(name.namespace)}/"
            f"{_enc(name.local_name)}/bundle",
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
        path, template = _topic_path(name, "/stats")
        call = Call("GET", path, template, namespace=name.namespace_name, home=cluster)
        return self._parse(call, lambda body: TopicStats.from_json(body, f"stats of {name}"))

    def internal_stats(self, topic: str, *, cluster: str | None = None) -> InternalStats:
        """`GET .../{topic}/internalStats`: ledgers oldest first, plus currentLedgerSize;
        redirected to the peer holding the namespace, as `topic_stats`."""
        name = parse_topic(topic)
        path, template = _topic_path(name, "/internalStats")
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
        path, template = _topic_path(name, "/offload")
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
        path, template = _topic_path(name, "/offload")
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

    def list_clusters(self, *, via: str | None = None) -> tuple[str, ...]:
        """`GET /admin/v2/clusters`, asked of cluster `via` (default: the entry cluster)."""
        call = Call(
            "GET",
            "/admin/v2/clusters",
            "/admin/v2/clusters",
            cluster=self._cluster_or_entry(via),
            any_cluster=via is None,
        )
        return self._parse(call, lambda body: parse_string_list(body, "clusters"))

    def get_cluster(self, name: str, *, via: str | None = None) -> ClusterData:
        """`GET /admin/v2/clusters/{cluster}` (serviceUrl, peerClusterNames, ...).

        Asked of `via`, else of the cluster itself when it is in the group, else the entry;
        without `via`, a cluster that does not answer is replaced by the next one (cluster
        data lives in the configuration store every cluster of the group reads).
        """
        _name(name, "cluster name")
        ask = via if via is not None else (name if name in self.clusters else None)
        call = Call(
            "GET",
            f"/admin/v2/clusters/{_enc(name)}",
            "/admin/v2/clusters/{cluster}",
            cluster=self._cluster_or_entry(ask),
            any_cluster=via is None,
        )
        return self._parse(call, lambda body: ClusterData.from_json(name, body))

    def get_peer_clusters(self, cluster: str, *, via: str | None = None) -> tuple[str, ...]:
        """`GET /admin/v2/clusters/{cluster}/peers` (PIP-8); () when none were ever set (a
        null entity: `ClustersBase.getPeerClusterNames` answers 204 with no body)."""
        _name(cluster, "cluster name")
        ask = via if via is not None else (cluster if cluster in self.clusters else None)
        call = Call(
            "GET",
            f"/admin/v2/clusters/{_enc(cluster)}/peers",
            "/admin/v2/clusters/{cluster}/peers",
            cluster=self._cluster_or_entry(ask),
            any_cluster=via is None,
        )
        response = self._t.send(call)
        if response.status_code == 204 or not response.content.strip():
            return ()
        return self._decode(call, response, lambda body: parse_string_list(body, "peer clusters"))

    def set_peer_clusters(
        self, cluster: str, peers: Iterable[str], *, via: str | None = None
    ) -> None:
        """`POST /admin/v2/clusters/{cluster}/peers` with a JSON array of cluster names."""
        _name(cluster, "cluster name")
        if isinstance(peers, str):
            raise ValueError("peers must be an iterable of cluster names, not one string")
        body = [_name(p, "peer cluster name") for p in peers]
        ask = via if via is not None else (cluster if cluster in self.clusters else None)
        self._t.send(
            Call(
                "POST",
                f"/admin/v2/clusters/{_enc(cluster)}/peers",
                "/admin/v2/clusters/{cluster}/peers",
                json_body=body,
                cluster=self._cluster_or_entry(ask),
            )
        )

    def list_tenants(self, *, via: str | None = None) -> tuple[str, ...]:
        """`GET /admin/v2/tenants`."""
        call = Call(
            "GET",
            "/admin/v2/tenants",
            "/admin/v2/tenants",
            cluster=self._cluster_or_entry(via),
            any_cluster=via is None,
        )
        return self._parse(call, lambda body: parse_string_list(body, "tenants"))

    def list_brokers(self, cluster: str, *, via: str | None = None) -> tuple[str, ...]:
        """`GET /admin/v2/brokers/{cluster}`: the active brokers' web addresses (`host:port`)."""
        _name(cluster, "cluster name")
        ask = via if via is not None else (cluster if cluster in self.clusters else None)
        call = Call(
            "GET",
            f"/admin/v2/brokers/{_enc(cluster)}",
            "/admin/v2/brokers/{cluster}",
            cluster=self._cluster_or_entry(ask),
        )
        return self._parse(call, lambda body: parse_string_list(body, "brokers"))

    def list_namespaces(self, tenant: str, *, via: str | None = None) -> tuple[str, ...]:
        """`GET /admin/v2/namespaces/{tenant}`: `tenant/ns` names known to cluster `via`."""
        _name(tenant, "tenant")
        call = Call(
            "GET",
            f"/admin/v2/namespaces/{_enc(tenant)}",
            "/admin/v2/namespaces/{tenant}",
            cluster=self._cluster_or_entry(via),
        )
        return self._parse(call, lambda body: parse_string_list(body, "namespaces"))
