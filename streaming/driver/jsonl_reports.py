"""Batch reports as JSON lines: a `BatchHandler` recording them, and their reader (dry runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from balancer.core.load import BundleLoad
from balancer.core.report import BatchReport


class JsonlReportHandler:
    """A `BatchHandler` appending every report as one JSON line (tests, dry runs).

    Replays append again with the same batch_id; a reader keeps the last line per batch_id.
    """

    def __init__(
        self, path: Path, *, offload_min_bytes: int | None = None, topics_for_all: bool = False
    ) -> None:
        self.path = path
        self.offload_min_bytes = offload_min_bytes
        self.topics_for_all = topics_for_all

    def wants_topics(self, bundle: BundleLoad) -> bool:
        return self.topics_for_all

    def handle(self, report: BatchReport) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(report.to_dict(), separators=(",", ":")) + "\n")
            out.flush()


def read_reports(path: Path) -> dict[int, dict[str, Any]]:
    """Reports written by `JsonlReportHandler`, the last one per batch_id."""
    out: dict[int, dict[str, Any]] = {}
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            obj = json.loads(line)
            out[int(obj["batch_id"])] = obj
    return out
