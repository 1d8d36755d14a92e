"""Each journal intent names the process that wrote it (issue 41, point 15): a process
settles only its own open intents and those whose writer is provably gone (its lock free:
the process ended, SIGKILL included), taking them over first; a balancer in dry-run settles,
counts and audits nothing. A journal from before writers were named is read and migrated.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from balancer.controller.journal import Journal
from balancer.core.results import ActionResult
from tests.controller.test_controller_moves import DST, NAME, NS, SRC, FakeMover, Rig


def write_intent(journal: Journal, decision_id: str = "move-x", at_ms: int = 0) -> None:
    journal.record_intent(
        decision_id=decision_id, kind="move", cluster="east", namespace=NS, target=NAME,
        action_key=f"k-{decision_id}", payload={"call": {"source": SRC, "destination_broker": DST}},
        batch_id=None, at_ms=at_ms,
    )  # fmt: skip


def test_a_dry_run_balancer_leaves_an_apply_s_intent_alone(tmp_path: Path) -> None:
    mover = FakeMover()
    applying = Rig(tmp_path, mover).controller()  # `apply`, its unload in flight
    write_intent(applying.journal)
    watching = Rig(tmp_path, mover, mode="dry-run")
    balancer = watching.controller()
    assert balancer.journal.has_unsettled()
    assert balancer.reconcile() == []
    assert watching.audit_records() == []
    assert balancer.stats.snapshot().counters == {}
    (entry,) = balancer.journal.pending()
    assert entry.writer == applying.journal.writer_id
    # Even once the apply is gone, dry-run settles nothing: the next acting process does.
    applying.close()
    assert balancer.reconcile() == [] and balancer.journal.pending()


def test_an_acting_balancer_settles_an_apply_s_intent_only_once_it_is_gone(
    tmp_path: Path,
) -> None:
    mover = FakeMover()
    applying = Rig(tmp_path, mover).controller()
    write_intent(applying.journal)
    rig = Rig(tmp_path, mover)
    balancer = rig.controller()
    assert balancer.reconcile() == []  # apply runs: its intent may be in flight
    assert rig.audit_records() == []
    apply_writer = applying.journal.writer_id
    applying.close()  # apply ended
    assert balancer.reconcile() == [("move-x", ActionResult.ABANDONED)]
    (record,) = rig.audit_records()
    assert record["writer"] == apply_writer
    assert record["settled_by"] == balancer.journal.writer_id
    entry = balancer.journal.get("move-x")
    assert entry is not None and entry.writer == balancer.journal.writer_id
    assert mover.unloads == []


def test_of_two_processes_finding_a_writer_gone_one_takes_its_intent(tmp_path: Path) -> None:
    gone = Journal(tmp_path / "journal.sqlite3", role="apply")
    write_intent(gone)
    gone.close()
    first, second = (Journal(tmp_path / "journal.sqlite3") for _ in range(2))
    (entry,) = first.pending()
    assert first.claim(entry)
    assert not second.claim(entry)  # its new writer runs
    (again,) = second.pending()
    assert not second.claim(again) and first.claim(again)


def test_after_a_sigkill_of_apply_its_intent_is_settled_once(tmp_path: Path) -> None:
    """A real process writes its intent, then waits (its unload in flight): not touched.
    SIGKILLed, its lock goes with it: the acting balancer takes the intent over."""
    path = tmp_path / "journal.sqlite3"
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from balancer.controller.journal import Journal
            j = Journal({str(path)!r}, role="apply")
            j.record_intent(decision_id="move-x", kind="move", cluster="east",
                namespace={NS!r}, target={NAME!r}, action_key="k",
                payload={{"call": {{"source": {SRC!r}, "destination_broker": {DST!r}}}}},
                batch_id=None, at_ms=1_800_000_000_000)  # the FakeClock's start
            print("written", flush=True)
            time.sleep(60)
        """)],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "written"
        mover = FakeMover()
        mover.owner.pop(NAME)  # the unload went out: nobody owns the bundle yet
        rig = Rig(tmp_path, mover)
        balancer = rig.controller()
        assert balancer.reconcile() == []
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL
    assert balancer.reconcile() == [("move-x", ActionResult.UNKNOWN)]  # taken over
    mover.lookup(NAME, DST)
    assert balancer.reconcile() == [("move-x", ActionResult.APPLIED)]
    assert mover.unloads == []  # never sent by the balancer
    # The dead writer's lock file went with the takeover: only the balancer's is left.
    token = str(balancer.journal.writer_id).rsplit("/", 1)[-1]
    locks = tmp_path / "journal.sqlite3.writers"
    assert [p.stem for p in locks.glob("*.lock")] == [token]


_OLD_SCHEMA = """
CREATE TABLE actions (
    decision_id TEXT PRIMARY KEY, kind TEXT NOT NULL, cluster TEXT NOT NULL,
    namespace TEXT NOT NULL, target TEXT NOT NULL, action_key TEXT NOT NULL,
    payload TEXT NOT NULL, batch_id TEXT, intent_at_ms INTEGER NOT NULL, result TEXT,
    detail TEXT, outcome_at_ms INTEGER
);
CREATE TABLE batches (batch_id TEXT PRIMARY KEY, handled_at_ms INTEGER NOT NULL);
"""


def test_a_journal_from_before_writers_is_read_and_its_intents_settled(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.executescript(_OLD_SCHEMA)
        conn.execute(
            "INSERT INTO actions VALUES ('move-old', 'move', 'east', ?, ?, 'k', ?, NULL, 5, "
            "NULL, NULL, NULL)",
            (NS, NAME, f'{{"call": {{"source": "{SRC}", "destination_broker": "{DST}"}}}}'),
        )
    conn.close()
    (old,) = Journal.open_read_only(path).entries()  # `plan` reads it unmigrated
    assert old.decision_id == "move-old" and old.writer is None
    rig = Rig(tmp_path, FakeMover())
    balancer = rig.controller()
    assert balancer.reconcile() == [("move-old", ActionResult.ABANDONED)]
    entry = balancer.journal.get("move-old")
    assert entry is not None and entry.writer == balancer.journal.writer_id
    assert rig.audit_records()[0]["writer"] is None


def test_a_writer_s_lock_goes_when_it_closes(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.sqlite3")
    locks = tmp_path / "journal.sqlite3.writers"
    assert len(list(locks.glob("*.lock"))) == 1
    journal.close()
    assert list(locks.glob("*.lock")) == []
