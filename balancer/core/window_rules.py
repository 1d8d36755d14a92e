"""The rules the stream's window settings must follow: one definition for the config and the stream.

Pure: the config checks them when it loads (so `validate-config` refuses what the stream
would), and the stream's `WindowSpec` checks them again when it is built.
"""

from __future__ import annotations

import math


class WindowRuleError(ValueError):
    """Window, slide, watermark or hit count that do not fit together; names the settings."""


def check_windows(window_s: int, slide_s: int, watermark_s: int, *, prefix: str = "") -> None:
    """Spark's sliding windows: lengths > 0, and the window a whole number of slides.

    `prefix` names the settings in the message (`spark.` in the config).
    """
    if window_s <= 0:
        raise WindowRuleError(f"{prefix}window_s ({window_s}) must be > 0")
    if slide_s <= 0:
        raise WindowRuleError(f"{prefix}slide_s ({slide_s}) must be > 0")
    if watermark_s < 0:
        raise WindowRuleError(f"{prefix}watermark_s ({watermark_s}) must be >= 0")
    if window_s % slide_s:
        raise WindowRuleError(
            f"{prefix}window_s ({window_s}) must be a multiple of {prefix}slide_s ({slide_s})"
        )


def windows_per_sample(window_s: int, slide_s: int) -> int:
    """How many overlapping windows hold one stats sample."""
    return math.ceil(window_s / slide_s)


def check_hit_count(hit_count: int, window_s: int, slide_s: int) -> None:
    """One sample lies in `window_s / slide_s` windows; if that reaches the hit count, a
    single one-minute spike would count as that many hits and split a bundle."""
    overlap = windows_per_sample(window_s, slide_s)
    if overlap >= hit_count:
        raise WindowRuleError(
            f"detection.hit_count_threshold ({hit_count}) must exceed spark.window_s / "
            f"spark.slide_s ({overlap}): one stats sample lies in {overlap} overlapping "
            "windows, so a single spike would count as that many hits"
        )
