"""Sums of floats that do not depend on how the values are grouped or ordered.

A bundle's load is the sum of its topics' rates. The stream computes it in parts (one per
PIP-157 bucket, on whichever executor holds the bucket) and the driver adds the parts up;
with plain float addition the result would depend on the grouping and differ in the last
bits from one deployment to the next. Here a sum is defined as the exact sum of the values,
rounded once (`math.fsum`), and a part is carried *exactly*, as a few non-overlapping floats
whose exact sum is the part's exact sum. Adding up parts with `total` then gives exactly
`math.fsum` of all the values, whatever the grouping.

Purely computational, with no side effects.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from itertools import chain


def exact_sum(values: Iterable[float]) -> float:
    """The exact sum of `values`, correctly rounded to a float."""
    return math.fsum(values)


def exact_parts(values: Sequence[float]) -> tuple[float, ...]:
    """Floats whose exact sum equals the exact sum of `values`, largest first.

    Each step takes the correctly rounded residual, so the remainder shrinks by at least
    2**-53 per step; it reaches exactly 0 because every float is a multiple of 2**-1074.
    Rates of real topics need one to three parts.
    """
    parts: list[float] = []
    while True:
        residual = math.fsum(chain(values, (-p for p in parts)))
        if residual == 0.0:
            return tuple(parts)
        parts.append(residual)


def total(parts: Iterable[Iterable[float]]) -> float:
    """The correctly rounded sum of every value whose `exact_parts` are given."""
    return math.fsum(chain.from_iterable(parts))


__all__ = ["exact_parts", "exact_sum", "total"]
