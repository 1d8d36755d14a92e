"""A broker leaving the cluster (scaled down, or restarted under a new address): what Pulsar
shows of it afterwards.

- It is no longer listed by `GET /admin/v2/brokers/{cluster}`: Pulsar lists the brokers
  registered under `/loadbalance/brokers` (`LoadManager.getAvailableBrokersAsync`), and the
  registration is an ephemeral node that goes with the broker's metadata session.
- Its web port stops answering (connection refused: `RunningPeerGroup.stop_broker` closes
  its server).
- The bundles it owned are owned by nobody (`OwnershipCache` entries are ephemeral too)
  until a lookup places them on an active broker.
- An unload to it answers 409, as to any inactive destination
  (`NamespacesBase.setNamespaceBundleAffinityAsync`).
- A destination kept for a bundle's next lookup (`bundleBrokerAffinityMap`, in the leader's
  memory) may still name it; the client redirected there finds no broker and looks the
  bundle up again, and the load manager then places it among the active brokers: the
  simulator places such a bundle on an active broker at once (`ownership.active`).

The leader cannot be stopped here (leader election is not modelled).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from balancer.sim.model import SimModel


def stop_broker(model: SimModel, cluster: str, broker: int) -> None:
    """The model's side of a broker leaving: unlisted, its bundles unowned."""
    with model.lock:
        c = model.cluster(cluster)
        if not 0 <= broker < c.broker_count:
            raise ValueError(f"cluster {cluster} has no broker {broker}")
        if broker == c.leader:
            raise ValueError("the load manager's leader cannot be stopped in the simulator")
        model.settle()  # what ran until now ran with the broker there
        c.stopped.add(broker)
        for ns in model.namespaces.values():
            if ns.cluster != cluster:
                continue
            for bundle in ns.layout.bundles:
                if ns.owners[bundle] == broker:
                    ns.unowned.add(bundle)
        model.layout_version += 1
