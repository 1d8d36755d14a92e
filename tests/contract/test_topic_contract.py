"""Pulsar's topic admin contract (pulsar-contract.md, "Admin REST API", "Offload"): a
topic's /stats and /internalStats, trigger offload and its status, broker-stats/topics."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.models import MessageId
from tests.contract.targets import ContractTarget, Namespace

pytestmark = pytest.mark.pulsar_contract

BUNDLE = re.compile(r"^0x[0-9a-f]{8}_0x[0-9a-f]{8}$")
STATS_KEYS = {
    "msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut", "averageMsgSize",
    "storageSize", "backlogSize", "offloadedStorageSize", "publishers", "subscriptions",
}  # fmt: skip
# PersistentTopic.updateRates: what broker-stats/topics writes per topic (no offloaded size).
BROKER_TOPIC_KEYS = {
    "publishers", "producerCount", "replication", "subscriptions", "averageMsgSize",
    "msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut", "storageSize",
    "backlogSize",
}  # fmt: skip
SUBSCRIPTION_KEYS = {"consumers", "msgBacklog", "msgRateOut", "msgThroughputOut"}
OFFLOAD_STATES = {"NOT_RUN", "RUNNING", "SUCCESS", "ERROR"}
NUMBER = (int, float)


@pytest.fixture
def client(target: ContractTarget) -> Iterator[PulsarPeerGroup]:
    with target.client() as admin:
        yield admin


def topic_path(topic: str, suffix: str) -> str:
    return f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/{suffix}"


def get_json(target: ContractTarget, path: str) -> Any:
    r = target.request("GET", path)
    assert r.status_code == 200, (path, r.status_code, r.text)
    return r.json()


def test_topic_stats_keys(
    target: ContractTarget, shared_ns: Namespace, client: PulsarPeerGroup
) -> None:
    topic = shared_ns.topics[0]
    stats = get_json(target, topic_path(topic, "stats"))
    assert set(stats) >= STATS_KEYS, STATS_KEYS - set(stats)
    for key in STATS_KEYS - {"publishers", "subscriptions"}:
        assert isinstance(stats[key], NUMBER) and not isinstance(stats[key], bool), key
    assert isinstance(stats["publishers"], list)
    assert isinstance(stats["subscriptions"], dict)
    for sub in stats["subscriptions"].values():
        assert isinstance(sub["consumers"], list)
    parsed = client.topic_stats(topic)
    assert parsed.storage_size == stats["storageSize"]
    assert parsed.offloaded_storage_size == stats["offloadedStorageSize"]


def test_internal_stats_ledgers(
    target: ContractTarget, shared_ns: Namespace, client: PulsarPeerGroup
) -> None:
    topic = shared_ns.topics[0]
    internal = get_json(target, topic_path(topic, "internalStats"))
    assert isinstance(internal["currentLedgerSize"], int)
    ledgers = internal["ledgers"]
    assert isinstance(ledgers, list) and ledgers  # the last one is the current ledger
    for ledger in ledgers:
        assert {"ledgerId", "entries", "size", "offloaded"} <= set(ledger), ledger
        assert isinstance(ledger["offloaded"], bool)
        assert all(isinstance(ledger[k], int) for k in ("ledgerId", "entries", "size"))
    ids = [lg["ledgerId"] for lg in ledgers]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)  # oldest first
    parsed = client.internal_stats(topic)
    assert [lg.ledger_id for lg in parsed.ledgers] == ids
    assert parsed.current_ledger_size == internal["currentLedgerSize"]


def offload_status(target: ContractTarget, topic: str) -> dict[str, Any]:
    status = get_json(target, topic_path(topic, "offload"))
    assert {"status", "lastError"} <= set(status), status
    assert status["status"] in OFFLOAD_STATES
    assert isinstance(status["lastError"], str)
    return dict(status)


def test_trigger_offload_is_204_and_its_status_ends_in_success_or_error(
    target: ContractTarget, fresh_ns: Namespace, client: PulsarPeerGroup
) -> None:
    topic = fresh_ns.topics[0]
    # In broker memory only: NOT_RUN until the loaded topic's first offload.
    assert offload_status(target, topic)["status"] == "NOT_RUN"
    assert client.offload_status(topic).state.value == "NOT_RUN"
    current = get_json(target, topic_path(topic, "internalStats"))["ledgers"][-1]["ledgerId"]
    body = {"ledgerId": current, "entryId": 0, "partitionIndex": -1}
    r = target.request("PUT", topic_path(topic, "offload"), json=body)
    assert r.status_code == 204, r.text  # started, not done (PersistentTopic.triggerOffload)
    assert offload_status(target, topic)["status"] != "NOT_RUN"

    def ended() -> dict[str, Any] | None:
        status = offload_status(target, topic)
        return status if status["status"] in ("SUCCESS", "ERROR") else None

    status = target.wait_for(ended, what="offload to end")
    assert status is not None, "offload still RUNNING"
    if status["status"] == "ERROR":  # e.g. no offloader configured: the reason is given
        assert status["lastError"]
    parsed = client.offload_status(topic)
    assert parsed.state.value == status["status"]
    assert parsed.last_error == status["lastError"]


def test_client_triggers_offload_with_a_message_id(
    target: ContractTarget, fresh_ns: Namespace, client: PulsarPeerGroup
) -> None:
    topic = fresh_ns.topics[1]
    current = client.internal_stats(topic).ledgers[-1].ledger_id
    client.trigger_offload(topic, MessageId(current, 0))
    assert offload_status(target, topic)["status"] in {"RUNNING", "SUCCESS", "ERROR"}


def is_heartbeat(namespace: str) -> bool:
    """V1 `pulsar/<cluster>/<host:port>` and V2 `pulsar/<host:port>` (NamespaceService)."""
    parts = namespace.split("/")
    return len(parts) == 3 or (parts[0] == "pulsar" and ":" in parts[-1])


def test_broker_stats_topics_shape(
    target: ContractTarget, shared_ns: Namespace, client: PulsarPeerGroup
) -> None:
    def answers() -> list[dict[str, Any]] | None:
        docs = []
        for url in target.broker_urls:
            r = target.http.get(f"{url}/admin/v2/broker-stats/topics")
            if r.status_code in (401, 403):
                pytest.fail(f"broker-stats/topics: HTTP {r.status_code}: needs a superuser token")
            assert r.status_code == 200, r.text
            docs.append(r.json() if r.content.strip() else {})
        return docs if any(shared_ns.name in d for d in docs) else None

    docs = target.wait_for(answers, what="a stats update listing the contract namespace")
    assert docs is not None, (
        f"{shared_ns.name} never showed in broker-stats/topics of {target.broker_urls}: the "
        "stats update did not run, or another broker owns its bundles"
    )
    seen = 0
    for doc in docs:
        for namespace, bundles in doc.items():
            if is_heartbeat(namespace):
                continue
            for bundle, domains in bundles.items():
                assert BUNDLE.match(bundle), bundle
                assert "persistent" in domains
                for topic, stats in domains["persistent"].items():
                    assert topic.startswith(f"persistent://{namespace}/")
                    assert set(stats) >= BROKER_TOPIC_KEYS, BROKER_TOPIC_KEYS - set(stats)
                    assert "offloadedStorageSize" not in stats  # only /stats has it
                    assert isinstance(stats["publishers"], list)
                    for sub in stats["subscriptions"].values():
                        assert set(sub) >= SUBSCRIPTION_KEYS, SUBSCRIPTION_KEYS - set(sub)
                    seen += 1
    assert seen
    parsed = client.broker_topic_stats(target.cluster, target.broker_urls[0])
    assert parsed.rejected == ()
