"""What each refusal of an unload with destination means (issue 41, point 6: NamespacesBase
.internalUnloadNamespaceBundleAsync and validateLeaderBrokerAsync), and the guard against a
second move of a bundle range in flight (point 1)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from balancer.controller.metrics_bridge import attach_metrics
from balancer.controller.move_steps import ranges_in_flight
from balancer.core.bundles import BundleRange
from balancer.core.moves.refusals import UnloadRefusal, classify_refusal
from balancer.core.results import ActionResult
from balancer.pulsar.errors import ConflictError, NotFoundError, PreconditionFailedError
from balancer.sim import parse_scenario, start_peer_group
from tests.controller.test_controller import make_client
from tests.controller.test_controller_moves import (
    BUNDLE,
    DST,
    NAME,
    NS,
    SRC,
    FakeMover,
    Rig,
    Sink,
    move,
)
from tests.sim.test_sim_affinity import FIRST, two_namespaces

LEADER_URL = "Redirected broker's service url is not configured."
NOT_OWNED = f"Failed to find ownership for ServiceUnit:{NAME}"


@pytest.fixture
def mover() -> FakeMover:
    return FakeMover()


@pytest.fixture
def rig(tmp_path, mover: FakeMover) -> Rig:  # type: ignore[no-untyped-def]
    return Rig(tmp_path, mover)


@pytest.mark.parametrize(
    ("status", "reason", "refusal"),
    [
        (412, "Cannot find bundle in the bundles list", UnloadRefusal.BUNDLE_NOT_FOUND),
        (412, "Invalid upper boundary for bundle", UnloadRefusal.BUNDLE_NOT_FOUND),
        (412, "bundle not found", UnloadRefusal.BUNDLE_NOT_FOUND),
        (412, NOT_OWNED, UnloadRefusal.NOT_OWNED),
        (412, LEADER_URL, UnloadRefusal.LEADER_URL_MISSING),
        (412, "The current leader is empty.", UnloadRefusal.NO_LEADER),
        (412, "something new", UnloadRefusal.OTHER_412),
        (404, "Namespace does not exist", UnloadRefusal.NAMESPACE_GONE),
        (409, "Not allowed unload namespace bundle to inactive destination broker",
         UnloadRefusal.INACTIVE_DESTINATION),
        (500, "boom", None),
        (None, "", None),
    ],
)  # fmt: skip
def test_classify_refusal(status: int | None, reason: str, refusal: UnloadRefusal | None) -> None:
    assert classify_refusal(status, reason) is refusal


def outcome_of(rig: Rig, mover: FakeMover, error: Exception):  # type: ignore[no-untyped-def]
    mover.error = error  # type: ignore[assignment]
    ctl = rig.controller()
    sink = Sink()
    attach_metrics(ctl, sink)
    return ctl.handle(move()), sink


def test_a_leader_without_url_is_failed_not_stale(rig: Rig, mover: FakeMover) -> None:
    outcome, sink = outcome_of(
        rig, mover, PreconditionFailedError("precondition", status=412, reason=LEADER_URL)
    )
    assert outcome.result is ActionResult.FAILED  # today: stale ("the layout changed")
    assert outcome.refusal is UnloadRefusal.LEADER_URL_MISSING
    assert "no web service URL" in outcome.detail
    assert sink.refusals == [("east", UnloadRefusal.LEADER_URL_MISSING)]
    (record,) = rig.audit_records()
    assert record["refusal"] == "leader_url_missing" and record["result"] == "failed"


def test_not_owned_is_read_back_not_stale(rig: Rig, mover: FakeMover) -> None:
    # Someone unloaded the bundle after the fresh check: nobody owns it when ours arrives.
    mover.then = "unowned"
    mover.applied_anyway = True
    outcome, sink = outcome_of(
        rig, mover, PreconditionFailedError("precondition", status=412, reason=NOT_OWNED)
    )
    assert outcome.result is ActionResult.UNKNOWN, outcome.detail  # rechecked, not stale
    assert outcome.refusal is UnloadRefusal.NOT_OWNED
    assert f"keeps destination {DST} for range {BUNDLE}" in outcome.detail
    assert sink.refusals == [("east", UnloadRefusal.NOT_OWNED)]
    # Its next lookup takes the kept destination: the recheck settles it applied.
    ctl = rig.controller()
    mover.lookup(NAME, DST)
    rig.clock.advance(5)
    assert ctl.reconcile() == [(outcome.decision_id, ActionResult.APPLIED)]
    assert len(mover.unloads) == 1


def test_bundle_not_found_is_stale_and_names_the_leftover(rig: Rig, mover: FakeMover) -> None:
    outcome, _ = outcome_of(
        rig,
        mover,
        PreconditionFailedError(
            "precondition", status=412, reason="Cannot find bundle in the bundles list"
        ),
    )
    assert outcome.result is ActionResult.STALE
    assert outcome.refusal is UnloadRefusal.BUNDLE_NOT_FOUND
    assert f"range {BUNDLE}" in outcome.detail
    assert rig.audit_records()[0]["refusal"] == "bundle_not_found"


def test_404_and_409_are_typed(rig: Rig, mover: FakeMover) -> None:
    outcome, _ = outcome_of(
        rig, mover, NotFoundError("nf", status=404, reason="Namespace does not exist")
    )
    assert outcome.refusal is UnloadRefusal.NAMESPACE_GONE
    assert "namespace gone" in outcome.detail
    mover.error = ConflictError("c", status=409, reason="inactive")
    outcome = rig.controller().handle(move(120_000))
    assert outcome.result is ActionResult.FAILED
    assert outcome.refusal is UnloadRefusal.INACTIVE_DESTINATION


def test_a_second_move_of_a_range_in_flight_waits(rig: Rig, mover: FakeMover) -> None:
    """Another namespace's bundle with the same range was unloaded and is not owned yet:
    a move of ours with that range is not sent (it would overwrite that destination)."""
    other = f"shop/other/{BUNDLE}"
    mover.owner[other] = SRC
    mover.then = "unowned"
    ctl = rig.controller()
    first = ctl.handle(move())
    assert first.result is ActionResult.UNKNOWN
    assert ranges_in_flight(ctl.journal, "east") == {str(BUNDLE)}
    assert ranges_in_flight(ctl.journal, "west") == frozenset()
    second = move(120_000).__class__(
        **{**{f: getattr(move(120_000), f) for f in move().__slots__}, "namespace": "shop/other"}
    )
    outcome = ctl.handle(second)
    assert outcome.result is ActionResult.DUPLICATE
    assert f"range {BUNDLE} has a move in flight" in outcome.detail
    assert [u[0] for u in mover.unloads] == [NS]
    # Owned again: the range is free.
    mover.lookup(NAME, DST)
    rig.clock.advance(5)
    ctl.reconcile()
    assert ranges_in_flight(ctl.journal, "east") == frozenset()
    assert ctl.handle(move(180_000, bundle=BundleRange(0x40000000, 0x80000000))).result in (
        ActionResult.STALE,  # not owned by SRC in the fake: nothing sent, but not held back
    )


class RefusesOnce(FakeMover):
    """The first unload is refused (`error`), the next ones go through."""

    def unload_bundle(self, namespace: str, bundle: object, **kw: object) -> None:  # type: ignore[override]
        try:
            super().unload_bundle(namespace, bundle, **kw)  # type: ignore[arg-type]
        finally:
            self.error = None


def test_a_refused_unload_is_followed_by_a_move_that_uses_the_leftover_up(
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    """412 bundle not found: the leader kept DST for the bare range. A bundle with that range
    (another namespace's, the destination's own first) is unloaded to the broker that owns
    it: its lookup uses the entry up where the bundle already was."""
    mover = RefusesOnce()
    rig = Rig(tmp_path, mover)
    peer = f"shop/peer/{BUNDLE}"
    mover.owner[peer] = DST
    mover.owner[f"shop/peer/{BundleRange(0x40000000, 0x80000000)}"] = DST  # another range
    mover.error = PreconditionFailedError(
        "precondition", status=412, reason="Cannot find bundle in the bundles list"
    )
    ctl = rig.controller()
    first = ctl.handle(move())
    assert first.result is ActionResult.STALE
    assert mover.unloads == [
        (NS, str(BUNDLE), "east", DST),
        ("shop/peer", str(BUNDLE), "east", DST),  # to its own owner
    ]
    records = rig.audit_records()
    assert [r["decision"]["reason"] for r in records] == ["overloaded", "clear_leftover"]
    cleanup = records[1]
    assert cleanup["decision"]["source"] == cleanup["decision"]["destination"] == DST
    assert cleanup["result"] == "applied"  # the fake transfers: owned by DST again
    (entry,) = [e for e in ctl.journal.entries() if e.target == peer]
    assert entry.payload["call"]["destination_broker"] == DST


def test_no_follow_up_for_a_not_owned_refusal_nor_outside_the_allow_list(
    rig: Rig, mover: FakeMover
) -> None:
    mover.owner[f"other/peer/{BUNDLE}"] = DST
    mover.error = PreconditionFailedError("p", status=412, reason="Cannot find bundle")
    ctl = rig.controller(allow_namespaces=("shop/*",))
    ctl.handle(move())
    assert [u[0] for u in mover.unloads] == [NS]  # other/peer is not ours to unload


class Racing:
    """The real client on the simulator, except that the source's ownedNamespaces still lists
    a bundle of a namespace deleted since (the race a refused unload needs)."""

    def __init__(self, client: Any, ghost: str, source: str) -> None:
        self.client, self.ghost, self.source = client, ghost, source

    def unload_bundle(self, *args: Any, **kwargs: Any) -> None:
        self.client.unload_bundle(*args, **kwargs)

    def owned_bundles(self, cluster: str, broker: str) -> Mapping[str, object]:
        owned = dict(self.client.owned_bundles(cluster, broker))
        if broker == self.source:
            owned[self.ghost] = owned[next(iter(owned))]
        return owned

    def list_brokers(self, cluster: str) -> tuple[str, ...]:
        return tuple(self.client.list_brokers(cluster))


def test_on_the_simulator_the_follow_up_leaves_no_entry_behind(tmp_path: Path) -> None:
    doc = two_namespaces()
    with start_peer_group(parse_scenario(doc)) as sim, make_client(sim) as client:
        brokers = list(client.list_brokers("a"))
        source, dest = brokers[0], brokers[1]
        ghost = f"t/gone/{FIRST}"
        rig = Rig(tmp_path, cast(FakeMover, Racing(client, ghost, source)))
        ctl = rig.controller()
        decision = replace(move(), cluster="a", namespace="t/gone", bundle=BundleRange.parse(FIRST),
                           source=source, destination=dest)  # fmt: skip
        before = {n: b for b in brokers for n in client.owned_bundles("a", b) if n.endswith(FIRST)}
        outcome = ctl.handle(decision)
        assert outcome.refusal is UnloadRefusal.NAMESPACE_GONE, outcome.detail
        records = rig.audit_records()
        assert [r["decision"]["reason"] for r in records] == ["overloaded", "clear_leftover"]
        # The follow-up overwrote the leftover with its bundle's own owner; the clients'
        # lookup uses it up and the bundle is back where it was.
        sim.clock.advance(1)
        with sim.model.lock:
            sim.model.brokers.settle()
        assert sim.model.cluster("a").affinity == {}
        after = {n: b for b in brokers for n in client.owned_bundles("a", b) if n.endswith(FIRST)}
        assert after == before
        ctl.reconcile()
        assert sorted(e.result or "" for e in ctl.journal.entries()) == ["applied", "stale"]


class ExtensibleRefusesOnce(RefusesOnce):
    def runtime_configuration(self, cluster: str) -> Mapping[str, str]:
        return {
            "loadManagerClassName": (
                "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"
            )
        }

    def set_dynamic_configuration(self, cluster: str, name: str, value: str) -> None: ...


def test_no_follow_up_under_the_extensible_load_manager(tmp_path: Path) -> None:
    mover = ExtensibleRefusesOnce()
    mover.owner[f"shop/peer/{BUNDLE}"] = DST
    mover.error = PreconditionFailedError("p", status=412, reason="Cannot find bundle")
    Rig(tmp_path, mover).controller().handle(move())
    assert [u[0] for u in mover.unloads] == [NS]
