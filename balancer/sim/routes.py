"""The simulated admin REST API's routes: Pulsar's paths, each with the handler that answers
it from the shared `SimModel`.

Errors are Pulsar's JSON `{"reason": "..."}`. A namespace held by a peer cluster is answered
with 307 only on the routes Pulsar redirects (split, unload, a topic's stats and
internalStats); the others are answered from the asked cluster's own metadata
(`balancer.sim.peers` says which and why). Bundle and topic routes then go through the owner
lookup (`balancer.sim.ownership`). The HTTP server that serves them is `balancer.sim.server`.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote

from balancer.core.topics import InvalidTopicName, parse_topic
from balancer.sim import broker_routes
from balancer.sim.http_types import (
    _SEG,
    Handler,
    RawJson,
    Request,
    Response,
)
from balancer.sim.model import NamespaceState, SimError, SimModel
from balancer.sim.paths import metadata_path
from balancer.sim.peers import (
    config_store_layout,
    local_bundles,
    local_namespace,
    replication_clusters,
    stale_bundle,
)
from balancer.sim.splitting import check_supported

log = logging.getLogger(__name__)


def _ok(body: object) -> Response:
    return Response(200, body)


def _no_content() -> Response:
    return Response(204)


# ----- handlers ------------------------------------------------------------------------------


def _clusters(m: SimModel, r: Request) -> Response:
    return _ok(sorted(m.clusters))


def _cluster(m: SimModel, r: Request) -> Response:
    c = m.cluster(r.params[0])
    # ClusterData: serviceUrl is what the cluster advertises (maybe not the admin URL used).
    data = {"serviceUrl": c.advertised_url, "peerClusterNames": list(c.peers) or None}
    if c.broker_tls_urls:  # brokers with a TLS port: serviceUrlTls names broker 0's
        data["serviceUrlTls"] = c.broker_tls_urls[0]
    return _ok(data)


def _get_peers(m: SimModel, r: Request) -> Response:
    # ClustersBase.getPeerClusterNames answers ClusterData.peerClusterNames, null when never
    # set: JAX-RS sends 204 with no body for a null entity.
    peers = m.cluster(r.params[0]).peers
    return _ok(list(peers)) if peers else _no_content()


def _set_peers(m: SimModel, r: Request) -> Response:
    body = r.json_body()
    if not isinstance(body, list) or not all(isinstance(x, str) for x in body):
        raise SimError(400, "Peer cluster names must be a JSON array of strings")
    m.set_peers(r.params[0], body)
    return _no_content()


def _brokers(m: SimModel, r: Request) -> Response:
    # The active brokers (LoadManager.getAvailableBrokersAsync): not those that left.
    c = m.cluster(r.params[0])
    return _ok([c.broker_address(b) for b in range(c.broker_count) if b not in c.stopped])


def _tenants(m: SimModel, r: Request) -> Response:
    return _ok(m.tenants())


def _tenant(m: SimModel, r: Request) -> Response:
    return _ok({"adminRoles": [], "allowedClusters": m.tenant_clusters(r.params[0])})


def _namespaces(m: SimModel, r: Request) -> Response:
    return _ok(m.namespaces_of(r.cluster, r.params[0]))


def _ns(m: SimModel, r: Request) -> NamespaceState:
    """For the routes Pulsar redirects to the peer holding the namespace (307)."""
    return m.locate(r.cluster, f"{r.params[0]}/{r.params[1]}")


def _local_ns(m: SimModel, r: Request) -> NamespaceState | None:
    """For the routes answered locally: None when another cluster holds the namespace."""
    return local_namespace(m, r.cluster, f"{r.params[0]}/{r.params[1]}")


def _policies(m: SimModel, r: Request) -> Response:
    ns = _local_ns(m, r)
    if ns is None:
        name = f"{r.params[0]}/{r.params[1]}"
        home = m.namespaces[name].cluster
        layout = config_store_layout(m, name).to_json()
        return _ok({"bundles": layout, "replication_clusters": [home], "deleted": False})
    return _ok(m.policies(ns))


def _bundles(m: SimModel, r: Request) -> Response:
    ns = _local_ns(m, r)
    if ns is None:  # not the home: the copy this cluster's first read made, frozen
        return _ok(local_bundles(m, r.cluster, f"{r.params[0]}/{r.params[1]}").to_json())
    with m.lock:
        return _ok(ns.layout.to_json())


def _replication(m: SimModel, r: Request) -> Response:
    return _ok(replication_clusters(m, f"{r.params[0]}/{r.params[1]}"))


def _split(m: SimModel, r: Request) -> Response:
    body = r.json_body()
    if body is None:
        body = []
    if not isinstance(body, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) for x in body
    ):
        raise SimError(400, "Split boundaries must be a JSON array of integers")
    algorithm = r.query.get("splitAlgorithmName", [None])[-1] or None
    check_supported(algorithm, m.scenario.broker, body)  # NamespacesBase: before any 307
    ns = _ns(m, r)
    with m.lock:
        try:
            bundle = m.resolve_bundle(ns, r.params[2], allow_special=True)
        except SimError:
            bundle = None  # split_bundle reports the bad bundle after the algorithm checks
        if bundle is not None:
            m.check_owner(ns, bundle, r.broker, authoritative=r.flag("authoritative"))
        m.split_bundle(
            ns, r.params[2], algorithm=algorithm, boundaries=body, unload=r.flag("unload")
        )
    return _no_content()


def _unload(m: SimModel, r: Request) -> Response:
    destination = r.query.get("destinationBroker", [""])[-1].strip()
    if destination:  # a move: balancer.sim.broker_routes.unload_to
        return broker_routes.unload_to(m, r, destination, locate=_ns)
    ns = _ns(m, r)
    with m.lock:
        bundle = m.resolve_bundle(ns, r.params[2])
        m.check_owner(ns, bundle, r.broker, authoritative=r.flag("authoritative"))
        m.unload_bundle(ns, r.params[2])
    return _no_content()


def _hash_positions(m: SimModel, r: Request) -> Response:
    # NamespacesBase.internalGetTopicHashPositionsAsync: no peer redirect, then
    # validateNamespaceBundleOwnershipAsync(readOnly): a broker of THIS cluster must own the
    # bundle (else 412), another broker than the owner answers 307 to it.
    ns = _local_ns(m, r)
    if ns is None:  # no broker of this cluster owns any bundle of the namespace
        name = f"{r.params[0]}/{r.params[1]}"
        bundle = stale_bundle(m, name, r.params[2])
        raise SimError(412, f"Failed to find ownership for ServiceUnit:{name}/{bundle}")
    with m.lock:
        bundle = m.resolve_bundle(ns, r.params[2])
        m.check_owner(ns, bundle, r.broker, read_only=True)
    return _ok(m.topic_hash_positions(ns, r.params[2], r.query.get("topics", [])))


def _topics(m: SimModel, r: Request) -> Response:
    ns = _local_ns(m, r)
    bundle_text = r.query.get("bundle", [None])[-1]
    if ns is None:  # no managed ledger of the namespace in this cluster's metadata
        return _ok([])
    if bundle_text is None:
        return _ok(m.topics_of_bundle(ns, None))
    # PersistentTopicsBase.internalGetListAsync keeps the topics whose bundle's range text
    # equals the query: an unknown or malformed bundle matches none, `[]`, never an error.
    with m.lock:
        bundle = next((b for b in ns.layout.bundles if str(b) == bundle_text), None)
    return _ok([] if bundle is None else m.topics_of_bundle(ns, bundle))


def _topic(m: SimModel, r: Request, *, peer_redirect: bool = False) -> tuple[NamespaceState, int]:
    # `peer_redirect`: PersistentTopicsBase.internalGetStatsAsync / internalGetInternalStatsAsync
    # call validateGlobalNamespaceOwnershipAsync first (307 to the peer holding the namespace,
    # 412 when no peer does). The offload trigger and status check topic ownership only: a
    # cluster without the topic answers 404.
    ns: NamespaceState | None = _ns(m, r) if peer_redirect else _local_ns(m, r)
    local = r.params[2]
    if ns is None:
        raise SimError(404, f"Topic persistent://{r.params[0]}/{r.params[1]}/{local} not found")
    if m.partitions_of(ns, local):
        raise SimError(
            404, f"Topic persistent://{ns.name}/{local} is partitioned: ask its partitions"
        )
    i = m.topic_index(ns, local)
    with m.lock:
        bundle = ns.layout.find(int(m.traffic.table.positions[i]))
        m.check_owner(ns, bundle, r.broker, authoritative=r.flag("authoritative"))
    return ns, i


def _topic_stats(m: SimModel, r: Request) -> Response:
    _, i = _topic(m, r, peer_redirect=True)
    return _ok(m.topic_stats(i))


def _internal_stats(m: SimModel, r: Request) -> Response:
    _, i = _topic(m, r, peer_redirect=True)
    return _ok(m.internal_stats(i))


def _trigger_offload(m: SimModel, r: Request) -> Response:
    ns, i = _topic(m, r)
    body = r.json_body()
    ledger_id = body.get("ledgerId") if isinstance(body, dict) else None
    entry_id = body.get("entryId") if isinstance(body, dict) else None
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (ledger_id, entry_id)):
        raise SimError(400, "Offload needs a message id {ledgerId, entryId, partitionIndex}")
    assert isinstance(ledger_id, int)
    m.trigger_offload(i, ledger_id, ns=ns)
    return _no_content()


def _offload_status(m: SimModel, r: Request) -> Response:
    _, i = _topic(m, r)
    return _ok(m.offload_status(i))


def _shared_ns(m: SimModel, r: Request) -> NamespaceState:
    """Partitioned-topic metadata lives in the configuration store: any cluster answers."""
    local_namespace(m, r.cluster, f"{r.params[0]}/{r.params[1]}")  # 404 if unknown
    return m.namespaces[f"{r.params[0]}/{r.params[1]}"]


def _partitioned_topics(m: SimModel, r: Request) -> Response:
    ns = _shared_ns(m, r)
    return _ok(sorted(f"persistent://{ns.name}/{base}" for base in ns.partitioned))


def _partitions(m: SimModel, r: Request) -> Response:
    ns = _shared_ns(m, r)
    return _ok({"partitions": m.partitions_of(ns, r.params[2])})


def _broker_stats(m: SimModel, r: Request) -> Response:
    with m.lock:
        m.brokers.settle()  # clients' lookups after moves change what a broker owns
    return Response(200, RawJson(m.broker_stats.payload(r.cluster, r.broker)))


def _lookup_bundle(m: SimModel, r: Request) -> Response:
    domain, tenant, namespace, local = r.params
    try:
        topic = parse_topic(f"{domain}://{tenant}/{namespace}/{local}")
    except InvalidTopicName as exc:
        raise SimError(412, str(exc)) from None
    # TopicLookup: the bundle in the asked cluster's own layout (no peer redirect).
    ns = local_namespace(m, r.cluster, topic.namespace_name)
    from balancer.core.hashing import hash_position

    with m.lock:
        layout = ns.layout if ns is not None else config_store_layout(m, topic.namespace_name)
        bundle = layout.find(hash_position(topic.full))
    return Response(200, str(bundle), content_type="text/plain")


def _metadata_path(m: SimModel, r: Request) -> Response:
    domain, tenant, namespace, local = r.params
    try:
        topic = parse_topic(f"{domain}://{tenant}/{namespace}/{local}")
    except InvalidTopicName as exc:
        raise SimError(412, str(exc)) from None
    ns = m.locate(r.cluster, topic.namespace_name)
    return _ok(metadata_path(topic, ns.topic_buckets))


def _sim_clock(m: SimModel, r: Request) -> Response:
    return _ok({"now_ms": m.now_ms(), "elapsed_s": m.elapsed_s()})


def _sim_splits(m: SimModel, r: Request) -> Response:
    with m.lock:
        return _ok(
            [
                {
                    "time_ms": s.time_ms,
                    "cluster": s.cluster,
                    "namespace": s.namespace,
                    "parent": str(s.parent),
                    "children": [str(c) for c in s.children],
                    "algorithm": s.algorithm,
                    "unloaded": s.unloaded,
                }
                for s in m.splits
            ]
        )


_NS = rf"/admin/v2/namespaces/{_SEG}/{_SEG}"
_TOPIC = rf"/admin/v2/persistent/{_SEG}/{_SEG}/{_SEG}"
ROUTES: list[tuple[str, re.Pattern[str], str, Handler]] = [
    (method, re.compile(f"^{pattern}/?$"), name, handler)
    for method, pattern, name, handler in [
        # First: `/brokers/leaderBroker` would otherwise match `/brokers/{cluster}`.
        *broker_routes.ROUTES,
        ("GET", "/admin/v2/clusters", "clusters", _clusters),
        ("GET", rf"/admin/v2/clusters/{_SEG}", "cluster", _cluster),
        ("GET", rf"/admin/v2/clusters/{_SEG}/peers", "peers", _get_peers),
        ("POST", rf"/admin/v2/clusters/{_SEG}/peers", "set_peers", _set_peers),
        ("GET", rf"/admin/v2/brokers/{_SEG}", "brokers", _brokers),
        ("GET", "/admin/v2/tenants", "tenants", _tenants),
        ("GET", rf"/admin/v2/tenants/{_SEG}", "tenant", _tenant),
        ("GET", "/admin/v2/broker-stats/topics", "broker_stats", _broker_stats),
        ("GET", rf"/admin/v2/namespaces/{_SEG}", "namespaces", _namespaces),
        ("GET", _NS, "policies", _policies),
        ("GET", f"{_NS}/bundles", "bundles", _bundles),
        ("GET", f"{_NS}/replication", "replication", _replication),
        ("PUT", f"{_NS}/{_SEG}/split", "split", _split),
        ("PUT", f"{_NS}/{_SEG}/unload", "unload", _unload),
        ("GET", f"{_NS}/{_SEG}/topicHashPositions", "topic_hash_positions", _hash_positions),
        ("GET", rf"/admin/v2/persistent/{_SEG}/{_SEG}", "topics", _topics),
        (
            "GET",
            rf"/admin/v2/persistent/{_SEG}/{_SEG}/partitioned",
            "partitioned_topics",
            _partitioned_topics,
        ),
        ("GET", f"{_TOPIC}/stats", "topic_stats", _topic_stats),
        ("GET", f"{_TOPIC}/internalStats", "internal_stats", _internal_stats),
        ("PUT", f"{_TOPIC}/offload", "offload", _trigger_offload),
        ("GET", f"{_TOPIC}/offload", "offload_status", _offload_status),
        ("GET", f"{_TOPIC}/partitions", "partitions", _partitions),
        (
            "GET",
            rf"/lookup/v2/topic/{_SEG}/{_SEG}/{_SEG}/{_SEG}/bundle",
            "lookup_bundle",
            _lookup_bundle,
        ),
        (
            "GET",
            rf"/sim/v1/metadata-path/{_SEG}/{_SEG}/{_SEG}/{_SEG}",
            "metadata_path",
            _metadata_path,
        ),
        ("GET", "/sim/v1/clock", "sim_clock", _sim_clock),
        ("GET", "/sim/v1/splits", "sim_splits", _sim_splits),
    ]
]


def route(method: str, path: str) -> tuple[str, Handler | None, tuple[str, ...]]:
    """Route name, handler and decoded path parameters (handler None: no such route)."""
    known_path = False
    for m, pattern, name, handler in ROUTES:
        match = pattern.match(path)
        if match:
            known_path = True
            if m == method:
                return name, handler, tuple(unquote(g) for g in match.groups())
    return ("method_not_allowed" if known_path else "unknown"), None, ()
