"""Sizes as pulsar-admin spells them: K/M/G/T are powers of 1024."""

from __future__ import annotations

import pytest

from balancer.core.sizes import InvalidSize, format_size, parse_size

SIZES = [
    ("0", 0),
    ("1024", 1024),
    ("10M", 10 * 1024**2),
    ("5G", 5 * 1024**3),
    ("5g", 5 * 1024**3),
    ("1k", 1024),
    ("2T", 2 * 1024**4),
    ("1.5G", 3 * 1024**3 // 2),
    ("0.5K", 512),
    (".5K", 512),
    ("1.1T", 1209462790553),  # exact decimal: 1.1 x 2^40 rounded down
    (" 10M ", 10 * 1024**2),
]


@pytest.mark.parametrize(("text", "size"), SIZES, ids=[s for s, _ in SIZES])
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


BAD = ["", "M", "-1", "-1M", "10MB", "10 M", "1e3", "ten", "1.", "10P", "1,5G"]


@pytest.mark.parametrize("text", BAD, ids=repr)
def test_invalid_sizes(text: str) -> None:
    with pytest.raises(InvalidSize, match="invalid size"):
        parse_size(text)


def test_non_string() -> None:
    with pytest.raises(InvalidSize, match="must be a string"):
        parse_size(10)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1536, "1.5 KiB"),
        (10 * 1024**2, "10.0 MiB"),
        (5 * 1024**4, "5.0 TiB"),
    ],
    ids=str,
)
def test_format_size(size: int, text: str) -> None:
    assert format_size(size) == text
