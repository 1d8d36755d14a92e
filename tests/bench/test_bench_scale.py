"""The scale benchmark's own parts: the memory sampler and the pipeline's last line."""

from __future__ import annotations

import os
import subprocess
import sys

from bench.scale import LAST_LINE, tree_rss_bytes


def test_tree_rss_counts_children() -> None:
    alone = tree_rss_bytes(os.getpid())
    assert alone > 10 * 1024**2  # a Python interpreter with numpy & co. loaded
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        for _ in range(100):  # until the child has started and shows up
            if tree_rss_bytes(os.getpid()) > alone + 1024**2:
                break
            subprocess.run(["true"], check=True)
        assert tree_rss_bytes(os.getpid()) > alone + 1024**2
    finally:
        child.kill()
        child.wait()


def test_pipeline_last_line_is_parsed() -> None:
    m = LAST_LINE.match("events_per_s=101234.5 raw_events_per_s=150000.0 ratio=0.67")
    assert m is not None
    assert (float(m["job"]), float(m["raw"]), float(m["ratio"])) == (101234.5, 150000.0, 0.67)
    assert LAST_LINE.match("events_per_s=1 raw_events_per_s=2") is None
