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
    terms = list(values)
    parts: list[float] = []
    while True:
        residual = math.fsum(terms)
        if residual == 0.0:
            return tuple(parts)
        parts.append(residual)
        terms.append(-residual)


# Past these, `grouped_exact_parts` leaves the numpy path (see there).
_MAX_GROUP_VALUES = 2**26
_MIN_EXPONENT, _MAX_EXPONENT = -900, 1000
# The (group, exponent) bins of one bincount: at least this many are fine (8 MiB of floats,
# twice), and up to 4 a value; more groups than that are binned in chunks of groups.
_MIN_BINS = 1 << 20


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
    starts = np.asarray(bounds, dtype=np.int64)
    sizes: np.ndarray = np.diff(starts)
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
    ):
        return [exact_parts(values[a:b].tolist()) for a, b in pairwise(bounds)]
    scaled = mantissas * 2.0**53  # integers, |m| < 2**53
    high = np.floor(scaled / 2.0**27)
    low = scaled - high * 2.0**27  # in [0, 2**27)
    bins = np.where(nonzero, exponents, e_min) - e_min  # a zero adds 0 to any bin
    # Chunks of groups whose bins stay within memory bounded by the values' own (one chunk
    # but where groups are many and their exponents far apart).
    chunk_groups = max(1, max(_MIN_BINS, 4 * len(values)) // span)
    out: list[tuple[float, ...]] = []
    for first in range(0, n_groups, chunk_groups):
        last = min(first + chunk_groups, n_groups)
        a, b = int(starts[first]), int(starts[last])
        out.extend(
            _binned_parts(
                values[a:b], high[a:b], low[a:b], bins[a:b], sizes[first:last], e_min, span
            )
        )
    return out


def _binned_parts(
    values: np.ndarray,
    high: np.ndarray,
    low: np.ndarray,
    bins: np.ndarray,
    sizes: np.ndarray,
    e_min: int,
    span: int,
) -> list[tuple[float, ...]]:
    """`grouped_exact_parts` of consecutive groups of `sizes` `values`, whose split mantissas
    are `high` and `low` and exponents `bins + e_min`."""
    n_groups = len(sizes)
    cells = np.repeat(np.arange(n_groups) * span, sizes) + bins
    powers = np.arange(e_min, e_min + span) - 53
    # Per group, the scaled sums of its highs then of its lows, in exponent order.
    sums = np.concatenate(
        [
            np.ldexp(
                np.bincount(cells, weights=half, minlength=n_groups * span).reshape(n_groups, span),
                powers + shift,
            )
            for half, shift in ((high, 27), (low, 0))
        ],
        axis=1,
    )
    # Nonzero sums at once (row by row, numpy calls per group were most of the time).
    kept = sums != 0
    counts = np.count_nonzero(kept, axis=1).tolist()
    flat = sums[kept].tolist()
    # The parts depend only on the exact sum: a group of fewer values than scaled sums
    # (small groups, exponents far apart) goes through `exact_parts` as its values.
    raw = values.tolist()
    out: list[tuple[float, ...]] = []
    at = start = 0
    for count, size in zip(counts, sizes.tolist(), strict=True):
        # No sum or one: `exact_parts` gives () or the sum itself (x - x is exactly 0).
        if count == 0:
            out.append(())
        elif count == 1:
            out.append((flat[at],))
        elif size < count:
            out.append(exact_parts(raw[start : start + size]))
        else:
            out.append(exact_parts(flat[at : at + count]))
        at += count
        start += size
    return out


def total(parts: Iterable[Iterable[float]]) -> float:
    """The correctly rounded sum of every value whose `exact_parts` are given."""
    return math.fsum(chain.from_iterable(parts))


__all__ = ["exact_parts", "exact_sum", "grouped_exact_parts", "total"]
