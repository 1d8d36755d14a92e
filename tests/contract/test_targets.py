"""The real-cluster target prepares and cleans up only what it made: its own tenant, its
namespaces (4 bundles, >= 2 topics in each) and their topics. Checked against a fake
admin API that records every request (no Pulsar needed)."""

from __future__ import annotations

import json
from collections import Counter

import httpx
import pytest

from balancer.core.bundles import NamespaceBundles
from balancer.core.hashing import hash_position
from tests.contract.targets import BUNDLES, TOPICS_PER_BUNDLE, _on_cluster


class FakePulsar:
    """Tenants, namespaces and topics in memory, answering as Pulsar's admin API does."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        self.tenants: dict[str, object] = {"public": {}}
        self.namespaces: dict[str, int] = {"public/default": 4}
        self.topics: set[str] = {"persistent://public/default/keep"}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        method, path = request.method, request.url.path
        self.requests.append((method, path))
        parts = path.removeprefix("/admin/v2/").split("/")
        if (method, path) == ("GET", "/admin/v2/clusters"):
            return httpx.Response(200, json=["standalone"])
        if parts[0] == "tenants" and method == "PUT":
            self.tenants[parts[1]] = json.loads(request.content)
            return httpx.Response(204)
        if parts[0] == "tenants" and method == "DELETE":
            assert not any(n.startswith(f"{parts[1]}/") for n in self.namespaces)
            del self.tenants[parts[1]]
            return httpx.Response(204)
        if parts[0] == "namespaces" and len(parts) == 2:  # GET namespaces/{tenant}
            return httpx.Response(200, json=[n for n in self.namespaces if n.startswith(parts[1])])
        ns = "/".join(parts[1:3])
        if parts[0] == "namespaces" and method == "PUT":
            self.namespaces[ns] = json.loads(request.content)["bundles"]["numBundles"]
            return httpx.Response(204)
        if parts[0] == "namespaces" and method == "DELETE":
            assert not any(t.startswith(f"persistent://{ns}/") for t in self.topics)
            del self.namespaces[ns]
            return httpx.Response(204)
        if parts[0] == "persistent" and len(parts) == 3:  # the topic list
            return httpx.Response(
                200, json=sorted(t for t in self.topics if t.startswith(f"persistent://{ns}/"))
            )
        topic = f"persistent://{ns}/{parts[3]}"
        if parts[0] == "persistent" and method == "PUT":
            self.topics.add(topic)
            return httpx.Response(204)
        if parts[0] == "persistent" and method == "DELETE":
            assert request.url.params.get("force") == "true"
            self.topics.remove(topic)
            return httpx.Response(204)
        return httpx.Response(404, json={"reason": "no such route in the fake"})


def test_real_target_creates_its_own_tenant_and_deletes_only_what_it_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PULSAR_CLUSTER", raising=False)
    monkeypatch.delenv("PULSAR_ADMIN_TOKEN_FILE", raising=False)
    monkeypatch.delenv("PULSAR_ADMIN_CA_FILE", raising=False)
    fake = FakePulsar()
    run = _on_cluster("http://pulsar.test:8080", transport=httpx.MockTransport(fake))
    target = next(run)
    assert target.cluster == "standalone"
    assert target.tenant.startswith("pulsar-balancer-contract-")
    assert fake.tenants[target.tenant] == {"adminRoles": [], "allowedClusters": ["standalone"]}
    made = [target.namespace(), target.namespace()]
    for ns in made:
        assert fake.namespaces[ns.name] == BUNDLES
        layout = NamespaceBundles.initial(ns.name, BUNDLES)
        per_bundle = Counter(str(layout.find(hash_position(t))) for t in ns.topics)
        assert sorted(per_bundle.values()) == [TOPICS_PER_BUNDLE] * BUNDLES
        assert set(ns.topics) <= fake.topics
    with pytest.raises(StopIteration):
        next(run)  # the end of the session: clean up
    assert fake.tenants == {"public": {}}
    assert fake.namespaces == {"public/default": 4}
    assert fake.topics == {"persistent://public/default/keep"}
    touched = {p for m, p in fake.requests if m in ("PUT", "DELETE")}
    assert all(f"/{target.tenant}" in p for p in touched), touched
