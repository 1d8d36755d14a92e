"""The audit log: one JSON object per line for every decision, its inputs, the action taken,
Pulsar's answer and the timing. Keys that could carry a secret are masked before writing.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

_SECRET_KEY = re.compile(r"token|password|secret|authorization|credential", re.IGNORECASE)
_BEARER = re.compile(r"(?i)bearer\s+[^\s\"',]+")
MASK = "***"


def scrub(value: object) -> object:
    """Mask values under secret-looking keys and any `Bearer <token>` text, recursively."""
    if isinstance(value, dict):
        return {
            str(k): (MASK if _SECRET_KEY.search(str(k)) else scrub(v)) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    if isinstance(value, str):
        return _BEARER.sub("Bearer " + MASK, value)
    return value


class AuditLog:
    """Append-only JSON lines; each record is flushed at once so a crash loses none."""

    def __init__(
        self,
        path: Path | None = None,
        *,
        stream: IO[str] | None = None,
        fields: Mapping[str, object] | None = None,
    ) -> None:
        if (path is None) == (stream is None):
            raise ValueError("give an audit log path or a stream")
        self.path = path
        # Added to every record (e.g. `plan_id` for the actions `apply PLAN` carries out).
        self._fields = dict(fields or {})
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._stream: IO[str] = path.open("a", encoding="utf-8")
            self._owned = True
        else:
            assert stream is not None
            self._stream = stream
            self._owned = False
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(scrub({**record, **self._fields}), sort_keys=True, default=str)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()

    def close(self) -> None:
        with self._lock:
            if self._owned and not self._stream.closed:
                self._stream.close()
