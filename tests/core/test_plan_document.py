"""The plan document: its id is its content hash, it reads back as written, a changed or
foreign document is refused in one line, and the offload premise."""

from __future__ import annotations

import copy
import datetime
import json

import pytest

from balancer.core.bundles import BundleRange
from balancer.core.decisions import OffloadDecision, SplitDecision, SplitInputs, SplitReason
from balancer.core.limits import BundleLimits
from balancer.core.moves.model import MoveDecision, MoveReason
from balancer.core.offload import LedgerSize, MessageId
from balancer.core.plan_document import (
    PlanFileError,
    build_document,
    content_hash,
    iso_utc,
    offload_premise,
    parse_document,
    plan_id_of,
)
from balancer.core.split import ChildLoad, SplitAlgorithm

OFFLOAD = OffloadDecision("offload-x", "east", "acme/a", "persistent://acme/a/t", 5, 0, 1, 100)
MOVE = MoveDecision(
    "move-x", "east", "acme/a", BundleRange(0, 0x40000000), "b1:8080", "b2:8080",
    MoveReason.OVERLOADED, 0.2, 1000.0, 2e6, 7, 0.9, 0.7, 0.1, 0.3, 100,
)  # fmt: skip


def document() -> dict[str, object]:
    return build_document(
        created_at_ms=1_795_879_384_236,
        config_sha256="c" * 64,
        source="clusters east",
        clusters=["east"],
        layouts={("east", "acme/a"): (0, 0x40000000, 0xFFFFFFFF)},
        splits=[],
        offloads=[(OFFLOAD, MessageId(12, 0))],
        moves=[MOVE],
    )


def test_it_reads_back_as_written_with_ids_for_apply() -> None:
    doc = parse_document(json.loads(json.dumps(document())))
    assert [a.action_id for a in doc.actions] == ["offload-1", "move-1"]
    offload, move = doc.actions
    assert offload.decision == OFFLOAD and offload.offload_point == MessageId(12, 0)
    assert move.decision == MOVE
    assert doc.layouts == {("east", "acme/a"): (0, 0x40000000, 0xFFFFFFFF)}
    assert doc.owners == {("east", "acme/a/0x00000000_0x40000000"): "b1:8080"}
    # The decision applied: same action, an id of this plan (the journal's key).
    applied = move.for_plan(doc.plan_id)
    assert applied.decision_id != MOVE.decision_id and applied.decision_id.startswith("move-")
    assert applied.decision_id == move.for_plan(doc.plan_id).decision_id


def test_the_id_is_the_content_hash() -> None:
    body = document()
    assert str(body["plan_id"]) == f"plan-{str(body['content_sha256'])[:16]}"
    changed = copy.deepcopy(body)
    changed["actions"][1]["destination"] = "b3:8080"  # type: ignore[index]
    with pytest.raises(PlanFileError, match="changed after it was made"):
        parse_document(changed)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"schema": "other"}, "not a plan"),
        ({"version": 3}, "version 3 is not supported"),
    ],
)
def test_a_foreign_document_is_refused(edit: dict[str, object], message: str) -> None:
    with pytest.raises(PlanFileError, match=message):
        parse_document({**document(), **edit})
    with pytest.raises(PlanFileError, match="not a JSON object"):
        parse_document([])


def test_created_at_is_utc_iso() -> None:
    for ms in (0, 951_782_400_000, 1_795_879_384_236, 4_102_444_799_999):
        expected = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
        assert iso_utc(ms) == expected.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def test_offload_premise() -> None:
    ledgers = [LedgerSize(10, 5), LedgerSize(11, 5), LedgerSize(12, 0)]
    assert offload_premise(ledgers, MessageId(12, 0)) is None
    assert "no longer in the topic" in str(offload_premise(ledgers[:2], MessageId(12, 0)))
    offloaded = [LedgerSize(10, 5, True), LedgerSize(11, 5, True), LedgerSize(12, 0)]
    assert "already offloaded" in str(offload_premise(offloaded, MessageId(12, 0)))
    assert "already offloaded" in str(offload_premise(ledgers[2:], MessageId(12, 0)))  # trimmed


SPLIT = SplitDecision(
    "split-x", "east", "acme/a", BundleRange(0, 0x40000000),
    SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE, (0x20000000,),
    (ChildLoad(BundleRange(0, 0x20000000), 1, 1.0, 1.0, 1),
     ChildLoad(BundleRange(0x20000000, 0x40000000), 1, 1.0, 1.0, 1)),
    (SplitReason.MSG_RATE,), 100,
    SplitInputs(1.0, 1.0, 2, 2, 1.0, 2, BundleLimits(10, 10, 1.0, 1.0), 4, 128),
)  # fmt: skip


def with_split(unload: bool | None, *, moves: bool) -> dict[str, object]:
    from dataclasses import replace

    return build_document(
        created_at_ms=1_795_879_384_236, config_sha256="c" * 64, source="clusters east",
        clusters=["east"], layouts={("east", "acme/a"): (0, 0x40000000, 0xFFFFFFFF)},
        splits=[replace(SPLIT, unload_children=unload)], offloads=[],
        moves=[MOVE] if moves else [],
    )  # fmt: skip


def rehashed(body: dict[str, object]) -> dict[str, object]:
    rest = {k: v for k, v in body.items() if k not in ("plan_id", "content_sha256")}
    digest = content_hash(rest)
    return {"plan_id": plan_id_of(digest), "content_sha256": digest, **rest}


@pytest.mark.parametrize("unload", [True, False])
def test_a_split_keeps_whether_its_children_are_unloaded(unload: bool) -> None:
    body = with_split(unload, moves=False)
    assert body["actions"][0]["unload_children"] is unload  # type: ignore[index]
    (split,) = parse_document(json.loads(json.dumps(body))).actions
    assert isinstance(split.decision, SplitDecision)
    assert split.decision.unload_children is unload
    assert split.for_plan("plan-x").unload_children is unload  # what the controller sends


def test_an_undecided_split_is_not_saved_and_a_version_2_split_must_say() -> None:
    with pytest.raises(ValueError, match="unload_children must be decided"):
        with_split(None, moves=False)
    body = copy.deepcopy(with_split(True, moves=False))
    del body["actions"][0]["unload_children"]  # type: ignore[index, attr-defined]
    with pytest.raises(PlanFileError, match="missing field 'unload_children'"):
        parse_document(rehashed(body))


@pytest.mark.parametrize(("moves", "expected"), [(True, False), (False, None)])
def test_a_version_1_split_is_read_with_the_stated_rule(moves: bool, expected: bool | None) -> None:
    """Version 1 had no field: with moves in the split's cluster the children stay on the
    parent's broker; without, the applying config's `unload_after_split` (None) decides."""
    body = copy.deepcopy(with_split(True, moves=moves))
    body["version"] = 1
    del body["actions"][0]["unload_children"]  # type: ignore[index, attr-defined]
    split = parse_document(rehashed(body)).actions[0]
    assert isinstance(split.decision, SplitDecision)
    assert split.decision.unload_children is expected
