"""Reading a YAML file for a config or scenario: one clear error for each way it can fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def read_text(path: str | Path) -> str:
    """The file's UTF-8 text; ValueError naming the file when it is not text (OSError as is)."""
    p = Path(path)
    data = p.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{p}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


def read_yaml(path: str | Path, error: type[Exception], what: str) -> Any:
    """The parsed document; `error("<path>: ...")` when the file is unreadable or not YAML."""
    p = Path(path)
    try:
        text = read_text(p)
    except OSError as exc:
        raise error(f"{p}: cannot read {what}: {exc.strerror}") from None
    except ValueError as exc:
        raise error(f"{p}: cannot read {what}: {str(exc).removeprefix(f'{p}: ')}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise error(f"{p}: not valid YAML: {exc}") from None
