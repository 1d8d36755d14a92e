"""A plan's age is checked when it is read, again once approved, and before each action
(issue 41, point 14); a plan stamped in the future beyond a small skew is refused. Time is
injected (`clock_ms`): nothing sleeps."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from balancer.app.cli import build_parser
from balancer.app.commands.apply import apply_command
from balancer.core.plan_document import PLAN_CLOCK_SKEW_S
from balancer.sim import start_peer_group
from tests.app.test_apply import HOT, Rig


class Clock:
    """Wall-clock ms as apply sees it: real time plus `offset_s` (moved by the test)."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def __call__(self) -> int:
        return time.time_ns() // 1_000_000 + round(self.offset_s * 1000)


@pytest.fixture
def hot(tmp_path: Path) -> Iterator[Rig]:
    with start_peer_group(HOT) as group:
        yield Rig(group, tmp_path, plan_max_age_s=900)


def run_apply(
    rig: Rig, clock: Clock, capsys: pytest.CaptureFixture[str], *extra: str, **kw: Any
) -> tuple[int, dict[str, Any]]:
    args = build_parser().parse_args(
        ["apply", str(rig.plan), "--config", str(rig.config), "-o", "json", *extra]
    )
    code = apply_command(args, sleep=rig.group.clock.advance, clock_ms=clock, **kw)
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else {"stderr": err})


def test_a_yes_three_hours_later_applies_nothing(
    hot: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    hot.save(capsys)
    clock = Clock()

    def late_yes(question: str) -> str:
        clock.offset_s += 3 * 3600 + 60  # the operator came back from lunch
        return "yes"

    code, report = run_apply(hot, clock, capsys, ask=late_yes, is_tty=lambda: True)
    assert code == 3, report
    assert "expired" in report["message"] and "when approved" in report["message"]
    assert "plan_max_age_s (900 s)" in report["message"]
    assert hot.group.splits() == [] and hot.group.model.brokers.moves == []


def test_an_action_reached_after_the_plan_expired_is_not_sent(
    hot: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    """The split goes out at once; the clock then passes plan_max_age_s (a slow premise read,
    a long rate-limit wait): the move after it is `expired`, not sent."""
    doc = hot.save(capsys)
    assert [a["kind"] for a in doc["actions"]] == ["split", "move"]
    base = Clock()

    def clock() -> int:
        # 1000 s later once the split reached the simulator.
        return base() + (1_000_000 if hot.group.splits() else 0)

    args = build_parser().parse_args(
        ["apply", str(hot.plan), "--config", str(hot.config), "--yes", "-o", "json"]
    )
    code = apply_command(args, sleep=hot.group.clock.advance, clock_ms=clock)
    report = json.loads(capsys.readouterr().out)
    statuses = {i["id"]: i["status"] for i in report["items"]}
    assert code == 3, report
    assert statuses == {"split-1": "applied", "move-1": "expired"}
    (move,) = [i for i in report["items"] if i["id"] == "move-1"]
    assert "plan_max_age_s" in move["detail"]
    assert len(hot.group.splits()) == 1 and hot.group.model.brokers.moves == []
    assert report["counts"]["expired"] == 1


def test_a_plan_stamped_in_the_future_is_refused(
    hot: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    hot.save(capsys)
    clock = Clock()
    clock.offset_s = -(PLAN_CLOCK_SKEW_S + 3600)  # this host's clock is an hour behind
    code, report = run_apply(hot, clock, capsys, "--yes")
    assert code == 2, report
    assert "ahead of this host's clock" in report["message"]
    assert hot.group.splits() == []
    # Within the skew it is applied.
    clock.offset_s = -PLAN_CLOCK_SKEW_S / 2
    code, report = run_apply(hot, clock, capsys, "--yes")
    assert code == 0, report
