"""The admin client's models and routing on Pulsar's real peer-cluster answer shapes
(tests/fixtures/pulsar/cluster-data-*.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from balancer.pulsar.models import ClusterData
from balancer.pulsar.routing import ClusterEndpoint, Hop, PeerRouter

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pulsar"
SPLIT = "/admin/v2/namespaces/acme/orders/0x00000000_0x40000000/split?unload=false"


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def test_cluster_data_with_multi_host_service_urls() -> None:
    data = ClusterData.from_json("west", fixture("cluster-data-multi-host.json"))
    assert data.service_url.count(",") == 2 and data.service_url.startswith("http://")
    assert data.service_url_tls.startswith("https://broker-1.west.example:8443,")
    assert data.peer_cluster_names == ("east",)


def test_every_host_of_the_fixture_is_west_and_a_307_to_any_reaches_west() -> None:
    data = ClusterData.from_json("west", fixture("cluster-data-multi-host.json"))
    router = PeerRouter(
        {
            "east": ClusterEndpoint("east", "https://pulsar-east.example:8443"),
            "west": ClusterEndpoint("west", "https://pulsar-west.example:8443"),
        }
    )
    assert router.add_aliases("west", [data.service_url, data.service_url_tls])
    assert len(router.aliases()) == 6 and set(router.aliases().values()) == {"west"}
    current = Hop("east", f"https://pulsar-east.example:8443{SPLIT}")
    for host in ("broker-1.west.example:8443", "broker-3.west.example:8443"):
        target = router.resolve_redirect(current, f"https://{host}{SPLIT}")
        assert (target.cluster, target.url) == ("west", f"https://pulsar-west.example:8443{SPLIT}")
    # No serviceUrlTls used: the request's https scheme on a host:port of serviceUrl.
    target = router.resolve_redirect(current, f"https://broker-2.west.example:8080{SPLIT}")
    assert target.cluster == "west" and target.listed
