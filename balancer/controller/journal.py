"""The durable decision journal: what the controller set out to do and what came of it.

SQLite (stdlib), one file. Before calling Pulsar the controller commits an "intent" row; after
Pulsar answers it commits the outcome. On restart, intents without an outcome are
reconciled against Pulsar's state (never blindly re-applied); so are outcomes recorded as
`unknown` (sent, no answer), which are rechecked until Pulsar's state settles them, and
offloads recorded `started` (Pulsar runs them), followed until their status settles. Handled
batch ids are kept too, so a replayed batch is recognised. Each write is its own transaction,
fsynced (`synchronous=FULL`), so a crash loses at most the step in progress.

Each intent names the process that wrote it (`writer`, see journal_writers): a process
settles only its own unsettled actions and those whose writer is provably gone, which it
first claims (`claim`), so an `apply` running beside `run` on one journal keeps its
in-flight intents, and two processes never settle the same one. A journal written before
writers were named gains the column on open; its rows have no writer and count as a gone
writer's.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from balancer.controller.journal_writers import WriterRegistry

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS actions (
    decision_id   TEXT PRIMARY KEY,
    kind          TEXT NOT NULL,
    cluster       TEXT NOT NULL,
    namespace     TEXT NOT NULL,
    target        TEXT NOT NULL,     -- bundle key or topic
    action_key    TEXT NOT NULL,     -- what exactly would be done (target + boundaries / point)
    payload       TEXT NOT NULL,     -- JSON: the decision and the planned call
    batch_id      TEXT,
    intent_at_ms  INTEGER NOT NULL,
    result        TEXT,              -- NULL until the outcome is known
    detail        TEXT,
    outcome_at_ms INTEGER,
    writer        TEXT               -- the process that wrote it, then the one settling it
);
CREATE INDEX IF NOT EXISTS actions_pending ON actions (result) WHERE result IS NULL;
CREATE INDEX IF NOT EXISTS actions_key ON actions (action_key);
CREATE INDEX IF NOT EXISTS actions_unknown ON actions (result) WHERE result = 'unknown';
CREATE INDEX IF NOT EXISTS actions_started ON actions (result) WHERE result = 'started';
CREATE INDEX IF NOT EXISTS actions_target ON actions (target);
CREATE INDEX IF NOT EXISTS actions_moves ON actions (cluster, target) WHERE kind = 'move';
CREATE TABLE IF NOT EXISTS batches (
    batch_id      TEXT PRIMARY KEY,
    handled_at_ms INTEGER NOT NULL
);
"""


_COLUMNS = (
    "decision_id, kind, cluster, namespace, target, action_key, payload, batch_id, "
    "intent_at_ms, result, detail, outcome_at_ms, writer"
)


@dataclass(frozen=True, slots=True)
class JournalEntry:
    decision_id: str
    kind: str
    cluster: str
    namespace: str
    target: str
    action_key: str
    payload: dict[str, Any]
    batch_id: str | None
    intent_at_ms: int
    result: str | None
    detail: str | None
    outcome_at_ms: int | None
    writer: str | None = None  # None: written before writers were named

    @property
    def pending(self) -> bool:
        return self.result is None


class Journal:
    def __init__(self, path: Path | str, *, role: str = "run") -> None:
        """`role` names the process in its writer id (`run`, `apply`)."""
        self.path = Path(path)
        memory = str(path) == ":memory:"
        if not memory:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        # One connection used from whichever thread runs the batch; the lock serialises it.
        self._conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.executescript(_SCHEMA)
            if "writer" not in self._column_names():  # a journal from before writers
                try:
                    self._conn.execute("ALTER TABLE actions ADD COLUMN writer TEXT")
                except sqlite3.OperationalError as exc:  # another process added it first
                    if "duplicate column" not in str(exc):
                        raise
        self._columns = _COLUMNS
        self.writers: WriterRegistry | None = WriterRegistry(None if memory else self.path, role)

    @classmethod
    def open_read_only(cls, path: Path | str) -> Journal:
        """An existing journal, for reads only (`plan`): never created, migrated or written."""
        journal = cls.__new__(cls)
        journal.path = Path(path)
        uri = f"{journal.path.resolve().as_uri()}?mode=ro"
        journal._conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        journal._lock = threading.Lock()
        journal.writers = None
        journal._columns = _COLUMNS
        if "writer" not in journal._column_names():  # not migrated: read it as it is
            journal._columns = _COLUMNS.replace(", writer", ", NULL AS writer")
        return journal

    def _column_names(self) -> set[str]:
        return {str(row[1]) for row in self._conn.execute("PRAGMA table_info(actions)")}

    @property
    def writer_id(self) -> str | None:
        """This process's writer id (None: opened read-only)."""
        return None if self.writers is None else self.writers.writer_id

    def close(self) -> None:
        with self._lock:
            self._conn.close()
        if self.writers is not None:
            self.writers.close()

    def _row(self, row: tuple[Any, ...] | None) -> JournalEntry | None:
        if row is None:
            return None
        return JournalEntry(
            decision_id=row[0],
            kind=row[1],
            cluster=row[2],
            namespace=row[3],
            target=row[4],
            action_key=row[5],
            payload=json.loads(row[6]),
            batch_id=row[7],
            intent_at_ms=row[8],
            result=row[9],
            detail=row[10],
            outcome_at_ms=row[11],
            writer=row[12],
        )

    def get(self, decision_id: str) -> JournalEntry | None:
        with self._lock:
            row = self._conn.execute(
                f"SELECT {self._columns} FROM actions WHERE decision_id = ?", (decision_id,)
            ).fetchone()
        return self._row(row)

    def record_intent(
        self,
        *,
        decision_id: str,
        kind: str,
        cluster: str,
        namespace: str,
        target: str,
        action_key: str,
        payload: dict[str, Any],
        batch_id: str | None,
        at_ms: int,
    ) -> bool:
        """Commit the intent; False (and nothing written) when the decision is already known."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                cursor = self._conn.execute(
                    "INSERT OR IGNORE INTO actions (decision_id, kind, cluster, namespace, "
                    "target, action_key, payload, batch_id, intent_at_ms, writer) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        decision_id,
                        kind,
                        cluster,
                        namespace,
                        target,
                        action_key,
                        json.dumps(payload, sort_keys=True, default=str),
                        batch_id,
                        at_ms,
                        self.writer_id,
                    ),
                )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            return cursor.rowcount == 1

    def record_outcome(self, decision_id: str, *, result: str, detail: str, at_ms: int) -> None:
        with self._lock:
            self._conn.execute(
                "UPDATE actions SET result = ?, detail = ?, outcome_at_ms = ? "
                "WHERE decision_id = ?",
                (result, detail, at_ms, decision_id),
            )

    def claim(self, entry: JournalEntry) -> bool:
        """May this process settle `entry`? Yes when it wrote it; when its writer is gone
        (or unnamed: an old journal), only if this process takes it over first: the takeover
        is a compare-and-set on the writer, so of two processes finding the same writer gone
        one settles it. No while its writer runs (its action may be in flight)."""
        if self.writers is None:
            return False
        if entry.writer == self.writer_id:
            return True
        if self.writers.alive(entry.writer):
            return False
        with self._lock:
            cursor = self._conn.execute(
                "UPDATE actions SET writer = ? WHERE decision_id = ? AND writer IS ?",
                (self.writer_id, entry.decision_id, entry.writer),
            )
        taken = cursor.rowcount == 1
        if taken:
            log.info(
                "journal: %s %s of writer %s (gone) taken over by %s", entry.kind,
                entry.decision_id, entry.writer or "unnamed (an older journal)", self.writer_id,
            )  # fmt: skip
        return taken

    def add_to_payload(self, decision_id: str, **fields: Any) -> None:
        """Merge `fields` into the entry's payload (what a recheck must know of the call)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                row = self._conn.execute(
                    "SELECT payload FROM actions WHERE decision_id = ?", (decision_id,)
                ).fetchone()
                if row is not None:
                    payload = {**json.loads(row[0]), **fields}
                    self._conn.execute(
                        "UPDATE actions SET payload = ? WHERE decision_id = ?",
                        (json.dumps(payload, sort_keys=True, default=str), decision_id),
                    )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def last_moves(self, cluster: str) -> dict[str, int]:
        """Bundle name (`tenant/ns/0x.._0x..`) -> when its last move was sent (ms), for the
        move decision's grace period. Counts every move sent that unloaded the bundle or may
        have: applied, landed elsewhere, unknown, failed (erring on the side of not moving
        a bundle again soon), and intents still open; not stale, dry-run or gated ones."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT target, MAX(intent_at_ms) FROM actions WHERE kind = 'move' "
                "AND cluster = ? AND (result IS NULL OR result IN "
                "('applied', 'landed_elsewhere', 'unknown', 'failed')) GROUP BY target",
                (cluster,),
            ).fetchall()
        return {str(target): int(at_ms) for target, at_ms in rows}

    def move_counts_since(self, cluster: str, since_ms: int) -> dict[str, int]:
        """Bundle name -> how many moves of it were sent since `since_ms` (counted as
        `last_moves` counts them), for a roll's limit of moves per bundle."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT target, COUNT(*) FROM actions WHERE kind = 'move' "
                "AND cluster = ? AND intent_at_ms >= ? AND (result IS NULL OR result IN "
                "('applied', 'landed_elsewhere', 'unknown', 'failed')) GROUP BY target",
                (cluster, since_ms),
            ).fetchall()
        return {str(target): int(count) for target, count in rows}

    def pending(self) -> list[JournalEntry]:
        """Intents with no outcome: a crash happened between the call and its record."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {self._columns} FROM actions WHERE result IS NULL ORDER BY intent_at_ms"
            ).fetchall()
        return [e for e in (self._row(r) for r in rows) if e is not None]

    def unknown(self) -> list[JournalEntry]:
        """Actions sent without an answer whose effect Pulsar did not show yet (to recheck)."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {self._columns} FROM actions WHERE result = 'unknown' "
                "ORDER BY intent_at_ms"
            ).fetchall()
        return [e for e in (self._row(r) for r in rows) if e is not None]

    def started(self) -> list[JournalEntry]:
        """Offloads Pulsar accepted and runs: followed until SUCCESS or ERROR."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {self._columns} FROM actions WHERE result = 'started' "
                "ORDER BY intent_at_ms"
            ).fetchall()
        return [e for e in (self._row(r) for r in rows) if e is not None]

    def has_unsettled(self) -> bool:
        """Any intent without outcome, `unknown` or `started` outcome: something to check in
        Pulsar."""
        with self._lock:
            # One query per partial index: each stays an index lookup as the journal grows.
            return any(
                self._conn.execute(f"SELECT 1 FROM actions WHERE {where} LIMIT 1").fetchone()
                for where in ("result IS NULL", "result = 'unknown'", "result = 'started'")
            )

    def applied_with_key(self, action_key: str) -> JournalEntry | None:
        """An earlier decision that already did exactly this action (or may have: pending,
        unknown or started)."""
        with self._lock:
            row = self._conn.execute(
                f"SELECT {self._columns} FROM actions WHERE action_key = ? "
                "AND (result IN ('applied', 'unknown', 'started') OR result IS NULL) "
                "ORDER BY intent_at_ms LIMIT 1",
                (action_key,),
            ).fetchone()
        return self._row(row)

    def unsettled_for(self, kind: str, target: str) -> JournalEntry | None:
        """An earlier action on this bundle or topic whose outcome is not known (pending,
        unknown, or an offload still started): any new action there waits until it settles."""
        with self._lock:
            row = self._conn.execute(
                f"SELECT {self._columns} FROM actions WHERE kind = ? AND target = ? "
                "AND (result IN ('unknown', 'started') OR result IS NULL) "
                "ORDER BY intent_at_ms LIMIT 1",
                (kind, target),
            ).fetchone()
        return self._row(row)

    def entries(self) -> list[JournalEntry]:
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {self._columns} FROM actions ORDER BY intent_at_ms, decision_id"
            ).fetchall()
        return [e for e in (self._row(r) for r in rows) if e is not None]

    def batch_handled(self, batch_id: str) -> bool:
        with self._lock:
            row = self._conn.execute(
                "SELECT 1 FROM batches WHERE batch_id = ?", (batch_id,)
            ).fetchone()
        return row is not None

    def mark_batch(self, batch_id: str, *, at_ms: int) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR IGNORE INTO batches (batch_id, handled_at_ms) VALUES (?, ?)",
                (batch_id, at_ms),
            )
