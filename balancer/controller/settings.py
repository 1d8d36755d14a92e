"""What the controller is told: dry-run or apply, which namespaces it may touch, and its timings."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Literal

Mode = Literal["dry-run", "apply"]


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    mode: Mode = "dry-run"
    allow_namespaces: tuple[str, ...] = ("*",)
    deny_namespaces: tuple[str, ...] = ()
    unload_after_split: bool = True
    # How long after the call an unanswered action that Pulsar does not show is taken as
    # never applied (`failed`); before that it stays `unknown`, as it may still be in flight.
    unknown_settle_s: float = 60.0
    # How long a started offload is followed (its status read each batch) before one still
    # RUNNING is given up on and recorded `failed` (Pulsar refuses a new one with 409 while it
    # runs on). Offloads of a few GiB to object storage take minutes.
    offload_follow_s: float = 1800.0
    # How long after its unload a moved bundle that no broker owns (the modular load
    # manager's 204 comes before anyone owns it; the next lookup places it) stays `unknown`
    # before it is taken as `failed`.
    move_settle_s: float = 300.0

    def allows(self, namespace: str) -> bool:
        """Allow-listed and not deny-listed (fnmatch globs over `tenant/namespace`)."""
        allowed = any(fnmatch.fnmatchcase(namespace, p) for p in self.allow_namespaces)
        denied = any(fnmatch.fnmatchcase(namespace, p) for p in self.deny_namespaces)
        return allowed and not denied
