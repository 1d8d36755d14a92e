"""The journal counts each bundle's moves since a roll started (issue 43, point 4): the
planner leaves a bundle the roll moved twice out of balance moves."""

from __future__ import annotations

from pathlib import Path

from balancer.controller.journal import Journal

NAME = "t/ns/0x00000000_0x40000000"


def _move(journal: Journal, decision_id: str, at_ms: int, result: str | None) -> None:
    journal.record_intent(
        decision_id=decision_id, kind="move", cluster="east", namespace="t/ns", target=NAME,
        action_key=f"{NAME}->{decision_id}", payload={}, batch_id=None, at_ms=at_ms,
    )  # fmt: skip
    if result is not None:
        journal.record_outcome(decision_id, result=result, detail="", at_ms=at_ms + 1)


def test_moves_since_the_roll_started_are_counted_as_the_grace_period_counts_them(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path / "journal.sqlite3")
    _move(journal, "before", 500, "applied")  # before the roll: not counted
    _move(journal, "one", 1_000, "applied")
    _move(journal, "two", 2_000, "landed_elsewhere")
    _move(journal, "open", 3_000, None)  # an intent still open may have moved it
    _move(journal, "dry", 4_000, "dry_run")  # never sent
    assert journal.move_counts_since("east", 1_000) == {NAME: 3}
    assert journal.move_counts_since("west", 0) == {}
    journal.close()
