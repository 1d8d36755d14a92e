"""`apply` killed (SIGKILL) while its split call is in flight, then applied again: the open
intent is reconciled from Pulsar's state, never re-sent; nothing is applied twice."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from balancer.sim import start_peer_group
from tests.app.test_apply import HOT, Rig

pytestmark = pytest.mark.e2e  # a real process, killed

LATENCY_S = 3.0


def open_intents(journal: Path) -> int:
    if not journal.exists():
        return 0
    try:
        with sqlite3.connect(f"{journal.resolve().as_uri()}?mode=ro", uri=True) as conn:
            return int(
                conn.execute("SELECT COUNT(*) FROM actions WHERE result IS NULL").fetchone()[0]
            )
    except sqlite3.OperationalError:  # the schema is being created
        return 0


def test_apply_killed_mid_call_then_again_applies_nothing_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with start_peer_group(HOT) as group:
        rig = Rig(group, tmp_path)
        doc = rig.save(capsys)
        assert [a["id"] for a in doc["actions"]][:1] == ["split-1"]
        # Every PUT (the split, the unload) takes LATENCY_S: the kill lands while one is sent.
        group.faults.configure(latency_s=LATENCY_S, only_methods=("PUT",))
        child = subprocess.Popen(
            [sys.executable, "-m", "balancer.app.cli", "apply", str(rig.plan),
             "--config", str(rig.config), "--yes", "--settle-s", "0"],
            env={**os.environ, "PYTHONPATH": os.getcwd()},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        journal = tmp_path / "journal.sqlite3"
        deadline = time.monotonic() + 20
        while open_intents(journal) == 0 and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        assert open_intents(journal) == 1
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        assert child.returncode == -signal.SIGKILL
        time.sleep(LATENCY_S + 0.5)  # the broker finishes the call the killed apply sent
        group.faults.clear()
        assert len(group.splits()) == 1

        code, report = rig.apply(capsys)
        moves_after = [(m.namespace, str(m.bundle)) for m in group.model.brokers.moves]
        splits_after = group.splits()
        code_again, again = rig.apply(capsys)
        audit = [json.loads(line) for line in rig.audit.read_text().splitlines()]
    statuses = rig.statuses(report)
    assert code == 0, report
    assert statuses["split-1"] == "already_applied"  # reconciled: applied, not re-sent
    assert "reconciled" in next(i for i in report["items"] if i["id"] == "split-1")["detail"]
    assert len(splits_after) == 1
    assert len(moves_after) == len(set(moves_after)) == len(doc["actions"]) - 1
    assert code_again == 0 and set(rig.statuses(again).values()) == {"already_applied"}
    assert any(r.get("reconciled") and r["plan_id"] == doc["plan_id"] for r in audit)
