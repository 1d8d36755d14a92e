"""Reads of the configuration store and of a cluster's own lists: clusters and their data,
peers, tenants, brokers, a tenant's namespaces and a namespace's replication clusters.

Configuration-store data is the same from every cluster of the group: asked of no cluster
in particular, a cluster that does not answer is replaced by the next one.
"""

from __future__ import annotations

from collections.abc import Iterable

from balancer.pulsar.admin_base import AdminBase, enc, ns_path, valid_name
from balancer.pulsar.models import ClusterData, parse_string_list
from balancer.pulsar.transport import Call


class ClusterReads(AdminBase):
    """Cluster, tenant and namespace-list calls of the admin client."""

    def get_replication_clusters(
        self, namespace: str, *, via: str | None = None
    ) -> tuple[str, ...]:
        """`GET /admin/v2/namespaces/{t}/{ns}/replication`: the namespace's clusters, from the
        shared configuration store (any cluster answers the same, no redirect)."""
        path, template = ns_path(namespace, "/replication")
        call = Call(
            "GET",
            path,
            template + "/replication",
            cluster=self._cluster_or_entry(via),
            any_cluster=via is None,
        )
        return self._parse(call, lambda body: parse_string_list(body, "replication clusters"))

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
        valid_name(name, "cluster name")
        call = Call(
            "GET",
            f"/admin/v2/clusters/{enc(name)}",
            "/admin/v2/clusters/{cluster}",
            cluster=self._asked_about(name, via),
            any_cluster=via is None,
        )
        return self._parse(call, lambda body: ClusterData.from_json(name, body))

    def get_peer_clusters(self, cluster: str, *, via: str | None = None) -> tuple[str, ...]:
        """`GET /admin/v2/clusters/{cluster}/peers` (PIP-8); () when none were ever set (a
        null entity: `ClustersBase.getPeerClusterNames` answers 204 with no body)."""
        valid_name(cluster, "cluster name")
        call = Call(
            "GET",
            f"/admin/v2/clusters/{enc(cluster)}/peers",
            "/admin/v2/clusters/{cluster}/peers",
            cluster=self._asked_about(cluster, via),
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
        valid_name(cluster, "cluster name")
        if isinstance(peers, str):
            raise ValueError("peers must be an iterable of cluster names, not one string")
        body = [valid_name(p, "peer cluster name") for p in peers]
        self._t.send(
            Call(
                "POST",
                f"/admin/v2/clusters/{enc(cluster)}/peers",
                "/admin/v2/clusters/{cluster}/peers",
                json_body=body,
                cluster=self._asked_about(cluster, via),
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
        valid_name(cluster, "cluster name")
        call = Call(
            "GET",
            f"/admin/v2/brokers/{enc(cluster)}",
            "/admin/v2/brokers/{cluster}",
            cluster=self._asked_about(cluster, via),
        )
        return self._parse(call, lambda body: parse_string_list(body, "brokers"))

    def list_namespaces(self, tenant: str, *, via: str | None = None) -> tuple[str, ...]:
        """`GET /admin/v2/namespaces/{tenant}`: `tenant/ns` names known to cluster `via`."""
        valid_name(tenant, "tenant")
        call = Call(
            "GET",
            f"/admin/v2/namespaces/{enc(tenant)}",
            "/admin/v2/namespaces/{tenant}",
            cluster=self._cluster_or_entry(via),
        )
        return self._parse(call, lambda body: parse_string_list(body, "namespaces"))

    def _asked_about(self, cluster: str, via: str | None) -> str:
        """Where a call about `cluster` goes: `via`, else that cluster itself when it is in
        the group (it surely knows itself), else the entry cluster."""
        if via is not None:
            return via
        return self._cluster_or_entry(cluster if cluster in self.clusters else None)
