"""Byte sizes as pulsar-admin spells them: `1024`, `10M`, `5G`, `1.5G`.

K/M/G/T (either case) are powers of 1024, as in pulsar-admin's `validateSizeString`. Unlike
pulsar-admin we also accept a fraction (`1.5G`), rounded down to whole bytes. Purely
computational, with no side effects.
"""

from __future__ import annotations

import re

_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SIZE = re.compile(r"^(\d+(?:\.\d+)?|\.\d+)([kKmMgGtT]?)$")


class InvalidSize(ValueError):
    """A size string that is not bytes or a number with a K/M/G/T suffix."""


def parse_size(text: str) -> int:
    """The number of bytes in `text`; `InvalidSize` naming the problem otherwise."""
    if not isinstance(text, str):
        raise InvalidSize(f"size must be a string, got {type(text).__name__}")
    match = _SIZE.match(text.strip())
    if match is None:
        raise InvalidSize(
            f"invalid size {text!r} (expected bytes or a number with K, M, G or T, e.g. 10M, 5G)"
        )
    number: str = match.group(1)
    unit: str = match.group(2)
    multiplier = _UNITS[unit.lower()]
    if "." in number:
        whole, _, fraction = number.partition(".")
        # Exact decimal arithmetic: 1.1T must not pick up binary floating-point error.
        scale: int = 10 ** len(fraction)
        return (int(whole or "0") * scale + int(fraction)) * multiplier // scale
    return int(number) * multiplier


def format_size(size_bytes: int) -> str:
    """A short human form (`10.0 MiB`) for tables."""
    value = float(size_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
