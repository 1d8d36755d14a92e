"""Offload over real HTTP, as Pulsar does it: PUT a message id, NOT_RUN -> RUNNING ->
SUCCESS after a simulated delay, 409 while running, ledgers below the id offloaded (never
the current one), offloadedStorageSize up while storageSize keeps counting the offloaded
ledgers (ManagedLedgerImpl.getTotalSize: only retention removes them)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from balancer.core.offload import offload_point_from_stats
from balancer.sim import RunningPeerGroup, parse_scenario, start_peer_group

LEDGER_BYTES = 10_000_000
TOPIC = "archive"
SCENARIO: dict[str, Any] = {
    "name": "offload",
    "seed": 3,
    "broker": {"ledger_max_size_bytes": LEDGER_BYTES, "offload_duration_s": 30},
    "clusters": [{"name": "c1"}],
    "namespaces": [
        {
            "name": "public/archive",
            "cluster": "c1",
            "topic_groups": [
                {
                    "name": TOPIC,
                    "total_msg_rate_in": 1000,
                    "avg_msg_size_bytes": 1000,  # 1 MB/s
                    "initial_storage_bytes": 95_500_000,  # 9 full ledgers + 5.5 MB
                }
            ],
        }
    ],
}


@pytest.fixture
def group() -> Iterator[RunningPeerGroup]:
    with start_peer_group(parse_scenario(SCENARIO)) as running:
        yield running


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5.0) as client:
        yield client


def topic_url(group: RunningPeerGroup, what: str) -> str:
    return f"{group.admin_urls['c1']}/admin/v2/persistent/public/archive/{TOPIC}/{what}"


def get(http: httpx.Client, group: RunningPeerGroup, what: str) -> Any:
    r = http.get(topic_url(group, what))
    assert r.status_code == 200, r.text
    return r.json()


def test_offload_flow(group: RunningPeerGroup, http: httpx.Client) -> None:
    assert get(http, group, "offload")["status"] == "NOT_RUN"
    internal = get(http, group, "internalStats")
    ids = [x["ledgerId"] for x in internal["ledgers"]]
    assert len(ids) == 10  # 9 closed + the current one
    before = get(http, group, "stats")
    body = {"ledgerId": ids[6], "entryId": 0, "partitionIndex": -1}
    assert http.put(topic_url(group, "offload"), json=body).status_code == 204
    assert get(http, group, "offload")["status"] == "RUNNING"
    again = http.put(topic_url(group, "offload"), json=body)
    assert again.status_code == 409
    assert again.json()["reason"] == "Offload already in progress"
    group.clock.advance(29)
    assert get(http, group, "offload")["status"] == "RUNNING"
    group.clock.advance(1)
    status = get(http, group, "offload")
    assert status["status"] == "SUCCESS" and status["lastError"] == ""
    assert status["firstUnoffloadedMessage"]["ledgerId"] == ids[6]
    offloaded = [x["offloaded"] for x in get(http, group, "internalStats")["ledgers"]]
    assert offloaded[:6] == [True] * 6 and not any(offloaded[6:])
    after = get(http, group, "stats")
    written = 30 * 1_000_000  # 30 simulated seconds at 1 MB/s
    assert after["offloadedStorageSize"] == 6 * LEDGER_BYTES
    assert after["storageSize"] == before["storageSize"] + written
    assert after["lastOffloadLedgerId"] == ids[5]


def test_never_offloads_the_current_ledger(group: RunningPeerGroup, http: httpx.Client) -> None:
    ledgers = get(http, group, "internalStats")["ledgers"]
    beyond = {"ledgerId": ledgers[-1]["ledgerId"] + 100, "entryId": 0, "partitionIndex": -1}
    assert http.put(topic_url(group, "offload"), json=beyond).status_code == 204
    group.clock.advance(30)
    after = get(http, group, "internalStats")["ledgers"]
    assert [x["offloaded"] for x in after] == [True] * 9 + [False] * (len(after) - 9)


def test_a_second_offload_after_success_extends_the_prefix(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    ids = [x["ledgerId"] for x in get(http, group, "internalStats")["ledgers"]]
    for upto in (ids[2], ids[1], ids[5]):  # the middle one offloads nothing new
        body = {"ledgerId": upto, "entryId": 0, "partitionIndex": -1}
        assert http.put(topic_url(group, "offload"), json=body).status_code == 204
        group.clock.advance(30)
        assert get(http, group, "offload")["status"] == "SUCCESS"
    assert get(http, group, "stats")["offloadedStorageSize"] == 5 * LEDGER_BYTES


@pytest.mark.parametrize(
    "body",
    [None, {}, {"ledgerId": 5}, {"ledgerId": "5", "entryId": 0}, [1, 2]],
    ids=["no-body", "empty", "no-entry-id", "string-ledger-id", "not-an-object"],
)
def test_offload_without_a_message_id_is_400(
    group: RunningPeerGroup, http: httpx.Client, body: Any
) -> None:
    r = http.put(topic_url(group, "offload"), json=body)
    assert r.status_code == 400 and r.json()["reason"]
    assert get(http, group, "offload")["status"] == "NOT_RUN"


def test_size_threshold_rule_keeps_the_newest_bytes(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    """The project's offload rule run on the simulator's internal stats leaves at most the
    threshold, and less than a ledger below it, in BookKeeper once the offload is done."""
    threshold = 35_000_000
    point = offload_point_from_stats(get(http, group, "internalStats"), threshold)
    assert point is not None
    assert http.put(topic_url(group, "offload"), json=point.to_json()).status_code == 204
    group.clock.advance(30)
    stats = get(http, group, "stats")
    in_bookkeeper = stats["storageSize"] - stats["offloadedStorageSize"]
    written = 30 * 1_000_000
    assert threshold - LEDGER_BYTES < in_bookkeeper - written <= threshold


def test_an_injected_offload_failure_ends_in_error_and_offloads_nothing(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    group.faults.configure(offload_failure_rate=1.0)
    ids = [x["ledgerId"] for x in get(http, group, "internalStats")["ledgers"]]
    body = {"ledgerId": ids[4], "entryId": 0, "partitionIndex": -1}
    assert http.put(topic_url(group, "offload"), json=body).status_code == 204
    group.clock.advance(30)
    status = get(http, group, "offload")
    assert status["status"] == "ERROR" and status["lastError"]
    assert get(http, group, "stats")["offloadedStorageSize"] == 0
    group.faults.clear()  # a retry after an error may run again
    assert http.put(topic_url(group, "offload"), json=body).status_code == 204
    group.clock.advance(30)
    assert get(http, group, "offload") == {
        "status": "SUCCESS",
        "lastError": "",
        "firstUnoffloadedMessage": {"ledgerId": ids[4], "entryId": 0, "partitionIndex": -1},
    }


def _no_offloader(where: str) -> dict[str, Any]:
    import copy

    doc = copy.deepcopy(SCENARIO)
    if where == "namespace":
        doc["namespaces"][0]["offloader"] = False
    else:
        doc["broker"]["offloader"] = False
    return doc


@pytest.mark.parametrize("where", ["namespace", "broker"])
def test_no_offloader_configured_ends_in_error(http: httpx.Client, where: str) -> None:
    """PersistentTopic.triggerOffload answers 204 and ManagedLedgerImpl.asyncOffloadPrefix
    fails at once with the NullLedgerOffloader: status ERROR, lastError "NullLedgerOffloader",
    nothing offloaded."""
    with start_peer_group(parse_scenario(_no_offloader(where))) as group:
        ids = [x["ledgerId"] for x in get(http, group, "internalStats")["ledgers"]]
        body = {"ledgerId": ids[6], "entryId": 0, "partitionIndex": -1}
        assert http.put(topic_url(group, "offload"), json=body).status_code == 204
        status = get(http, group, "offload")
        assert status["status"] == "ERROR" and status["lastError"] == "NullLedgerOffloader"
        assert not any(x["offloaded"] for x in get(http, group, "internalStats")["ledgers"])
        # Not running: a new trigger is accepted (and fails the same way), never 409.
        assert http.put(topic_url(group, "offload"), json=body).status_code == 204


def test_unloading_the_bundle_resets_the_status_to_not_run(
    group: RunningPeerGroup, http: httpx.Client
) -> None:
    """The status lives in the loaded PersistentTopic: an unload drops it (NOT_RUN again);
    the offloaded ledgers stay offloaded."""
    ids = [x["ledgerId"] for x in get(http, group, "internalStats")["ledgers"]]
    body = {"ledgerId": ids[6], "entryId": 0, "partitionIndex": -1}
    assert http.put(topic_url(group, "offload"), json=body).status_code == 204
    group.clock.advance(30)
    assert get(http, group, "offload")["status"] == "SUCCESS"
    (bundle,) = [
        b
        for b in group.model.namespaces["public/archive"].layout.bundles
        if group.model.topic_loads(group.model.namespaces["public/archive"], b)
    ]
    unload = f"{group.admin_urls['c1']}/admin/v2/namespaces/public/archive/{bundle}/unload"
    assert http.put(unload).status_code == 204
    assert get(http, group, "offload")["status"] == "NOT_RUN"
    assert sum(x["offloaded"] for x in get(http, group, "internalStats")["ledgers"]) == 6
