"""The simulator's model without HTTP: split bookkeeping under any sequence of operations,
ledger arithmetic, and the shipped demo scenario doing what the demo needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.core.hashing import hash_position
from balancer.sim import PeerGroup, load_scenario, parse_scenario
from balancer.sim.model import LEDGER_ID_STRIDE, SimError, SimModel

ROOT = Path(__file__).resolve().parents[2]
NS = "t/ns"
ALGORITHMS = ["range_equally_divide", "topic_count_equally_divide", "specified_positions_divide"]


def make_model(**broker: Any) -> SimModel:
    doc = {
        "name": "m",
        "seed": 1,
        "broker": broker,
        "clusters": [{"name": "a", "brokers": 3}],
        "namespaces": [
            {
                "name": NS,
                "cluster": "a",
                "bundles": 2,
                "topic_groups": [{"name": "e", "count": 80, "total_msg_rate_in": 8000}],
            }
        ],
    }
    return PeerGroup.from_scenario(parse_scenario(doc)).model


operation = st.tuples(
    st.sampled_from(ALGORITHMS),
    st.integers(min_value=0, max_value=50),  # which bundle (modulo the count)
    st.lists(st.integers(min_value=0, max_value=0xFFFFFFFF), min_size=1, max_size=3),
    st.booleans(),  # unload
)


@settings(max_examples=40, deadline=None)
@given(st.lists(operation, max_size=12))
def test_any_split_sequence_keeps_the_books(ops: list[tuple[str, int, list[int], bool]]) -> None:
    model = make_model()
    ns = model.namespaces[NS]
    applied = 0
    for algorithm, which, positions, unload in ops:
        bundles = ns.layout.bundles
        bundle = bundles[which % len(bundles)]
        before = len(bundles)
        try:
            record = model.split_bundle(
                ns, str(bundle), algorithm=algorithm, boundaries=positions, unload=unload
            )
        except SimError as exc:
            assert exc.status == 412
            assert len(ns.layout.bundles) == before
            continue
        if record is None:
            assert len(ns.layout.bundles) == before
            continue
        applied += 1
        assert record.parent == bundle
        assert len(ns.layout.bundles) == before + len(record.children) - 1
        assert not ns.layout.has(bundle)
        assert all(ns.layout.has(c) for c in record.children)
    assert len(model.splits) == applied
    # Every bundle has an owner, and the bundles partition the namespace's topics.
    assert set(ns.owners) == set(ns.layout.bundles)
    every = model.topics_of_bundle(ns, None)
    per_bundle = [t for b in ns.layout.bundles for t in model.topics_of_bundle(ns, b)]
    assert sorted(per_bundle) == sorted(every)
    for b in ns.layout.bundles:
        assert all(b.contains(hash_position(t)) for t in model.topics_of_bundle(ns, b))
    # Each topic is in exactly one broker's stats, under its bundle's owner.
    seen = [
        t
        for broker in range(3)
        for bundle_stats in model.broker_stats.document("a", broker).get(NS, {}).values()
        for t in bundle_stats["persistent"]
    ]
    assert sorted(seen) == sorted(every)


def test_special_bundles_in_other_requests_are_412() -> None:
    model = make_model()
    with pytest.raises(SimError) as caught:
        model.resolve_bundle(model.namespaces[NS], "HOT")
    assert caught.value.status == 412


@pytest.mark.parametrize(
    ("written", "closed", "current"),
    [(0, 0, 0), (999, 0, 999), (1000, 1, 0), (2500, 2, 500)],
    ids=["empty", "under-one-ledger", "exactly-one-ledger", "two-and-a-half"],
)
def test_ledger_rollover_arithmetic(written: int, closed: int, current: int) -> None:
    model = make_model(ledger_max_size_bytes=1000)
    ledgers, current_size = model.storage.ledgers(3, float(written))
    assert len(ledgers) == closed + 1
    assert current_size == current
    assert [x.ledger_id for x in ledgers] == [3 * LEDGER_ID_STRIDE + k for k in range(closed + 1)]
    assert all(x.size_bytes == 1000 for x in ledgers[:-1])


def test_the_demo_scenario_shows_hot_bundles_and_an_offload_candidate() -> None:
    """default.yaml must give the ~2-minute demo (time scale 60) something to do: bundles
    over Pulsar's default thresholds from the start, in both clusters within 10 simulated
    minutes, and the audit topic past the 10 GiB default offload threshold by then."""
    scenario = load_scenario(ROOT / "conf" / "scenarios" / "default.yaml")
    model = PeerGroup.from_scenario(scenario).model
    max_msg_rate = 30000.0
    model.clock.advance(600)
    hot_clusters = set()
    for ns in model.namespaces.values():
        for bundle in ns.layout.bundles:
            loads = model.topic_loads(ns, bundle)
            if sum(t.msg_rate for t in loads) > max_msg_rate:
                hot_clusters.add(ns.cluster)
    assert hot_clusters == {"east", "west"}
    audit = model.namespaces["acme/audit"]
    i = model.topic_index(audit, "audit-log")
    assert model.topic_stats(i)["storageSize"] > 10 * 1024**3
    # The outstanding partition is a third of Pulsar's bundle threshold on its own.
    orders = model.namespaces["acme/orders"]
    j = model.topic_index(orders, "orders-partition-3")
    assert model.topic_stats(j)["msgRateIn"] > 10_000
