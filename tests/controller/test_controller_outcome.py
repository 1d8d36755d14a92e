"""Unknown outcomes: which transport failures may re-send a split, how a read-back is judged,
and the controller's decision logic when the split or trigger got no answer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest

from balancer.controller.clock import FakeClock
from balancer.controller.reconcile import offload_verdict, split_verdict
from balancer.core.bundles import NamespaceBundles
from balancer.core.results import ActionResult
from balancer.pulsar import (
    ClientSettings,
    ClusterEndpoint,
    OutcomeUnknownError,
    PulsarPeerGroup,
    RetryPolicy,
    ServerError,
    UnavailableError,
)
from balancer.pulsar.models import InternalStats, LedgerInfo, MessageId, OffloadState, OffloadStatus
from tests.controller.test_controller_apply import (
    NS,
    PARENT,
    FakeAdmin,
    make,
    offload_decision,
    split_decision,
)

LAYOUT = {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1}
MID = PARENT.lower + PARENT.width // 2


# -- transport: a split is never sent twice --------------------------------------------------


def _group(answer: Callable[[httpx.Request], httpx.Response]) -> PulsarPeerGroup:
    return PulsarPeerGroup(
        [ClusterEndpoint("a", "http://a.example")],
        ClientSettings(
            retry=RetryPolicy(max_attempts=3, base_delay_s=0.0, max_delay_s=0.0),
            sleep=lambda _s: None,
            http_transport=httpx.MockTransport(answer),
        ),
    )


def _failing(exc: type[httpx.TransportError], seen: list[str]) -> Callable[..., httpx.Response]:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        raise exc("injected", request=request)

    return answer


@pytest.mark.parametrize("exc", [httpx.ReadTimeout, httpx.RemoteProtocolError, httpx.ReadError])
def test_a_split_sent_without_answer_is_not_sent_again(exc: type[httpx.TransportError]) -> None:
    seen: list[str] = []
    with _group(_failing(exc, seen)) as group, pytest.raises(OutcomeUnknownError) as info:
        group.split_bundle(NS, PARENT, algorithm="specified_positions_divide", boundaries=[MID])
    assert seen == ["PUT"] and info.value.attempts == 1
    assert "outcome unknown" in str(info.value)


def test_an_offload_trigger_sent_without_answer_is_not_sent_again() -> None:
    seen: list[str] = []
    with _group(_failing(httpx.ReadTimeout, seen)) as group, pytest.raises(OutcomeUnknownError):
        group.trigger_offload(f"persistent://{NS}/t", MessageId(3, 0))
    assert seen == ["PUT"]


@pytest.mark.parametrize("exc", [httpx.ConnectError, httpx.ConnectTimeout])
def test_a_split_that_never_left_is_retried(exc: type[httpx.TransportError]) -> None:
    seen: list[str] = []
    with _group(_failing(exc, seen)) as group, pytest.raises(UnavailableError) as info:
        group.split_bundle(NS, PARENT, algorithm="specified_positions_divide", boundaries=[MID])
    assert seen == ["PUT"] * 3 and not isinstance(info.value, OutcomeUnknownError)


def test_a_read_is_still_retried_after_a_timeout() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        if len(seen) == 1:
            raise httpx.ReadTimeout("slow", request=request)
        return httpx.Response(200, json=LAYOUT)

    with _group(answer) as group:
        assert group.get_bundles(NS).num_bundles == 1
    assert seen == ["GET", "GET"]


# -- read-back verdicts ------------------------------------------------------------------------

INITIAL = NamespaceBundles.initial(NS, 4)
SPLIT, _ = INITIAL.split(PARENT, (MID,))
OTHER, _ = INITIAL.split(PARENT, (MID + 1,))


@pytest.mark.parametrize(
    ("layout", "settled", "expected"),
    [
        (SPLIT, False, ActionResult.APPLIED),
        (SPLIT, True, ActionResult.APPLIED),
        (INITIAL, False, ActionResult.UNKNOWN),  # may still be in flight inside Pulsar
        (INITIAL, True, ActionResult.FAILED),
        (OTHER, False, ActionResult.STALE),  # someone else split it elsewhere
    ],
)
def test_split_verdict(layout: NamespaceBundles, settled: bool, expected: ActionResult) -> None:
    assert split_verdict(layout, PARENT, (MID,), settled=settled)[0] is expected


def _stats(*offloaded: bool) -> InternalStats:
    ledgers = tuple(LedgerInfo(i, 10, 100, off) for i, off in enumerate(offloaded))
    return InternalStats(
        number_of_entries=0,
        total_size=0,
        current_ledger_entries=1,
        current_ledger_size=0,
        ledgers=ledgers,
    )


@pytest.mark.parametrize(
    ("stats", "state", "settled", "expected"),
    [
        (_stats(True, True, False), OffloadState.SUCCESS, False, ActionResult.APPLIED),
        (_stats(False, False, False), OffloadState.RUNNING, False, ActionResult.STARTED),
        (_stats(False, False, False), OffloadState.NOT_RUN, False, ActionResult.UNKNOWN),
        (_stats(False, False, False), OffloadState.NOT_RUN, True, ActionResult.FAILED),
        (_stats(True, False, False), OffloadState.ERROR, True, ActionResult.FAILED),
    ],
)
def test_offload_verdict(
    stats: InternalStats, state: OffloadState, settled: bool, expected: ActionResult
) -> None:
    status = OffloadStatus(state, "boom" if state is OffloadState.ERROR else "")
    assert offload_verdict(stats, status, MessageId(2, 0), settled=settled)[0] is expected


# -- controller decision logic -----------------------------------------------------------------


@dataclass
class NoAnswerAdmin(FakeAdmin):
    """Pulsar gets the split (or not) and the answer is lost."""

    lose_answer: Exception | None = None

    def split_bundle(self, *args: object, **kwargs: object) -> None:
        super().split_bundle(*args, **kwargs)  # type: ignore[arg-type]
        if self.lose_answer is not None:
            raise self.lose_answer

    def trigger_offload(self, topic: str, message_id: MessageId) -> None:
        super().trigger_offload(topic, message_id)
        self.status = OffloadState.RUNNING
        if self.lose_answer is not None:
            raise self.lose_answer


def _unknown() -> OutcomeUnknownError:
    return OutcomeUnknownError("PUT split: sent, no answer (ReadTimeout)", method="PUT")


def test_a_split_pulsar_applied_is_never_failed(tmp_path: Path) -> None:
    admin = NoAnswerAdmin(lose_answer=_unknown())
    controller = make(tmp_path, admin)
    outcome = controller.apply_split(split_decision())
    assert outcome.result is ActionResult.APPLIED and outcome.children == 2, outcome.detail
    assert admin.calls.count("split:specified_positions_divide:True") == 1
    entry = controller.journal.get("split-1")
    assert entry is not None and entry.result == "applied"


def test_a_5xx_after_pulsar_applied_the_split_is_applied(tmp_path: Path) -> None:
    admin = NoAnswerAdmin(lose_answer=ServerError("boom", status=500))
    outcome = make(tmp_path, admin).apply_split(split_decision())
    assert outcome.result is ActionResult.APPLIED, outcome.detail


def test_a_5xx_with_the_bundle_unchanged_stays_failed(tmp_path: Path) -> None:
    admin = NoAnswerAdmin(apply_splits=False, lose_answer=ServerError("boom", status=500))
    outcome = make(tmp_path, admin).apply_split(split_decision())
    assert outcome.result is ActionResult.FAILED and "read back" in outcome.detail


def test_unknown_split_blocks_the_bundle_until_settled(tmp_path: Path) -> None:
    clock = FakeClock()
    admin = NoAnswerAdmin(apply_splits=False, lose_answer=_unknown())
    controller = make(tmp_path, admin, clock)
    assert controller.apply_split(split_decision()).result is ActionResult.UNKNOWN
    admin.lose_answer = None
    # Other boundaries on the same bundle: still no second split while the first is unknown.
    other = replace(split_decision("split-2"), boundaries=(MID + 1,))
    blocked = controller.apply_split(other)
    assert blocked.result is ActionResult.DUPLICATE and "split-1" in blocked.detail
    assert controller.reconcile() == []  # not settled yet: still unknown
    clock.advance(61)
    assert controller.reconcile() == [("split-1", ActionResult.FAILED)]
    admin.apply_splits = True  # Pulsar works again: a fresh decision splits
    assert controller.apply_split(split_decision("split-3")).result is ActionResult.APPLIED
    assert admin.calls.count("split:specified_positions_divide:True") == 2


def test_a_recheck_that_cannot_read_pulsar_keeps_the_action_unknown(tmp_path: Path) -> None:
    clock = FakeClock()
    admin = NoAnswerAdmin(apply_splits=False, lose_answer=_unknown())
    controller = make(tmp_path, admin, clock)
    controller.apply_split(split_decision())
    admin.error = UnavailableError("down")
    clock.advance(120)
    assert controller.reconcile() == []
    assert [e.decision_id for e in controller.journal.unknown()] == ["split-1"]


def test_offload_trigger_without_answer_reads_the_status_back(tmp_path: Path) -> None:
    admin = NoAnswerAdmin(
        ledgers=(
            LedgerInfo(1, 10, 600, False),
            LedgerInfo(2, 10, 600, False),
            LedgerInfo(3, 10, 600, False),
        ),
        current_ledger_size=10,
        lose_answer=_unknown(),
    )
    outcome = make(tmp_path, admin).apply_offload(offload_decision())
    assert outcome.result is ActionResult.STARTED and "offload running" in outcome.detail
    assert outcome.bytes_offloaded == 0  # counted once its status says SUCCESS
    assert sum(c.startswith("offload:") for c in admin.calls) == 1
