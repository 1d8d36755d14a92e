"""What `replay` prints by default: the table per policy and the hours that differ."""

from __future__ import annotations

import dataclasses

from balancer.core.replay.result import (
    POLICY_PULSAR_TRANSFER,
    POLICY_PULSAR_UNIFORM,
    ReplayResult,
)
from balancer.ops.replay_report import render_text
from balancer.ops.replay_report.text import format_duration, format_time
from tests.ops.replay_report.samples import T0, small_result


def rows(text: str) -> dict[str, list[str]]:
    """Table row label -> its cells (labels are the text before two spaces and a value)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        label, _, cells = line.rstrip().partition("   ")
        if cells.strip():
            out[label.strip()] = cells.split()
    return out


def test_the_table_has_a_column_per_policy_with_the_hand_worked_figures() -> None:
    text = render_text(small_result())
    table = rows(text)
    assert table["splits"] == ["1", "0"]
    assert table["moves"] == ["1", "1"]
    assert table["offloads"] == ["0", "1"]
    assert table["sessions moved"] == ["40", "120"]
    assert table["bundle-minutes over limits"] == ["2.0", "4.0"]
    assert table["broker-minutes at/over 85 %"] == ["2.0", "4.0"]
    assert table["peak broker load"] == ["90%", "95%"]
    assert table["bundle overloads"] == ["1", "1"]
    assert table["first action, median"] == ["1m00s", "3m00s"]
    header = text.splitlines()[text.splitlines().index("") + 4 :][:3]
    assert [h.split() for h in header] == [
        ["pulsar-"],
        ["modular-"],
        ["policy", "ours", "threshold"],
    ]


def test_the_head_says_what_was_replayed_and_what_was_rejected() -> None:
    lines = render_text(small_result()).splitlines()
    assert lines[0] == (
        "Replay of /recordings/east-2025-11-25: 2025-11-24 16:01Z .. 2025-11-24 16:06Z, "
        "6 windows of 60 s, clusters east"
    )
    assert lines[1] == "1,200 topics, 7,200 samples (3 rejected, 2 late)"
    assert lines[2] == "  rejected, bad_json: 3"
    assert "pulsar-modular-threshold: ThresholdShedder + range_equally_divide (defaults)" in lines


def test_the_hours_that_differ_come_last_with_each_policy_figures() -> None:
    lines = render_text(small_result()).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Hours where"))
    assert lines[start + 2 :] == [
        "  2025-11-24 16:00Z  score 4.0",
        "    ours                         broker-min    2.0  bundle-min    2.0  actions    2",
        "    pulsar-modular-threshold     broker-min    4.0  bundle-min    4.0  actions    2",
    ]


def test_one_policy_alone_says_there_is_nothing_to_compare() -> None:
    alone = dataclasses.replace(small_result(), runs=small_result().runs[:1])
    assert "only one policy ran" in render_text(alone)


def four_policies() -> ReplayResult:
    result = small_result()
    extra = [
        dataclasses.replace(result.runs[1], policy=name)
        for name in (POLICY_PULSAR_UNIFORM, POLICY_PULSAR_TRANSFER)
    ]
    return dataclasses.replace(result, runs=(*result.runs, *extra))


def test_the_table_of_the_four_default_policies_fits_80_columns() -> None:
    text = render_text(four_policies())
    table = [line for line in text.splitlines() if line.startswith(("splits", "policy", "---"))]
    assert len(table) == 3
    assert max(len(line) for line in table) <= 80
    assert rows(text)["moves"] == ["1", "1", "1", "1"]


def test_durations_and_times_read_at_a_glance() -> None:
    assert [format_duration(s) for s in (None, 0, 59.4, 120, 3599, 3600 + 5 * 60)] == [
        "-",
        "0s",
        "59s",
        "2m00s",
        "59m59s",
        "1h05m",
    ]
    assert format_time(T0) == "2025-11-24 16:00Z"
    assert format_time(T0 + 1500) == "2025-11-24 16:00:01Z"
