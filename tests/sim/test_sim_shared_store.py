"""What the simulated peer group answers from Pulsar's shared configuration store (issue 33):
every cluster lists every namespace of a tenant, any cluster answers a namespace's
replication clusters, and a cluster that is not a namespace's home answers GET bundles
from a copy of the created layout taken at its first read, frozen after."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from balancer.sim import RunningPeerGroup
from tests.sim.two_homes import two_homes


@pytest.fixture
def group() -> Iterator[RunningPeerGroup]:
    with two_homes() as running:
        yield running


def get(group: RunningPeerGroup, cluster: str, path: str) -> httpx.Response:
    return httpx.get(f"{group.admin_urls[cluster]}{path}", timeout=5.0)


def test_every_cluster_lists_every_namespace_of_the_tenant(group: RunningPeerGroup) -> None:
    for cluster in ("east", "west"):
        listed = get(group, cluster, "/admin/v2/namespaces/acme").json()
        assert listed == ["acme/audit", "acme/orders"], cluster
    assert get(group, "east", "/admin/v2/namespaces/nobody").status_code == 404


def test_replication_clusters_name_the_home_from_any_cluster(group: RunningPeerGroup) -> None:
    for cluster in ("east", "west"):
        path = "/admin/v2/namespaces/acme/audit/replication"
        answer = get(group, cluster, path)
        assert answer.status_code == 200 and answer.json() == ["west"], cluster
    assert get(group, "east", "/admin/v2/namespaces/acme/none/replication").status_code == 404


def test_a_non_home_cluster_answers_a_copy_frozen_at_its_first_read(
    group: RunningPeerGroup,
) -> None:
    path = "/admin/v2/namespaces/acme/audit/bundles"
    created = ["0x00000000", "0x80000000", "0xffffffff"]
    assert get(group, "east", path).json()["boundaries"] == created
    # The read wrote east's local policies (NamespaceBundleFactory.copyToLocalPolicies).
    assert ("east", "acme/audit") in group.model.local_bundle_copies
    split = httpx.put(
        f"{group.admin_urls['west']}/admin/v2/namespaces/acme/audit/0x00000000_0x80000000/split",
        json=[],
        timeout=5.0,
    )
    assert split.status_code == 204
    assert len(get(group, "west", path).json()["boundaries"]) == 4  # the home split it
    assert get(group, "east", path).json()["boundaries"] == created  # frozen
