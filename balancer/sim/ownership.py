"""Which broker of a simulated cluster answers a bundle or topic request: Pulsar's owner
lookup (`PulsarWebResource.validateBundleOwnership` / `validateNamespaceBundleOwnershipAsync`
over `NamespaceService.findBrokerServiceUrl`), as redirects the HTTP server turns into 307s.

A bundle is owned by one broker (`NamespaceState.owners`) or by none (`NamespaceState.unowned`,
after `SimModel.release_bundle`). For an unowned bundle:

- a read-only route (topicHashPositions) answers 412 "Failed to find ownership for
  ServiceUnit": `findBrokerServiceUrl` with `readOnly` never assigns a bundle;
- a broker that is not the load manager's leader forwards to the leader with
  authoritative=false (`searchForCandidateBroker`: only the leader, or an authoritative
  request, picks a broker);
- the leader picks a broker (`lookup_candidate`) and redirects there with authoritative=true,
  or takes the bundle itself when it picks itself;
- a request that comes with authoritative=true takes the bundle where it lands (Pulsar picks
  a candidate again there; the simulator keeps the broker the leader chose).

So a request sent to broker X that is not the leader goes X -> leader -> X?authoritative=true.
Every `OwnerRedirect` carries authoritative = "the redirecting broker is the leader", as
`validateBundleOwnership` replaces the query parameter with `isLeaderBroker()`.
"""

from __future__ import annotations

import zlib

from balancer.core.bundles import BundleRange
from balancer.sim.state import ClusterState, NamespaceState, OwnerRedirect, SimError


def initial_owner(namespace: str, bundle: BundleRange, brokers: int) -> int:
    """Where the simulator places a bundle: CRC32 of `ns/bundle` mod brokers."""
    return zlib.crc32(f"{namespace}/{bundle}".encode()) % brokers


def lookup_candidate(ns: NamespaceState, cluster: ClusterState, bundle: BundleRange) -> int:
    """The broker the leader gives an unowned bundle: a destination kept by an unload with
    destinationBroker for the bundle's RANGE, used up whichever namespace's unload left it
    (ModularLoadManagerImpl's bundleBrokerAffinityMap is keyed by the bare range and read
    before any isolation or anti-affinity filter), else the placement hash (Pulsar's load
    manager picks the least loaded broker)."""
    kept = cluster.affinity.pop(str(bundle), None)
    if kept is not None:
        return kept
    return initial_owner(ns.name, bundle, cluster.broker_count)


def check_owner(
    ns: NamespaceState,
    cluster: ClusterState,
    bundle: BundleRange,
    broker: int,
    *,
    redirect_to_owner: bool,
    authoritative: bool = False,
    read_only: bool = False,
) -> bool:
    """Raise `OwnerRedirect` or `SimError(412)` when `broker` may not answer for `bundle`;
    True when `broker` has just taken the unowned bundle. With `redirect_to_owner` off, an
    owned bundle is answered by any broker (the simulator's default)."""
    if bundle in ns.unowned:
        if read_only:
            raise SimError(412, f"Failed to find ownership for ServiceUnit:{ns.name}/{bundle}")
        if not authoritative and broker != cluster.leader:
            raise OwnerRedirect(ns.cluster, cluster.leader, authoritative=False)
        candidate = (
            broker
            if authoritative
            else active(cluster, ns, bundle, lookup_candidate(ns, cluster, bundle))
        )
        if candidate != broker:
            raise OwnerRedirect(ns.cluster, candidate, authoritative=True)
        ns.unowned.discard(bundle)  # OwnershipCache.tryAcquiringOwnership
        ns.owners[bundle] = broker
        return True
    if not redirect_to_owner:
        return False
    owner = ns.owners.get(bundle)
    if owner is not None and owner != broker:
        raise OwnerRedirect(ns.cluster, owner, authoritative=broker == cluster.leader)
    return False


def active(cluster: ClusterState, ns: NamespaceState, bundle: BundleRange, candidate: int) -> int:
    """`candidate` when it is an active broker, else the placement hash's pick among the
    active ones: a lookup never lands on a broker that left (`balancer.sim.broker_stops`)."""
    if candidate not in cluster.stopped:
        return candidate
    actives = [b for b in range(cluster.broker_count) if b not in cluster.stopped]
    return actives[initial_owner(ns.name, bundle, len(actives))]
