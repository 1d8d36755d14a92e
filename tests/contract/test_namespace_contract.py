"""Pulsar's namespace and bundle admin contract (pulsar-contract.md, "Admin REST API"):
bundles, split, unload, topicHashPositions, lookup, topics of a bundle.

Raw httpx pins the wire (path, body, status, answer); the project's client
(`PulsarPeerGroup`) pins what the product relies on.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from itertools import pairwise

import httpx
import pytest

from balancer.core.bundles import BundleRange
from balancer.core.hashing import hash_position
from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.errors import NotFoundError, PreconditionFailedError
from tests.contract.targets import BUNDLES, ContractTarget, Namespace

pytestmark = pytest.mark.pulsar_contract

HEX = re.compile(r"^0x[0-9a-f]{8}$")
INITIAL = ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"]
FIRST = "0x00000000_0x40000000"
# Strictly inside FIRST: specified_positions_divide keeps only lower < p < upper.
POSITIONS = [0x10000000, 0x20000000]
LAYOUT_SETTLE_S = 5.0  # through a load balancer the layout may lag a split's 204 a moment


@pytest.fixture
def client(target: ContractTarget) -> Iterator[PulsarPeerGroup]:
    with target.client() as admin:
        yield admin


def bundles(target: ContractTarget, ns: str) -> dict[str, object]:
    r = target.request("GET", f"/admin/v2/namespaces/{ns}/bundles")
    assert r.status_code == 200, r.text
    body = r.json()
    assert isinstance(body, dict)
    return body


def layout_after_split(target: ContractTarget, ns: str, wanted: list[str]) -> list[str]:
    """The layout, re-read for a moment until it holds `wanted` (then or on time-out)."""
    deadline = time.monotonic() + LAYOUT_SETTLE_S
    while True:
        boundaries = bundles(target, ns)["boundaries"]
        assert isinstance(boundaries, list)
        if set(wanted) <= set(boundaries) or time.monotonic() > deadline:
            return boundaries
        time.sleep(0.5)


def user_topics(names: object) -> list[str]:
    """Without Pulsar's system topics (`__change_events`: made by topic policies on a real
    cluster), which no test created."""
    assert isinstance(names, list | dict), names
    return sorted(n for n in names if not n.rsplit("/", 1)[-1].startswith("__"))


def split(
    target: ContractTarget, ns: str, bundle: str, algorithm: str, body: list[int]
) -> httpx.Response:
    return target.request(
        "PUT",
        f"/admin/v2/namespaces/{ns}/{bundle}/split",
        params={"unload": "false", "splitAlgorithmName": algorithm},
        json=body,
    )


def test_bundles_answer_is_boundaries_and_count(
    target: ContractTarget, shared_ns: Namespace, client: PulsarPeerGroup
) -> None:
    body = bundles(target, shared_ns.name)
    assert set(body) == {"boundaries", "numBundles"}
    assert body["numBundles"] == BUNDLES
    assert body["boundaries"] == INITIAL
    assert [str(b) for b in client.get_bundles(shared_ns.name).bundles] == [
        f"{lo}_{hi}" for lo, hi in pairwise(INITIAL)
    ]


def test_split_body_is_a_json_array_of_boundaries(
    target: ContractTarget, fresh_ns: Namespace
) -> None:
    assert len(fresh_ns.topics_in(0, 0x40000000)) >= 2  # else the split is a no-op
    r = split(target, fresh_ns.name, FIRST, "specified_positions_divide", POSITIONS)
    assert r.status_code == 204, r.text
    wanted = ["0x10000000", "0x20000000"]
    boundaries = layout_after_split(target, fresh_ns.name, wanted)
    assert boundaries == ["0x00000000", *wanted, *INITIAL[1:]]
    assert all(HEX.match(b) for b in boundaries)
    assert bundles(target, fresh_ns.name)["numBundles"] == BUNDLES + 2


def test_client_split_with_specified_positions(
    target: ContractTarget, fresh_ns: Namespace, client: PulsarPeerGroup
) -> None:
    client.split_bundle(
        fresh_ns.name, FIRST, algorithm="specified_positions_divide", boundaries=POSITIONS
    )
    layout_after_split(target, fresh_ns.name, ["0x10000000", "0x20000000"])
    after = client.get_bundles(fresh_ns.name)
    assert BundleRange(0x10000000, 0x20000000) in after.bundles
    assert after.num_bundles == BUNDLES + 2


@pytest.fixture(scope="module")
def stale(target: ContractTarget) -> tuple[Namespace, str]:
    """A namespace whose first bundle has been split: FIRST is stale (no longer in it)."""
    ns = target.namespace()
    r = split(target, ns.name, FIRST, "range_equally_divide", [])
    assert r.status_code == 204, r.text
    layout_after_split(target, ns.name, ["0x20000000"])
    return ns, FIRST


@pytest.mark.parametrize(
    ("method", "suffix"),
    [
        ("PUT", "split?unload=false&splitAlgorithmName=range_equally_divide"),
        ("PUT", "unload"),
        ("GET", "topicHashPositions"),
    ],
    ids=["split", "unload", "topicHashPositions"],
)
def test_a_stale_bundle_is_412_not_404(
    target: ContractTarget, stale: tuple[Namespace, str], method: str, suffix: str
) -> None:
    # NamespaceBundles.validateBundle: "Cannot find bundle in the bundles list" -> 412.
    ns, bundle = stale
    body: list[int] | None = [] if suffix.startswith("split") else None
    r = target.request(method, f"/admin/v2/namespaces/{ns.name}/{bundle}/{suffix}", json=body)
    assert r.status_code == 412, (r.status_code, r.text)
    assert isinstance(r.json().get("reason"), str)


def test_client_sees_a_stale_split_as_precondition_failed(
    stale: tuple[Namespace, str], client: PulsarPeerGroup
) -> None:
    ns, bundle = stale
    with pytest.raises(PreconditionFailedError):
        client.split_bundle(ns.name, bundle, algorithm="range_equally_divide")


@pytest.mark.parametrize(
    ("method", "suffix"),
    [
        ("PUT", f"{FIRST}/split?unload=false&splitAlgorithmName=range_equally_divide"),
        ("PUT", f"{FIRST}/unload"),
        ("GET", f"{FIRST}/topicHashPositions"),
        ("GET", "bundles"),
    ],
    ids=["split", "unload", "topicHashPositions", "bundles"],
)
def test_a_missing_namespace_is_404(target: ContractTarget, method: str, suffix: str) -> None:
    body: list[int] | None = [] if "/split" in suffix else None
    ns = f"{target.tenant}/no-such-namespace"
    r = target.request(method, f"/admin/v2/namespaces/{ns}/{suffix}", json=body)
    assert r.status_code == 404, (r.status_code, r.text)


def test_client_sees_a_missing_namespace_as_not_found(
    target: ContractTarget, client: PulsarPeerGroup
) -> None:
    with pytest.raises(NotFoundError):
        client.split_bundle(
            f"{target.tenant}/no-such-namespace", FIRST, algorithm="range_equally_divide"
        )


def test_topic_hash_positions_answer(
    target: ContractTarget, shared_ns: Namespace, client: PulsarPeerGroup
) -> None:
    path = f"/admin/v2/namespaces/{shared_ns.name}/{FIRST}/topicHashPositions"
    every = target.request("GET", path)
    assert every.status_code == 200, every.text
    body = every.json()
    assert set(body) == {"namespace", "bundle", "topicHashPositions"}
    assert body["namespace"] == shared_ns.name and body["bundle"] == FIRST
    in_bundle = shared_ns.topics_in(0, 0x40000000)
    positions = body["topicHashPositions"]
    assert user_topics(positions) == in_bundle
    assert all(positions[t] == hash_position(t) for t in in_bundle)
    one = in_bundle[0]
    asked = target.request("GET", path, params={"topics": [one]}).json()
    assert asked["topicHashPositions"] == {one: hash_position(one)}
    parsed = client.topic_hash_positions(shared_ns.name, FIRST, [one])
    assert dict(parsed.positions) == {one: hash_position(one)}


def test_lookup_bundle_is_plain_text(
    target: ContractTarget, shared_ns: Namespace, client: PulsarPeerGroup
) -> None:
    topic = shared_ns.topics[0]
    local = topic.removeprefix("persistent://")
    r = target.request("GET", f"/lookup/v2/topic/persistent/{local}/bundle")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    bundle = BundleRange.parse(r.text.strip())
    assert bundle.lower <= hash_position(topic) < bundle.upper
    assert client.lookup_bundle(topic) == bundle


def test_topics_of_a_bundle(
    target: ContractTarget, shared_ns: Namespace, client: PulsarPeerGroup
) -> None:
    path = f"/admin/v2/persistent/{shared_ns.name}"
    for lower, upper in pairwise(INITIAL):
        bundle = f"{lower}_{upper}"
        r = target.request("GET", path, params={"bundle": bundle})
        assert r.status_code == 200, r.text
        expected = shared_ns.topics_in(int(lower, 16), int(upper, 16))
        assert user_topics(r.json()) == expected
        assert user_topics(list(client.topics_of_bundle(shared_ns.name, bundle))) == expected


def test_topics_of_an_unknown_bundle_is_an_empty_list(
    target: ContractTarget, shared_ns: Namespace
) -> None:
    # PersistentTopics.getList filters by range equality: no match is [], not an error.
    path = f"/admin/v2/persistent/{shared_ns.name}"
    r = target.request("GET", path, params={"bundle": "0x00000000_0x20000000"})
    assert (r.status_code, r.json()) == (200, [])
