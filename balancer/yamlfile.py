"""Reading a YAML file for a config or scenario: one clear error for each way it can fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def read_yaml(path: str | Path, error: type[Exception], what: str) -> Any:
    """The parsed document; `error("<path>: ...")` when the file is unreadable or not YAML."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{p}: cannot read {what}: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise error(f"{p}: not valid YAML: {exc}") from None
