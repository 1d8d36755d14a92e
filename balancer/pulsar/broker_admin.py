"""Broker-level admin calls (issue 35): a broker's load report and owned bundles (sent to
that broker), the load manager's leader, dynamic configuration, and the placement rules a
mover must check itself (isolation policies, failure domains, anti-affinity groups).

A broker is named by its id `host:port`, as `list_brokers` gives it; calls about one broker
go to that broker's URL (Pulsar's brokers answer these only for themselves): the URL the
operator configured, or where Pulsar's own redirect for the id leads, its registered
webServiceUrl(Tls) (`balancer.pulsar.broker_addresses`), never `<admin scheme>://<id>`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Protocol

import httpx

from balancer.core.broker_load import BrokerLoadReport
from balancer.core.moves.model import IsolationPolicy
from balancer.pulsar.admin_base import enc, ns_path, valid_name
from balancer.pulsar.broker_addresses import (
    BrokerAddress,
    BrokerAddressBook,
    BrokerUnreachableError,
    ReachedBy,
    Unreachable,
)
from balancer.pulsar.broker_models import (
    LeaderBroker,
    OwnedBundle,
    parse_failure_domains,
    parse_isolation_policies,
    parse_leader,
    parse_load_metrics,
    parse_load_report,
    parse_owned_bundles,
    parse_string_map,
)
from balancer.pulsar.cluster_reads import ClusterReads
from balancer.pulsar.errors import (
    ClientError,
    ForbiddenError,
    InvalidResponseError,
    NotFoundError,
    PulsarAdminError,
    RedirectLoopError,
    RedirectRefusedError,
    ServerError,
    TooManyRedirectsError,
    UnauthorizedError,
    UnavailableError,
)
from balancer.pulsar.routing import ClusterEndpoint, origin_of
from balancer.pulsar.settings import ClientSettings
from balancer.pulsar.transport import Call

LOOKUPS = 3  # asks of a broker's URL answered by the admin URL itself (a load balancer)


class LoadReportUnavailableError(PulsarAdminError):
    """The broker answers no load report: the extensible load manager (its
    `generateLoadReport` throws, so the route is a 500), a Pulsar without the route, or an
    empty or unreadable body. Fall back to the load derived from the broker's bundles.
    `status` is the HTTP status (None for an empty 2xx body)."""


class LoadParser(Protocol):
    """`parse_load_report` or `parse_load_metrics`."""

    def __call__(
        self, body: object, *, cluster: str, broker: str, read_at_ms: int
    ) -> BrokerLoadReport: ...


def _unavailable(exc: PulsarAdminError, what: str, cluster: str) -> LoadReportUnavailableError:
    """A load read's error answer as LoadReportUnavailableError (bundle-derived load)."""
    return LoadReportUnavailableError(
        f"{what} ({exc.status})",
        status=exc.status,
        reason=exc.reason,
        method=exc.method,
        url=exc.url,
        cluster=cluster,
    )


def _broker_id(broker: str) -> str:
    """`host:port` (a leading http(s):// is dropped, as Pulsar does for destinationBroker)."""
    if not isinstance(broker, str):
        raise ValueError(f"broker id must be a string, got {broker!r}")
    bare = broker.removeprefix("http://").removeprefix("https://").rstrip("/")
    host, sep, port = bare.rpartition(":")
    if not sep or not host or not port.isdigit() or "/" in bare or "@" in bare:
        raise ValueError(f"broker id must be host:port, got {broker!r}")
    return bare


def _on(base_url: str, url: str) -> bool:
    """Whether `url` (as an error names it) is on the origin of `base_url`."""
    try:
        return bool(url) and origin_of(httpx.URL(url)) == origin_of(httpx.URL(base_url))
    except httpx.InvalidURL:
        return False


def _unreachable(cluster: str, broker: str, exc: PulsarAdminError) -> BrokerUnreachableError:
    """Why looking a broker's URL up failed, naming the broker and the URL tried."""
    if isinstance(exc, NotFoundError):
        why, what = Unreachable.NOT_A_BROKER, "is not an active broker:"
    elif isinstance(exc, UnavailableError):
        why, what = Unreachable.NO_ANSWER, "gives no answer at"
    elif isinstance(exc, RedirectRefusedError | RedirectLoopError | TooManyRedirectsError):
        why, what = Unreachable.REFUSED, "cannot be followed to"
    else:
        why, what = Unreachable.ERROR, "is refused at"
    answer = f"HTTP {exc.status} {exc.reason}".rstrip() if exc.status is not None else str(exc)
    return BrokerUnreachableError(
        f"broker {broker} of {cluster} {what} {exc.url or 'its URL'} ({answer})",
        broker=broker,
        why=why,
        cause=exc,
    )


class BrokerAdmin(ClusterReads):
    """The broker calls of the admin client (`PulsarPeerGroup` extends this)."""

    def __init__(
        self,
        clusters: Mapping[str, ClusterEndpoint] | Iterable[ClusterEndpoint],
        settings: ClientSettings | None = None,
    ) -> None:
        super().__init__(clusters, settings)
        self.broker_addresses = BrokerAddressBook()

    def configure_broker_url(self, cluster: str, url: str) -> str:
        """Reach a broker at the URL the operator configured; its id (the URL's host:port)."""
        if cluster not in self.clusters:
            raise ValueError(f"cluster {cluster!r} is not in the peer group")
        ClusterEndpoint(cluster, url)  # the same checks as an admin URL
        broker = _broker_id(httpx.URL(url).netloc.decode("ascii"))
        self.broker_addresses.configure(cluster, broker, url)
        return broker

    def broker_url(self, cluster: str, broker: str) -> str:
        """The URL broker `broker` (`host:port`) of `cluster` is reached at: configured, or
        where Pulsar sends a request for it (`balancer.pulsar.broker_addresses`).
        BrokerUnreachableError when none is found."""
        if cluster not in self.clusters:
            raise ValueError(f"cluster {cluster!r} is not in the peer group")
        bid = _broker_id(broker)
        known = self.broker_addresses.get(cluster, bid)
        return known.url if known is not None else self.find_broker(cluster, bid).url

    def find_broker(self, cluster: str, broker: str) -> BrokerAddress:
        """Look the broker's URL up now: `GET .../brokers/{cluster}/{id}/ownedNamespaces`
        asked of the cluster's admin URL, following Pulsar's 307 to the broker.

        An answer without a redirect came from the broker itself behind the admin URL: its
        URL when that is the broker's own host (or the cluster's only broker). Behind a load
        balancer the next ask usually lands on another broker, which redirects: asked up to
        LOOKUPS times before the broker is reported `behind_admin_url`."""
        valid_name(cluster, "cluster name")
        bid = _broker_id(broker)
        endpoint = self.clusters[cluster]
        call = Call(
            "GET",
            f"/admin/v2/brokers/{enc(cluster)}/{enc(bid)}/ownedNamespaces",
            "/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces",
            cluster=cluster,
        )
        admin_origin = origin_of(httpx.URL(endpoint.admin_url))
        try:
            for _ in range(LOOKUPS):
                origin = self._answered_at(call, endpoint.admin_url, cluster, bid)
                if origin != admin_origin:
                    address = BrokerAddress(cluster, bid, origin, ReachedBy.REGISTERED)
                    break
                if self._names_broker(cluster, endpoint.admin_url, bid):
                    address = BrokerAddress(cluster, bid, origin, ReachedBy.ADMIN_URL)
                    break
            else:
                raise BrokerUnreachableError(
                    f"broker {bid} of {cluster}: answered through the admin URL "
                    f"{endpoint.admin_url}, which fronts several brokers, {LOOKUPS} times "
                    "without a redirect naming its own URL; configure clusters[].brokers",
                    broker=bid,
                    why=Unreachable.BEHIND_ADMIN_URL,
                    cause=None,
                )
        except BrokerUnreachableError as exc:
            exc.cluster = cluster
            self.broker_addresses.failed(cluster, exc)
            raise
        self.broker_addresses.found(address)
        return address

    def forget_broker_url(self, cluster: str, broker: str) -> None:
        """Look the broker's URL up again at its next call (its URL stopped answering)."""
        self.broker_addresses.forget(cluster, _broker_id(broker))

    def _answered_at(self, call: Call, admin_url: str, cluster: str, broker: str) -> str:
        """The origin (scheme://host:port) whose 2xx ended the look-up."""
        try:
            response = self._t.send(call)
        except (UnauthorizedError, ForbiddenError):
            raise  # the token: the cluster's problem, not this broker's
        except UnavailableError as exc:
            if _on(admin_url, exc.url):
                raise  # the admin URL itself does not answer: the cluster is down
            raise _unreachable(cluster, broker, exc) from exc
        except PulsarAdminError as exc:
            raise _unreachable(cluster, broker, exc) from exc
        return origin_of(httpx.URL(str(response.request.url)))

    def _names_broker(self, cluster: str, admin_url: str, broker: str) -> bool:
        """Whether the admin URL that answered as `broker` is that broker's own: the same
        host, or the cluster's only broker."""
        if httpx.URL(admin_url).host == broker.rpartition(":")[0]:
            return True
        return tuple(self.list_brokers(cluster)) == (broker,)

    def load_report(self, cluster: str, broker: str) -> BrokerLoadReport:
        """`GET /admin/v2/broker-stats/load-report` of one broker (LocalBrokerData, the
        modular load manager recomputes it on each call).

        A broker that answers it with a 5xx (the extensible load manager: its
        `generateLoadReport` throws) is asked `load_metrics` instead: the same usages as
        its load manager publishes them. Raises LoadReportUnavailableError when the broker
        gives neither (an older or other Pulsar: 404/405; an empty or unreadable body), so
        the caller falls back to bundle-derived load; 401/403 and no answer at all are
        raised as they are. Not re-sent on a 5xx (the extensible load manager's 500 is
        permanent).
        """
        valid_name(cluster, "cluster name")
        call = Call(
            "GET",
            "/admin/v2/broker-stats/load-report",
            "/admin/v2/broker-stats/load-report",
            cluster=cluster,
            url_override=self.broker_url(cluster, broker),
            idempotent=False,
        )
        try:
            response = self._t.send(call)
        except (UnauthorizedError, ForbiddenError):
            raise
        except ServerError as exc:
            try:
                return self.load_metrics(cluster, broker)
            except LoadReportUnavailableError as missing:
                raise LoadReportUnavailableError(
                    f"broker {broker} of {cluster} gives no load report ({exc.status}) and "
                    f"no load metrics ({missing.reason or missing})",
                    status=exc.status,
                    reason=exc.reason,
                    method=exc.method,
                    url=exc.url,
                    cluster=cluster,
                ) from missing
        except ClientError as exc:
            what = f"broker {broker} of {cluster} gives no load report"
            raise _unavailable(exc, what, cluster) from exc
        if not response.content.strip():
            raise LoadReportUnavailableError(
                f"broker {broker} of {cluster} answered an empty load report", cluster=cluster
            )
        return self._decode_load(call, response, cluster, broker, parse_load_report)

    def load_metrics(self, cluster: str, broker: str) -> BrokerLoadReport:
        """`GET /admin/v2/broker-stats/metrics` of one broker: its resource usages as its
        load manager publishes them (`brk_lb_*_usage`, BrokerLoadData.toMetrics under the
        extensible load manager). LoadReportUnavailableError when it publishes none or
        answers with an error; 401/403 and no answer at all are raised as they are."""
        valid_name(cluster, "cluster name")
        path = "/admin/v2/broker-stats/metrics"
        call = Call(
            "GET",
            path,
            path,
            cluster=cluster,
            url_override=self.broker_url(cluster, broker),
            idempotent=False,
        )
        try:
            response = self._t.send(call)
        except (UnauthorizedError, ForbiddenError):
            raise
        except (ClientError, ServerError) as exc:
            what = f"broker {broker} of {cluster} gives no metrics"
            raise _unavailable(exc, what, cluster) from exc
        return self._decode_load(call, response, cluster, broker, parse_load_metrics)

    def _decode_load(
        self,
        call: Call,
        response: httpx.Response,
        cluster: str,
        broker: str,
        parse: LoadParser,
    ) -> BrokerLoadReport:
        """A load answer parsed, timed by its read (never by its `lastUpdate`: issue 41);
        an unreadable one is LoadReportUnavailableError (bundle-derived load instead)."""
        read_at_ms = int(time.time() * 1000)
        try:
            return self._decode(
                call,
                response,
                lambda body: parse(
                    body, cluster=cluster, broker=_broker_id(broker), read_at_ms=read_at_ms
                ),
            )
        except InvalidResponseError as exc:
            raise LoadReportUnavailableError(
                str(exc), status=exc.status, reason=str(exc), url=exc.url, cluster=cluster
            ) from exc

    def owned_bundles(self, cluster: str, broker: str) -> Mapping[str, OwnedBundle]:
        """`GET /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces`, asked of that broker:
        `tenant/ns/0x..._0x...` -> OwnedBundle (its heartbeat namespace included)."""
        valid_name(cluster, "cluster name")
        bid = _broker_id(broker)
        call = Call(
            "GET",
            f"/admin/v2/brokers/{enc(cluster)}/{enc(bid)}/ownedNamespaces",
            "/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces",
            cluster=cluster,
            url_override=self.broker_url(cluster, bid),
        )
        return self._parse(call, parse_owned_bundles)

    def leader_broker(self, cluster: str) -> LeaderBroker:
        """`GET /admin/v2/brokers/leaderBroker` asked of `cluster`."""
        valid_name(cluster, "cluster name")
        call = Call(
            "GET",
            "/admin/v2/brokers/leaderBroker",
            "/admin/v2/brokers/leaderBroker",
            cluster=cluster,
        )
        return self._parse(call, parse_leader)

    def runtime_configuration(self, cluster: str) -> Mapping[str, str]:
        """`GET /admin/v2/brokers/configuration/runtime`: every setting, dynamic overrides
        applied (e.g. `loadBalancerSheddingEnabled`)."""
        valid_name(cluster, "cluster name")
        path = "/admin/v2/brokers/configuration/runtime"
        call = Call("GET", path, path, cluster=cluster)
        return self._parse(call, lambda body: parse_string_map(body, "runtime configuration"))

    def dynamic_configuration(self, cluster: str) -> Mapping[str, str]:
        """`GET /admin/v2/brokers/configuration/values`: the dynamic settings overridden in
        the configuration store (empty when none)."""
        valid_name(cluster, "cluster name")
        path = "/admin/v2/brokers/configuration/values"
        call = Call("GET", path, path, cluster=cluster)
        return self._parse(call, lambda body: parse_string_map(body, "dynamic configuration"))

    def set_dynamic_configuration(self, cluster: str, name: str, value: str) -> None:
        """`POST /admin/v2/brokers/configuration/{name}/{value}` (every broker of the
        cluster picks it up). PreconditionFailedError (412) for a setting that is not
        dynamic or a value it refuses."""
        valid_name(cluster, "cluster name")
        valid_name(name, "configuration name")
        if not isinstance(value, str) or not value or "/" in value:
            raise ValueError(f"configuration value must be a non-empty string without /: {value!r}")
        self._t.send(
            Call(
                "POST",
                f"/admin/v2/brokers/configuration/{enc(name)}/{enc(value)}",
                "/admin/v2/brokers/configuration/{name}/{value}",
                cluster=cluster,
            )
        )

    def delete_dynamic_configuration(self, cluster: str, name: str) -> None:
        """`DELETE /admin/v2/brokers/configuration/{name}` (`BrokersBase.
        deleteDynamicConfiguration`): the override leaves the configuration store and every
        broker goes back to its broker.conf value; 204. PreconditionFailedError (412) for a
        setting that is not dynamic."""
        valid_name(cluster, "cluster name")
        valid_name(name, "configuration name")
        self._t.send(
            Call(
                "DELETE",
                f"/admin/v2/brokers/configuration/{enc(name)}",
                "/admin/v2/brokers/configuration/{name}",
                cluster=cluster,
            )
        )

    def isolation_policies(self, cluster: str) -> tuple[IsolationPolicy, ...]:
        """`GET /admin/v2/clusters/{cluster}/namespaceIsolationPolicies`; () when none were
        ever set (Pulsar's 404 "NamespaceIsolationPolicies for cluster ... does not exist")."""
        valid_name(cluster, "cluster name")
        call = Call(
            "GET",
            f"/admin/v2/clusters/{enc(cluster)}/namespaceIsolationPolicies",
            "/admin/v2/clusters/{cluster}/namespaceIsolationPolicies",
            cluster=self._asked_about(cluster, None),
        )
        try:
            return self._parse(call, parse_isolation_policies)
        except NotFoundError as exc:
            if "NamespaceIsolationPolicies" in exc.reason:
                return ()
            raise

    def failure_domains(self, cluster: str) -> Mapping[str, tuple[str, ...]]:
        """`GET /admin/v2/clusters/{cluster}/failureDomains`: domain -> broker ids."""
        valid_name(cluster, "cluster name")
        call = Call(
            "GET",
            f"/admin/v2/clusters/{enc(cluster)}/failureDomains",
            "/admin/v2/clusters/{cluster}/failureDomains",
            cluster=self._asked_about(cluster, None),
        )
        response = self._t.send(call)
        if not response.content.strip():
            return {}
        return self._decode(call, response, parse_failure_domains)

    def anti_affinity_group(self, namespace: str, *, cluster: str | None = None) -> str | None:
        """`GET /admin/v2/namespaces/{t}/{ns}/antiAffinity`: the group from the local
        policies of the cluster asked (`cluster`, else the namespace's routing); None when
        it has none (Pulsar answers 204 with no body)."""
        path, template = ns_path(namespace, "/antiAffinity")
        call = Call("GET", path, template + "/antiAffinity", namespace=namespace, home=cluster)
        response = self._t.send(call)
        if response.status_code == 204:
            return None
        text = response.text.strip()
        if len(text) >= 2 and text[0] == text[-1] == '"':  # a proxy may quote the string
            text = text[1:-1]
        return text or None
