"""Config mappings for tests: one fine on this machine, and a copy with one setting changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def with_setting(base: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A deep copy of `base` with `dotted` (`spark.window_s`, `clusters.0.token_file`) set."""
    data: dict[str, Any] = json.loads(json.dumps(base))
    node = data
    keys = dotted.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    node[keys[-1]] = value
    return data


def machine_ok_config(tmp_path: Path) -> dict[str, Any]:
    """A config whose every file and directory is fine on this machine (under `tmp_path`)."""
    return {
        "spark": {"checkpoint_dir": str(tmp_path / "state" / "checkpoints")},
        "clusters": [{"name": "c1", "admin_url": "http://127.0.0.1:9"}],
        "controller": {
            "journal_path": str(tmp_path / "state" / "journal.sqlite3"),
            "audit_log_path": str(tmp_path / "logs" / "audit.jsonl"),
        },
        "metrics": {"bind_address": "127.0.0.1", "port": 0},
    }
