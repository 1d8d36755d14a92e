"""The run summary's census reads each namespace's bundles from its home cluster (issue 33).

Every cluster of a peer group lists every namespace (the shared configuration store), and a
cluster that is not a namespace's home answers GET bundles from a copy frozen at its first
read: asked there, a namespace split at its home shows its created layout forever."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from balancer.app.summary import census
from balancer.pulsar import ClusterEndpoint, PulsarPeerGroup
from balancer.sim import RunningPeerGroup
from tests.sim.two_homes import two_homes


@pytest.fixture
def group() -> Iterator[RunningPeerGroup]:
    with two_homes() as running:
        yield running


def peer_group(group: RunningPeerGroup, order: tuple[str, ...]) -> PulsarPeerGroup:
    return PulsarPeerGroup([ClusterEndpoint(c, group.admin_urls[c]) for c in order])


def test_census_counts_each_namespace_as_its_home_cluster_knows_it(
    group: RunningPeerGroup,
) -> None:
    with peer_group(group, ("east", "west")) as admin:
        assert census(admin) == {"acme/audit": 2, "acme/orders": 2}
        # west splits its namespace; east's copy of it stays as it was at east's first read.
        admin.split_bundle(
            "acme/audit", "0x00000000_0x80000000", algorithm="range_equally_divide",
            cluster="west",
        )  # fmt: skip
        assert census(admin) == {"acme/audit": 3, "acme/orders": 2}
    asked = group.model.request_counts
    assert asked[("east", "bundles")] == 2 and asked[("west", "bundles")] == 2


def test_census_leaves_out_a_namespace_whose_home_is_not_in_the_group(
    group: RunningPeerGroup,
) -> None:
    with peer_group(group, ("east",)) as admin:
        assert census(admin) == {"acme/orders": 2}
    assert group.model.request_counts[("east", "bundles")] == 1


def test_census_leaves_out_the_namespaces_of_a_home_that_does_not_answer(
    group: RunningPeerGroup,
) -> None:
    group.stop_cluster("west")  # west down: its namespaces have no answer to trust
    with peer_group(group, ("east", "west")) as admin:
        assert census(admin, deadline_s=3.0) == {"acme/orders": 2}
    assert group.model.request_counts[("east", "bundles")] == 1
