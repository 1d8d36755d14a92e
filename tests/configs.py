"""Config mappings for tests: a copy of a mapping with one dotted setting changed."""

from __future__ import annotations

import json
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
