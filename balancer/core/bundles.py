"""Namespace bundles: hash ranges, Pulsar's text form, initial layouts, lookup and split.

A bundle is `[lower, upper)`, except the last one of a namespace, whose upper bound
`0xffffffff` is inclusive. Purely computational, with no side effects.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise
from typing import Any

from balancer.core.hashing import FULL_LOWER, FULL_UPPER

_RANGE_TEXT = re.compile(r"^0x([0-9a-fA-F]{8})_0x([0-9a-fA-F]{8})$")
_BOUNDARY_TEXT = re.compile(r"^0x[0-9a-fA-F]{1,8}$")


class InvalidBundle(ValueError):
    """A bundle range, layout or split that Pulsar would not accept."""


def format_position(position: int) -> str:
    return f"0x{position:08x}"


def parse_position(text: str | int) -> int:
    """A boundary as `0x...` hex text or a decimal number/int."""
    if isinstance(text, bool):
        raise InvalidBundle(f"invalid hash position {text!r}")
    if isinstance(text, int):
        value = text
    elif isinstance(text, str) and _BOUNDARY_TEXT.match(text.strip()):
        value = int(text.strip(), 16)
    elif isinstance(text, str) and text.strip().isascii() and text.strip().isdigit():
        value = int(text.strip())
    else:
        raise InvalidBundle(f"invalid hash position {text!r} (expected 0x%08x hex or a decimal)")
    if not FULL_LOWER <= value <= FULL_UPPER:
        raise InvalidBundle(f"hash position {value} is outside 0x00000000..0xffffffff")
    return value


@dataclass(frozen=True, slots=True, order=True)
class BundleRange:
    lower: int
    upper: int

    def __post_init__(self) -> None:
        if not (FULL_LOWER <= self.lower < self.upper <= FULL_UPPER):
            raise InvalidBundle(
                f"bundle range {self.lower:#x}..{self.upper:#x} must satisfy "
                "0x00000000 <= lower < upper <= 0xffffffff"
            )

    @classmethod
    def parse(cls, text: str) -> BundleRange:
        match = _RANGE_TEXT.match(text.strip()) if isinstance(text, str) else None
        if match is None:
            raise InvalidBundle(f"invalid bundle range {text!r} (expected 0x%08x_0x%08x)")
        return cls(int(match.group(1), 16), int(match.group(2), 16))

    @classmethod
    def full(cls) -> BundleRange:
        return cls(FULL_LOWER, FULL_UPPER)

    @property
    def is_last(self) -> bool:
        """The last bundle of a namespace is closed at 0xffffffff."""
        return self.upper == FULL_UPPER

    @property
    def width(self) -> int:
        return self.upper - self.lower

    @property
    def splittable(self) -> bool:
        """Pulsar cannot split a bundle with `upper - lower <= 1`."""
        return self.upper - self.lower > 1

    def contains(self, position: int) -> bool:
        return self.lower <= position < self.upper or (self.is_last and position == FULL_UPPER)

    def strictly_inside(self, position: int) -> bool:
        return self.lower < position < self.upper

    def key(self, namespace: str) -> str:
        """Pulsar's bundle key, `tenant/ns/0x..._0x...`."""
        return f"{namespace}/{self}"

    def __str__(self) -> str:
        return f"0x{self.lower:08x}_0x{self.upper:08x}"


@lru_cache(maxsize=1 << 16)
def _ranges(boundaries: tuple[int, ...]) -> tuple[BundleRange, ...]:
    """The bundles between `boundaries`, made once per layout (a replay asks for them for
    every namespace of every policy in every window; `BundleRange` is immutable)."""
    return tuple(BundleRange(lo, hi) for lo, hi in pairwise(boundaries))


def initial_boundaries(num_bundles: int) -> tuple[int, ...]:
    """Pulsar's initial layout: step 2^32 / n, the last boundary forced to 0xffffffff."""
    if num_bundles < 1:
        raise InvalidBundle(f"number of bundles must be >= 1, got {num_bundles}")
    if num_bundles > FULL_UPPER:
        raise InvalidBundle(f"number of bundles {num_bundles} is larger than the hash range")
    step = (FULL_UPPER + 1) // num_bundles
    return (*(i * step for i in range(num_bundles)), FULL_UPPER)


@dataclass(frozen=True, slots=True)
class NamespaceBundles:
    """A namespace's bundle layout: n+1 strictly increasing boundaries from 0 to 0xffffffff."""

    namespace: str
    boundaries: tuple[int, ...]

    def __post_init__(self) -> None:
        b = self.boundaries
        if len(b) < 2:
            raise InvalidBundle(f"{self.namespace}: a layout needs at least 2 boundaries")
        if b[0] != FULL_LOWER or b[-1] != FULL_UPPER:
            raise InvalidBundle(
                f"{self.namespace}: boundaries must start at 0x00000000 and end at 0xffffffff"
            )
        if any(x >= y for x, y in pairwise(b)):
            raise InvalidBundle(f"{self.namespace}: boundaries must be strictly increasing")

    @classmethod
    def initial(cls, namespace: str, num_bundles: int = 4) -> NamespaceBundles:
        return cls(namespace, initial_boundaries(num_bundles))

    @classmethod
    def from_boundaries(cls, namespace: str, boundaries: Iterable[str | int]) -> NamespaceBundles:
        return cls(namespace, tuple(parse_position(x) for x in boundaries))

    @classmethod
    def from_json(cls, namespace: str, body: dict[str, Any]) -> NamespaceBundles:
        """From Pulsar's `{"boundaries": [...], "numBundles": n}`."""
        layout = cls.from_boundaries(namespace, body["boundaries"])
        if "numBundles" in body and body["numBundles"] != layout.num_bundles:
            raise InvalidBundle(
                f"{namespace}: numBundles {body['numBundles']} does not match "
                f"{len(layout.boundaries)} boundaries"
            )
        return layout

    def to_json(self) -> dict[str, Any]:
        return {
            "boundaries": [format_position(x) for x in self.boundaries],
            "numBundles": self.num_bundles,
        }

    @property
    def num_bundles(self) -> int:
        return len(self.boundaries) - 1

    @property
    def bundles(self) -> list[BundleRange]:
        return list(_ranges(self.boundaries))

    def find(self, position: int) -> BundleRange:
        """The bundle holding a hash position: the greatest boundary <= position."""
        if not FULL_LOWER <= position <= FULL_UPPER:
            raise InvalidBundle(f"hash position {position} is outside the hash range")
        i = bisect.bisect_right(self.boundaries, position) - 1
        i = min(i, self.num_bundles - 1)  # 0xffffffff belongs to the last bundle
        return BundleRange(self.boundaries[i], self.boundaries[i + 1])

    def has(self, bundle: BundleRange) -> bool:
        i = bisect.bisect_left(self.boundaries, bundle.lower)
        return (
            i < self.num_bundles
            and self.boundaries[i] == bundle.lower
            and self.boundaries[i + 1] == bundle.upper
        )

    def split(
        self, bundle: BundleRange, boundaries: Sequence[int]
    ) -> tuple[NamespaceBundles, list[BundleRange]]:
        """Replace `bundle` by its k+1 children; the new layout and the children."""
        if not self.has(bundle):
            raise InvalidBundle(f"{self.namespace}: no bundle {bundle}")
        if not boundaries:
            raise InvalidBundle("split boundaries can't be empty")
        inner = sorted(set(boundaries))
        outside = [x for x in inner if not bundle.strictly_inside(x)]
        if outside:
            raise InvalidBundle(
                f"split boundaries {[format_position(x) for x in outside]} are not strictly "
                f"inside bundle {bundle}"
            )
        points = [bundle.lower, *inner, bundle.upper]
        children = [BundleRange(lo, hi) for lo, hi in pairwise(points)]
        new = tuple(sorted({*self.boundaries, *inner}))
        return NamespaceBundles(self.namespace, new), children
