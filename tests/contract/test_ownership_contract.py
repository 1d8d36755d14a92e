"""Pulsar's owner lookup inside one cluster (pulsar-contract.md, "Peer clusters": "Inside one
cluster, the owner lookup may forward broker X -> leader -> X with `authoritative=true`").

A bundle is released (a real cluster: unloaded, so no broker owns it until the next lookup;
the simulator: `release_bundle`). A split of it then goes through the owner lookup, and the
project's client must follow every hop (a return to the same broker with another query is
not a loop); a read-only call (topicHashPositions) never assigns a bundle: 412.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from balancer.core.bundles import BundleRange
from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.errors import PreconditionFailedError
from tests.contract.targets import BUNDLES, ContractTarget, Namespace

pytestmark = pytest.mark.pulsar_contract

FIRST = BundleRange(0x00000000, 0x40000000)
POSITIONS = [0x10000000, 0x20000000]


@pytest.fixture
def client(target: ContractTarget) -> Iterator[PulsarPeerGroup]:
    with target.client() as admin:
        yield admin


def release(target: ContractTarget, ns: Namespace, bundle: BundleRange) -> None:
    """Leave `bundle` owned by no broker (Pulsar's unload: the next lookup assigns it)."""
    if target.sim is not None:
        target.sim.release_bundle(ns.name, bundle)
        return
    r = target.request("PUT", f"/admin/v2/namespaces/{ns.name}/{bundle}/unload")
    assert r.status_code == 204, r.text


def test_a_split_of_an_unowned_bundle_follows_the_owner_lookup(
    target: ContractTarget, fresh_ns: Namespace, client: PulsarPeerGroup
) -> None:
    release(target, fresh_ns, FIRST)
    client.split_bundle(
        fresh_ns.name, FIRST, algorithm="specified_positions_divide", boundaries=POSITIONS
    )
    after = target.wait_for(
        lambda: (layout := client.get_bundles(fresh_ns.name)).num_bundles == BUNDLES + 2 and layout,
        what="the split in the layout",
        sim_advance_s=0,
    )
    assert after, "the split of an unowned bundle is not in the layout"
    assert BundleRange(0x10000000, 0x20000000) in after.bundles
    if target.sim is not None:  # the admin URL's broker 0 is not the leader: it forwarded
        assert target.sim.model.broker_requests(target.cluster, "split")[1] >= 1


def test_topic_hash_positions_of_an_unowned_bundle_is_412(
    target: ContractTarget, fresh_ns: Namespace, client: PulsarPeerGroup
) -> None:
    """`validateNamespaceBundleOwnershipAsync` with readOnly: an unowned bundle is not
    assigned by a read, "Failed to find ownership for ServiceUnit" (the modular load
    manager's unload leaves the bundle unowned until the next lookup)."""
    release(target, fresh_ns, FIRST)
    with pytest.raises(PreconditionFailedError) as raised:
        client.topic_hash_positions(fresh_ns.name, FIRST)
    assert "ownership" in raised.value.reason.lower()
