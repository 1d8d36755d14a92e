"""The replay report, from a `ReplayResult` alone: text (what `replay` prints), JSON
(`--output json`, versioned, reads back with `from_json`) and one self-contained HTML page
(`write_html`). The figures are `balancer.core.replay.summary`'s."""

from balancer.ops.replay_report.document import (
    ReplayReportError,
    ReportDocument,
    from_json,
    to_document,
    to_json,
)
from balancer.ops.replay_report.page import render_html, write_html
from balancer.ops.replay_report.text import render_text

__all__ = [
    "ReplayReportError",
    "ReportDocument",
    "from_json",
    "render_html",
    "render_text",
    "to_document",
    "to_json",
    "write_html",
]
