"""The report page in a real browser: Debian's headless Chromium loads the file, and its DOM
and a screenshot are checked. Outside CI a machine without Chromium skips (and says why);
in CI (.ci/install-tools installs it) a missing Chromium fails."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

from balancer.ops.replay_report import write_html
from tests.ops.replay_report.dom import read_page
from tests.ops.replay_report.samples import day_result, small_result

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and os.environ.get("CI") != "true",
    reason="chromium not installed (Debian package chromium: .ci/install-tools)",
)
pytestmark = [pytest.mark.browser, needs_chromium]

# Chromium on its own: no network, no GPU, no sandbox (root in a container), a fresh profile.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def chromium(tmp_path: Path, page: Path, *args: str) -> str:
    assert CHROMIUM is not None, "chromium is not installed: .ci/install-tools installs it"
    done = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=180,  # a hung browser fails the test rather than the whole run
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_chromium_builds_one_timeline_per_policy_with_every_action_mark(tmp_path: Path) -> None:
    result = day_result(brokers=30, windows=1440, actions_per_policy=45)
    page = tmp_path / "report.html"
    write_html(result, page)
    dom = read_page(chromium(tmp_path, page, "--dump-dom"))
    assert [t.policy for t in dom.timelines] == [run.policy for run in result.runs]
    for timeline, run in zip(dom.timelines, result.runs, strict=True):
        assert timeline.marks == Counter(a.kind.value for a in run.actions)
        assert sum(timeline.marks.values()) == 45
        assert len(timeline.lines) == 30


def near(colour: tuple[int, int, int], want: str, tolerance: int = 24) -> bool:
    rgb = tuple(int(want[i : i + 2], 16) for i in (1, 3, 5))
    return all(abs(a - b) <= tolerance for a, b in zip(colour, rgb, strict=True))


def test_the_screenshot_shows_lines_marks_and_shading(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    write_html(small_result(), page)
    shot = tmp_path / "report.png"
    chromium(tmp_path, page, f"--screenshot={shot}", "--window-size=1300,1500")
    with Image.open(shot) as image:
        assert image.size == (1300, 1500)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 24)
    assert colours is not None and len(colours) > 50, "the screenshot is (nearly) one colour"

    def pixels(want: str, tolerance: int = 24) -> int:
        return sum(count for count, colour in colours if near(colour, want, tolerance))

    assert pixels("#d62728") > 100  # the dashed 85 % lines
    assert pixels("#2ca02c") > 10  # ours' split triangle (no broker line is green)
    assert pixels("#9467bd") > 10  # pulsar's offload square (nor purple)
    assert pixels("#ff7f0e") > 200  # b2's lines and the bundle strips
    # The overload shading: 12 % of #d62728 over the plot's #fafafa is #f6e1e1.
    assert pixels("#f6e1e1", tolerance=6) > 10_000
