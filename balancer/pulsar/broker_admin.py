"""Broker-level admin calls (issue 35): a broker's load report and owned bundles (sent to
that broker), the load manager's leader, dynamic configuration, and the placement rules a
mover must check itself (isolation policies, failure domains, anti-affinity groups).

A broker is named by its id `host:port`, as `list_brokers` gives it; calls about one broker
go to `<scheme of the cluster's admin URL>://<id>`, as Pulsar's brokers answer these only
for themselves (ownedNamespaces asked of another broker is a 307 to it:
`PulsarWebResource.validateBrokerName`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import httpx

from balancer.core.broker_load import BrokerLoadReport
from balancer.core.moves.model import IsolationPolicy
from balancer.pulsar.admin_base import enc, ns_path, valid_name
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
    ServerError,
    UnauthorizedError,
)
from balancer.pulsar.transport import Call


class LoadReportUnavailableError(PulsarAdminError):
    """The broker answers no load report: the extensible load manager (its
    `generateLoadReport` throws, so the route is a 500), a Pulsar without the route, or an
    empty or unreadable body. Fall back to the load derived from the broker's bundles.
    `status` is the HTTP status (None for an empty 2xx body)."""


def _broker_id(broker: str) -> str:
    """`host:port` (a leading http(s):// is dropped, as Pulsar does for destinationBroker)."""
    if not isinstance(broker, str):
        raise ValueError(f"broker id must be a string, got {broker!r}")
    bare = broker.removeprefix("http://").removeprefix("https://").rstrip("/")
    host, sep, port = bare.rpartition(":")
    if not sep or not host or not port.isdigit() or "/" in bare or "@" in bare:
        raise ValueError(f"broker id must be host:port, got {broker!r}")
    return bare


class BrokerAdmin(ClusterReads):
    """The broker calls of the admin client (`PulsarPeerGroup` extends this)."""

    def broker_url(self, cluster: str, broker: str) -> str:
        """The web URL of broker `broker` (`host:port`) of `cluster`."""
        endpoint = self.clusters.get(cluster)
        if endpoint is None:
            raise ValueError(f"cluster {cluster!r} is not in the peer group")
        scheme = httpx.URL(endpoint.admin_url).scheme
        return f"{scheme}://{_broker_id(broker)}"

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
            raise LoadReportUnavailableError(
                f"broker {broker} of {cluster} gives no load report ({exc.status})",
                status=exc.status,
                reason=exc.reason,
                method=exc.method,
                url=exc.url,
                cluster=cluster,
            ) from exc
        if not response.content.strip():
            raise LoadReportUnavailableError(
                f"broker {broker} of {cluster} answered an empty load report", cluster=cluster
            )
        read_at_ms = int(time.time() * 1000)
        try:
            return self._decode(
                call,
                response,
                lambda body: parse_load_report(
                    body, cluster=cluster, broker=_broker_id(broker), read_at_ms=read_at_ms
                ),
            )
        except InvalidResponseError as exc:
            raise LoadReportUnavailableError(
                str(exc), status=exc.status, url=exc.url, cluster=cluster
            ) from exc

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
            raise LoadReportUnavailableError(
                f"broker {broker} of {cluster} gives no metrics ({exc.status})",
                status=exc.status,
                reason=exc.reason,
                method=exc.method,
                url=exc.url,
                cluster=cluster,
            ) from exc
        read_at_ms = int(time.time() * 1000)
        try:
            return self._decode(
                call,
                response,
                lambda body: parse_load_metrics(
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
