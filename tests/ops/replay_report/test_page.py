"""The HTML page, read as a DOM without a browser (test_browser.py renders it in one)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

from balancer.core.replay.result import PolicyRun, WindowSample
from balancer.ops.replay_report import render_html, write_html
from balancer.ops.replay_report.timeline import MAX_COLUMNS, columns
from tests.ops.replay_report.dom import read_page
from tests.ops.replay_report.samples import T0, day_result, small_result


def test_one_timeline_per_policy_with_a_mark_per_action() -> None:
    page = read_page(render_html(small_result()))
    assert page.sections == ["ours", "pulsar-modular-threshold"]
    assert [t.policy for t in page.timelines] == ["ours", "pulsar-modular-threshold"]
    ours, pulsar = page.timelines
    assert ours.marks == Counter(split=1, move=1)
    assert pulsar.marks == Counter(move=1, offload=1)
    assert len(ours.lines) == 2  # b1, b2
    # Shading: b1's one overload, and the hot bundle's strip, in each.
    assert (ours.overloads, ours.bundle_strips, pulsar.overloads) == (1, 1, 1)
    assert (
        "2025-11-24 16:04Z move east/tenant/ns/0x20000000_0x40000000: b1 -> b2; "
        "40 sessions moved (overloaded)"
    ) in ours.titles
    assert any(t.startswith("east/b1 (peak 90%)") for t in ours.titles)


def test_the_page_needs_nothing_from_outside() -> None:
    html = render_html(day_result(brokers=5, windows=120))
    page = read_page(html)
    assert "script" not in page.tags and "link" not in page.tags and "img" not in page.tags
    assert not [v for k, v in page.attributes if k in ("src", "href") and not v.startswith("#")]
    assert "http:" not in html and "https:" not in html and "url(" not in html
    assert page.tags["style"] == 1


def test_names_are_escaped() -> None:
    result = small_result()
    odd = dataclasses.replace(result.runs[0], policy='<b>"mine"</b>', description="a & b")
    html = render_html(dataclasses.replace(result, runs=(odd, result.runs[1])))
    assert "<b>" not in html
    assert read_page(html).timelines[0].policy == '<b>"mine"</b>'


def test_a_day_of_many_brokers_is_drawn_in_at_most_600_columns() -> None:
    result = day_result(brokers=40, windows=1440, actions_per_policy=90)
    page = read_page(render_html(result))
    for timeline in page.timelines:
        assert len(timeline.lines) == 40
        assert max(line.count("L") + line.count("M") for line in timeline.lines) <= MAX_COLUMNS
        assert sum(timeline.marks.values()) == 90  # every action keeps its mark
        assert timeline.gaps == 1
    # broker-00 at 110 % from window 800 to 899 (ours) or 999 (pulsar): one shaded stretch
    # each (the daily wave stays under 85 % at any time but its crest, about 21:00-22:00).
    assert [t.overloads for t in page.timelines] == [2, 2]


def test_downsampling_keeps_a_one_window_peak() -> None:
    windows = tuple(
        WindowSample(window_end_ms=T0 + i * 60_000, broker_load={"c/b": 1.5 if i == 777 else 0.2})
        for i in range(1440)
    )
    cols = columns(PolicyRun("p", "p", (), windows), window_s=60)
    assert len(cols) == MAX_COLUMNS
    assert [c.load["c/b"] for c in cols].count(1.5) == 1
    assert sum(c.brokers_over for c in cols) == 1
    assert cols[0].start_ms == T0 - 60_000 and cols[-1].end_ms == T0 + 1439 * 60_000


def test_write_html_writes_the_page(tmp_path: Path) -> None:
    path = tmp_path / "report.html"
    write_html(small_result(), path)
    assert path.read_text(encoding="utf-8") == render_html(small_result())
