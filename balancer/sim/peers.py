"""What a cluster of the peer group answers for a namespace it does not hold (PIP-8).

Pulsar redirects only the routes that call `PulsarWebResource.validateGlobalNamespaceOwnershipAsync`
(-> `checkLocalOrGetPeerReplicationCluster`): in `NamespacesBase`, bundle split
(`internalSplitNamespaceBundleAsync`) and unload (`internalUnloadNamespaceBundleAsync`, when
the bundle is not owned locally); in `PersistentTopicsBase`, compaction and terminate; in
`NonPersistentTopics`, the topic list. Those answer 307 to the peer holding the namespace
(`SimModel.locate`). Every other route is answered by the cluster asked, from its own
metadata:

- GET bundles and policies (`Namespaces.getBundlesData`, `getPolicies`) read the namespace's
  policies from the configuration store, which every cluster of the group shares, with the
  bundles of the cluster's own local policies when it has them
  (`AdminResource.getNamespacePoliciesAsync`). A cluster that never held the namespace has
  none, so it answers the bundles the namespace was created with: stale after any split.
- topicHashPositions (`NamespacesBase.internalGetTopicHashPositionsAsync`) lists the topics
  the cluster owns in the bundle: none here.
- The persistent topic list (`PersistentTopics.getList`) lists the managed ledgers of the
  cluster's own metadata store: none here.
- Topic routes (stats, internalStats, offload trigger and status; `PersistentTopics`) check
  topic ownership only: the topic does not exist here, 404.
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


def stale_bundle(m: SimModel, namespace: str, text: str) -> BundleRange:
    """A bundle of the created layout, as a cluster without local policies resolves it."""
    try:
        bundle = BundleRange.parse(text)
    except InvalidBundle as exc:
        raise SimError(412, str(exc)) from None
    validate_bundle(config_store_layout(m, namespace), bundle)  # 412: validateBundle
    return bundle
