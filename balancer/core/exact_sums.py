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
from itertools import chain, pairwise

import numpy as np


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


# Past these, `grouped_exact_parts` leaves the numpy path (see there).
_MAX_GROUP_VALUES = 2**26
_MIN_EXPONENT, _MAX_EXPONENT = -900, 1000


def grouped_exact_parts(values: np.ndarray, bounds: Sequence[int]) -> list[tuple[float, ...]]:
    """`exact_parts` of each group `values[bounds[i]:bounds[i + 1]]`, added up in numpy.

    The parts depend only on a group's exact sum, so they are those of `exact_parts`. Each
    value is m * 2**(e - 53) with an integer |m| < 2**53 (`frexp`), split as
    high * 2**27 + low; per (group, e) the highs and the lows are added as floats, which is
    exact because every partial sum is an integer below 2**53 (a group adds at most 2**26
    values). The few scaled sums per group then go through `exact_parts`. Values outside
    that range (or groups larger) take `exact_parts` directly.
    """
    values = np.asarray(values, dtype=np.float64)
    sizes: np.ndarray = np.diff(np.asarray(bounds, dtype=np.int64))
    n_groups = len(sizes)
    mantissas, exponents = np.frexp(values)
    nonzero = mantissas != 0
    if not nonzero.any():
        return [()] * n_groups
    used = exponents[nonzero]
    e_min, e_max = int(used.min()), int(used.max())
    span = e_max - e_min + 1
    if (
        not np.isfinite(values).all()
        or e_min < _MIN_EXPONENT  # parts could be subnormal (scaling would round them)
        or e_max > _MAX_EXPONENT  # or overflow
        or int(sizes.max()) > _MAX_GROUP_VALUES
        or n_groups * span > max(1 << 20, 4 * len(values))  # too sparse for bins
    ):
        return [exact_parts(values[a:b].tolist()) for a, b in pairwise(bounds)]
    scaled = mantissas * 2.0**53  # integers, |m| < 2**53
    high = np.floor(scaled / 2.0**27)
    low = scaled - high * 2.0**27  # in [0, 2**27)
    exponents = np.where(nonzero, exponents, e_min)  # a zero adds 0 to any bin
    bins = np.repeat(np.arange(n_groups) * span, sizes) + (exponents - e_min)
    powers = np.arange(e_min, e_max + 1) - 53
    sums = [
        np.ldexp(
            np.bincount(bins, weights=half, minlength=n_groups * span).reshape(n_groups, span),
            powers + shift,
        )
        for half, shift in ((high, 27), (low, 0))
    ]
    out: list[tuple[float, ...]] = []
    for high_row, low_row in zip(*sums, strict=True):
        parts = [*high_row[high_row != 0].tolist(), *low_row[low_row != 0].tolist()]
        out.append(exact_parts(parts))
    return out


def total(parts: Iterable[Iterable[float]]) -> float:
    """The correctly rounded sum of every value whose `exact_parts` are given."""
    return math.fsum(chain.from_iterable(parts))


__all__ = ["exact_parts", "exact_sum", "grouped_exact_parts", "total"]
