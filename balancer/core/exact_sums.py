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
    values). A group's parts then come from those sums joined into one integer
    (`_integer_parts`), or, where that integer would pass a float's range, from
    `exact_parts` of the sums. Values outside that range (or groups larger) take
    `exact_parts` directly.
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
    # Per (group, exponent) the sum of the highs and of the lows: integers below 2**53.
    high_sums, low_sums = (
        np.bincount(cells, weights=half, minlength=n_groups * span).reshape(n_groups, span)
        for half in (high, low)
    )
    size_bits = int(sizes.max()).bit_length()
    if e_min + span + size_bits < _MAX_INTEGER_EXPONENT and span + size_bits < _MAX_INTEGER_SPAN:
        return _integer_parts(high_sums, low_sums, e_min)
    powers = np.arange(e_min, e_min + span) - 53
    # Per group, the scaled sums of its highs then of its lows, in exponent order.
    sums = np.concatenate(
        [np.ldexp(high_sums, powers + 27), np.ldexp(low_sums, powers)],
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


# `_integer_parts` holds a group's sum as one integer N (in units of the smallest value's
# last bit): below this exponent (of the largest value, plus the group's size in bits) its
# parts cannot overflow, and below this span (of exponents, plus the same) N < 2**1024 has a
# float.
_MAX_INTEGER_EXPONENT = 960
_MAX_INTEGER_SPAN = 900


def _integer_parts(
    high_sums: np.ndarray, low_sums: np.ndarray, e_min: int
) -> list[tuple[float, ...]]:
    """`exact_parts` of each group whose exact sum is
    sum over c of (high_sums[g, c] * 2**27 + low_sums[g, c]) * 2**(e_min + c - 53).

    The sum is N * 2**(e_min - 53) with an integer N: numpy carries the columns into N's bits
    (int64, exact: every column's total is below 2**54), Python joins them into one int, and
    the parts are N's correctly rounded residuals scaled by 2**(e_min - 53). They are those of
    `exact_parts`: a residual of `math.fsum` is the correctly rounded (half to even) exact
    remainder, as `float(int)` is, and scaling by a power of two commutes with rounding away
    from subnormals and overflow (the scale is at least 2**-953, N's residuals integers).
    """
    n_groups, span = high_sums.shape
    width = span + 27  # a high's bits sit 27 above its column's low
    columns = np.zeros((width, n_groups), dtype=np.int64)
    columns[:span] = low_sums.T.astype(np.int64)
    columns[27:] += high_sums.T.astype(np.int64)
    bits = np.empty_like(columns)
    carry = np.zeros(n_groups, dtype=np.int64)
    for bit in range(width):  # |carry| stays below 2**54
        column = columns[bit] + carry
        bits[bit] = column & 1
        carry = column >> 1  # floor: the bits stay 0 or 1 when the sum is negative
    # The bits in limbs of 62 (sums of distinct powers of two below 2**62: no overflow).
    limbs = [
        (bits[at : at + 62] << np.arange(min(62, width - at), dtype=np.int64)[:, None])
        .sum(axis=0)
        .tolist()
        for at in range(0, width, 62)
    ]
    # Each group's N, column by column of limbs (a comprehension a limb, not a loop a group).
    sums = [top << width for top in carry.tolist()]
    for i, limb in enumerate(limbs):
        sums = [n + (part << (62 * i)) for n, part in zip(sums, limb, strict=True)]
    scale = e_min - 53
    ldexp = math.ldexp
    out: list[tuple[float, ...]] = []
    for n in sums:
        parts: list[float] = []
        while n:
            rounded = float(n)  # correctly rounded, ties to even
            parts.append(ldexp(rounded, scale))
            n -= int(rounded)
        out.append(tuple(parts))
    return out


def grouped_int_sums(column: np.ndarray, bounds: Sequence[int]) -> list[int]:
    """The sum of each slice `column[bounds[i]:bounds[i + 1]]` as a Python int (exact,
    as `sum` of the slice's ints: int64 sums only where no partial sum can overflow)."""
    if len(column) == 0:
        return [0] * (len(bounds) - 1)
    largest = max(abs(int(column.max())), abs(int(column.min())))
    if largest * len(column) >= 2**63:
        return [sum(column[lo:hi].tolist()) for lo, hi in pairwise(bounds)]
    totals = np.concatenate(([0], np.cumsum(column, dtype=np.int64)))
    at = np.asarray(bounds, dtype=np.int64)
    picked: list[int] = (totals[at[1:]] - totals[at[:-1]]).tolist()
    return picked


def total(parts: Iterable[Iterable[float]]) -> float:
    """The correctly rounded sum of every value whose `exact_parts` are given."""
    return math.fsum(chain.from_iterable(parts))


__all__ = ["exact_parts", "exact_sum", "grouped_exact_parts", "grouped_int_sums", "total"]
