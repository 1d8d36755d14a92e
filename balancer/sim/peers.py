"""What a cluster of the peer group answers for a namespace it does not hold (PIP-8).

Pulsar redirects only the routes that call `PulsarWebResource.validateGlobalNamespaceOwnershipAsync`
(-> `checkLocalOrGetPeerReplicationCluster`): in `NamespacesBase`, bundle split
(`internalSplitNamespaceBundleAsync`) and unload (`internalUnloadNamespaceBundleAsync`, when
the bundle is not owned locally); in `PersistentTopicsBase`, a topic's stats and internalStats
(`internalGetStatsAsync`, `internalGetInternalStatsAsync`), compaction and terminate; in
`NonPersistentTopics`, the topic list. Those answer 307 to the peer holding the namespace
(`SimModel.locate`). Every other route is answered by the cluster asked, from its own
metadata:

- GET bundles and policies (`Namespaces.getBundlesData`, `getPolicies`) read the namespace's
  policies from the configuration store, which every cluster of the group shares, with the
  bundles of the cluster's own local policies when it has them
  (`AdminResource.getNamespacePoliciesAsync`). A cluster that never held the namespace has
  none: its first read copies the bundles the namespace was created with into its local
  policies (`NamespaceBundleFactory.copyToLocalPolicies`), and it answers that copy from
  then on, stale after any split of the home (`local_bundles`).
- The tenant's namespace list and a namespace's replication clusters come from the shared
  configuration store: every cluster answers the same (`SimModel.namespaces_of`,
  `replication_clusters`).
- topicHashPositions (`NamespacesBase.internalGetTopicHashPositionsAsync`) needs a broker of
  the cluster asked to own the bundle (`validateNamespaceBundleOwnershipAsync`, read-only):
  none does here, 412 "Failed to find ownership for ServiceUnit".
- The persistent topic list (`PersistentTopics.getList`) lists the managed ledgers of the
  cluster's own metadata store: none here.
- The offload trigger and status (`PersistentTopics`) check topic ownership only: the topic
  does not exist here, 404.
"""

from __future__ import annotations

from balancer.core.bundles import BundleRange, InvalidBundle, NamespaceBundles
from balancer.sim.model import SimModel
from balancer.sim.splitting import validate_bundle
from balancer.sim.state import NamespaceState, SimError


def local_namespace(m: SimModel, cluster: str, namespace: str) -> NamespaceState | None:
    """The namespace when `cluster` holds it, None when another cluster does (no redirect:
    the caller answers from `cluster`'s own metadata); 404 when no cluster knows it."""
    with m.lock:
        ns = m.namespaces.get(namespace)
    if ns is None:
        raise SimError(404, "Namespace does not exist")
    return ns if ns.cluster == cluster else None


def config_store_layout(m: SimModel, namespace: str) -> NamespaceBundles:
    """The bundles the namespace was created with (its configuration-store policies)."""
    for spec in m.scenario.namespaces:
        if spec.name == namespace:
            return NamespaceBundles.initial(namespace, spec.bundles)
    raise SimError(404, "Namespace does not exist")


def local_bundles(m: SimModel, cluster: str, namespace: str) -> NamespaceBundles:
    """GET bundles asked of a cluster that is not the namespace's home: the copy of the
    configuration store's bundles its first read wrote into its local policies, frozen after
    (`NamespaceBundleFactory.copyToLocalPolicies`: local policies, once there, are read as
    they are; the home's splits update the home's local policies only)."""
    with m.lock:
        key = (cluster, namespace)
        copy = m.local_bundle_copies.get(key)
        if copy is None:
            copy = m.local_bundle_copies[key] = config_store_layout(m, namespace)
        return copy


def replication_clusters(m: SimModel, namespace: str) -> list[str]:
    """`GET /admin/v2/namespaces/{t}/{ns}/replication` (`Namespaces.getNamespaceReplicationClusters`
    -> `NamespacesBase.internalGetNamespaceReplicationClustersAsync`): the policies'
    `replication_clusters` from the configuration store, the same from every cluster, with no
    redirect. A namespace created on one cluster replicates to that cluster alone: its home."""
    with m.lock:
        ns = m.namespaces.get(namespace)
        if ns is None:
            raise SimError(404, "Namespace does not exist")
        return [ns.cluster]


def stale_bundle(m: SimModel, namespace: str, text: str) -> BundleRange:
    """A bundle of the created layout, as a cluster without local policies resolves it."""
    try:
        bundle = BundleRange.parse(text)
    except InvalidBundle as exc:
        raise SimError(412, str(exc)) from None
    validate_bundle(config_store_layout(m, namespace), bundle)  # 412: validateBundle
    return bundle
