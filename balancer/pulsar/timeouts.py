"""Per-attempt time limits of admin calls."""

from __future__ import annotations

import math
from dataclasses import dataclass

import httpx


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Per-attempt limits on every call, in seconds."""

    connect_s: float = 3.0
    read_s: float = 15.0
    write_s: float = 15.0
    pool_s: float = 5.0

    def __post_init__(self) -> None:
        for name in ("connect_s", "read_s", "write_s", "pool_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"timeout {name} must be a finite number > 0, got {value}")

    def httpx(self) -> httpx.Timeout:
        return httpx.Timeout(
            connect=self.connect_s, read=self.read_s, write=self.write_s, pool=self.pool_s
        )
