"""The simulated admin API's broker routes (issue 35): load report, owned bundles, leader,
unload with a destination, dynamic configuration, placement rules, and the move log.

The state and Pulsar's rules live in `balancer.sim.brokers`; `balancer.sim.routes` puts these
routes first in its table (`/brokers/leaderBroker` would otherwise match `/brokers/{cluster}`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from balancer.sim.brokers import MoveRecord
from balancer.sim.http_types import _SEG, Handler, RawJson, Request, Response
from balancer.sim.state import NamespaceState, PeerRedirect, SimError

if TYPE_CHECKING:
    from balancer.sim.model import SimModel


def _settled(m: SimModel) -> None:
    m.brokers.settle()


def _load_report(m: SimModel, r: Request) -> Response:
    # BrokerStatsBase.getLoadReport: this broker's LocalBrokerData, recomputed on each call.
    with m.lock:
        _settled(m)
        return Response(200, m.brokers.load_report(r.cluster, r.broker))


def _broker_metrics(m: SimModel, r: Request) -> Response:
    # BrokerStatsBase.getMetrics: this broker's List<Metrics> ({metrics, dimensions} each).
    with m.lock:
        _settled(m)
        return Response(200, m.brokers.broker_metrics(r.cluster, r.broker))


def _leader_broker(m: SimModel, r: Request) -> Response:
    with m.lock:
        return Response(200, m.brokers.leader(r.cluster))


def _check_cluster(m: SimModel, r: Request, cluster: str) -> None:
    """PulsarWebResource.validateClusterOwnership: another cluster of the group is asked of
    that cluster (307 to its service URL)."""
    m.cluster(cluster)  # 404 when unknown
    if cluster != r.cluster:
        raise PeerRedirect(cluster)


def _owned_namespaces(m: SimModel, r: Request) -> Response:
    cluster, broker_id = r.params
    _check_cluster(m, r, cluster)
    with m.lock:
        _settled(m)
        redirect = _redirect_to_broker(m, r, cluster, broker_id)
        if redirect is not None:
            return redirect
        return Response(200, m.brokers.owned_namespaces(cluster, r.broker))


def _redirect_to_broker(m: SimModel, r: Request, cluster: str, broker_id: str) -> Response | None:
    """PulsarWebResource.maybeRedirectToBroker (PR #21894, Pulsar 3.2+): None when this
    broker is `broker_id` (a leading http(s):// is dropped); else 307 to that broker's
    REGISTERED URL, same path and query: its webServiceUrlTls when the request came over
    https (or it has no plain URL), else its webServiceUrl; 404 when no broker has that id.
    Older releases' validateBrokerName sent `<request scheme>://<id>` instead (PR #1346)."""
    c = m.cluster(cluster)
    cleaned = broker_id.removeprefix("http://").removeprefix("https://")
    if cleaned == c.broker_address(r.broker):
        return None
    query = f"?{urlencode(r.query, doseq=True)}" if r.query else ""
    if m.brokers.specs[cluster].legacy_broker_redirect:
        # validateBrokerName: the request's scheme, the id's host and port, broker or not.
        scheme = "https" if r.tls else "http"
        return Response(307, None, headers={"Location": f"{scheme}://{cleaned}{r.path}{query}"})
    target = c.broker_index(cleaned)
    if target is None:
        raise SimError(404, f"Broker id '{broker_id}' not found in available brokers.")
    tls_url = c.web_service_url_tls(target)
    origin = tls_url if r.tls and tls_url is not None else c.broker_urls[target]
    return Response(307, None, headers={"Location": f"{origin}{r.path}{query}"})


def unload_to(
    m: SimModel,
    r: Request,
    destination: str,
    *,
    locate: Callable[[SimModel, Request], NamespaceState],
) -> Response:
    """`PUT .../{bundle}/unload?destinationBroker=` in NamespacesBase
    .internalUnloadNamespaceBundleAsync's order: 409 inactive destination, then (modular)
    307 to the leader and the leader keeping the destination under the bare range, then
    the namespace (404 / peer 307), the bundle (412), the owner lookup; a bundle no broker
    owns is answered 204 with no lookup."""
    with m.lock:
        index = m.brokers.check_destination(r.cluster, destination, r.broker, r.params[2])
    ns = locate(m, r)
    with m.lock:
        bundle = m.resolve_bundle(ns, r.params[2])
        if bundle not in ns.unowned:
            m.check_owner(ns, bundle, r.broker, authoritative=r.flag("authoritative"))
        m.brokers.unload_to(ns, bundle, index)
    return Response(204)


def _runtime_config(m: SimModel, r: Request) -> Response:
    with m.lock:
        return Response(200, m.brokers.runtime_configuration(r.cluster))


def _config_values(m: SimModel, r: Request) -> Response:
    # BrokersBase.getAllDynamicConfigurations: what the configuration store holds.
    with m.lock:
        return Response(200, dict(m.brokers.dynamic[r.cluster]))


def _set_config(m: SimModel, r: Request) -> Response:
    name, value = r.params
    with m.lock:
        m.brokers.set_dynamic(r.cluster, name, value)
    # BrokersBase.updateDynamicConfiguration resumes with Response.ok().build(): 200, no body.
    return Response(200)


def _delete_config(m: SimModel, r: Request) -> Response:
    (name,) = r.params
    with m.lock:
        m.brokers.delete_dynamic(r.cluster, name)
    # BrokersBase.deleteDynamicConfiguration returns void: 204.
    return Response(204)


def _isolation_policies(m: SimModel, r: Request) -> Response:
    with m.lock:
        return Response(200, m.brokers.isolation_policies(r.params[0]))


def _failure_domains(m: SimModel, r: Request) -> Response:
    with m.lock:
        return Response(200, m.brokers.failure_domains(r.params[0]))


def _anti_affinity(m: SimModel, r: Request) -> Response:
    # NamespacesBase.internalGetNamespaceAntiAffinityGroup: the group from the asked
    # cluster's LOCAL policies; null (no group, or a cluster that is not the namespace's
    # home) is JAX-RS's 204; a group is the bare string (Jersey writes a String as is).
    name = f"{r.params[0]}/{r.params[1]}"
    ns = m.namespaces.get(name)
    if ns is None:
        raise SimError(404, "Namespace does not exist")
    spec = next(s for s in m.scenario.namespaces if s.name == name)
    if ns.cluster != r.cluster or spec.anti_affinity_group is None:
        return Response(204)
    return Response(200, RawJson(spec.anti_affinity_group.encode()))


def _sim_moves(m: SimModel, r: Request) -> Response:
    with m.lock:
        _settled(m)
        return Response(200, [move_json(m, x) for x in m.brokers.moves])


def _sim_config_changes(m: SimModel, r: Request) -> Response:
    with m.lock:
        return Response(200, [c.__dict__ for c in m.brokers.config_changes])


def move_json(m: SimModel, move: MoveRecord) -> dict[str, object]:
    c = m.cluster(move.cluster)

    def bid(b: int | None) -> str | None:
        return None if b is None else c.broker_address(b)

    return {
        "time_ms": move.time_ms,
        "cluster": move.cluster,
        "namespace": move.namespace,
        "bundle": str(move.bundle),
        "source": bid(move.source),
        "destination": bid(move.destination),
        "landed": bid(move.landed),
        "landed_ms": move.landed_ms,
        "outcome": move.outcome,
        "load_manager": move.load_manager,
    }


_NS = rf"/admin/v2/namespaces/{_SEG}/{_SEG}"
ROUTES: list[tuple[str, str, str, Handler]] = [
    ("GET", "/admin/v2/broker-stats/load-report", "load_report", _load_report),
    ("GET", "/admin/v2/broker-stats/metrics", "broker_metrics", _broker_metrics),
    ("GET", "/admin/v2/brokers/leaderBroker", "leader_broker", _leader_broker),
    ("GET", "/admin/v2/brokers/configuration/runtime", "runtime_config", _runtime_config),
    ("GET", "/admin/v2/brokers/configuration/values", "config_values", _config_values),
    ("POST", rf"/admin/v2/brokers/configuration/{_SEG}/{_SEG}", "set_config", _set_config),
    ("DELETE", rf"/admin/v2/brokers/configuration/{_SEG}", "delete_config", _delete_config),
    (
        "GET",
        rf"/admin/v2/brokers/{_SEG}/{_SEG}/ownedNamespaces",
        "owned_namespaces",
        _owned_namespaces,
    ),
    (
        "GET",
        rf"/admin/v2/clusters/{_SEG}/namespaceIsolationPolicies",
        "isolation_policies",
        _isolation_policies,
    ),
    ("GET", rf"/admin/v2/clusters/{_SEG}/failureDomains", "failure_domains", _failure_domains),
    ("GET", f"{_NS}/antiAffinity", "anti_affinity", _anti_affinity),
    ("GET", "/sim/v1/moves", "sim_moves", _sim_moves),
    ("GET", "/sim/v1/config-changes", "sim_config_changes", _sim_config_changes),
]
