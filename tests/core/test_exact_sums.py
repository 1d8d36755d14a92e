"""Exact sums: the numpy path for many groups gives exactly `exact_parts` of each group."""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.core.exact_sums import exact_parts, grouped_exact_parts, total

# Rates as the stream sees them (0 to 1e18), plus the values that leave the numpy path.
VALUES = st.one_of(
    st.floats(min_value=0, max_value=1e18),
    st.sampled_from([0.0, 0.1, 1.0, 2.0**-1074, 1e-300, 2.0**53 + 2, 1e300, -3.5]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(VALUES, max_size=60), st.lists(st.integers(0, 60), max_size=4))
def test_grouped_parts_are_the_parts_of_each_group(values: list[float], cuts: list[int]) -> None:
    bounds = [0, *sorted(min(c, len(values)) for c in cuts), len(values)]
    got = grouped_exact_parts(np.array(values, dtype=np.float64), bounds)
    want = [exact_parts(values[a:b]) for a, b in pairwise(bounds)]
    assert got == want
    assert [total([parts]) for parts in got] == [
        math.fsum(values[a:b]) for a, b in pairwise(bounds)
    ]


def test_a_large_group_of_cancelling_mantissas_stays_exact() -> None:
    # Many values with one exponent: the per-exponent sums reach 2**52 and must not round.
    values = np.full(1 << 16, 1.0 - 2.0**-53) * 3.0
    values[::2] = 2.0 - 2.0**-52
    (parts,) = grouped_exact_parts(values, [0, len(values)])
    assert parts == exact_parts(values.tolist())


# Finite floats of any exponent, both signs: groups whose exponents lie far apart, near the
# top of the range, or subnormal take the paths besides the integer carry (see exact_sums).
WIDE = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e280, max_value=1e280),
    st.sampled_from([1e-250, 1e250, -(2.0**53), 2.0**53, 1.0, -1.0, 0.5, 3.0, 1e-300, 1e300]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(WIDE, max_size=40), st.lists(st.integers(0, 40), max_size=6))
def test_grouped_parts_of_signed_values_of_any_exponent(
    values: list[float], cuts: list[int]
) -> None:
    bounds = [0, *sorted(min(c, len(values)) for c in cuts), len(values)]
    got = grouped_exact_parts(np.array(values, dtype=np.float64), bounds)
    assert got == [exact_parts(values[a:b]) for a, b in pairwise(bounds)]


def test_a_tie_rounds_to_even_as_fsum_does() -> None:
    # 2**53 + 1 lies halfway between two floats: the first part is the even one, 2**53.
    values = [2.0**53, 1.0, 2.0**53 + 2, 1.0, -(2.0**54), 3.0 * 2.0**-40]
    got = grouped_exact_parts(np.array(values), [0, 2, 4, 6])
    assert got == [exact_parts(values[0:2]), exact_parts(values[2:4]), exact_parts(values[4:6])]
    assert got[0] == (2.0**53, 1.0)


def test_exponents_far_apart_in_one_group_keep_both_values() -> None:
    # The group's sum in units of 1e-250's last bit is far past 2**1024: no single integer.
    (parts,) = grouped_exact_parts(np.array([1e-250, 1e250, 0.0]), [0, 3])
    assert parts == exact_parts([1e-250, 1e250]) == (1e250, 1e-250)


def test_many_groups_of_exponents_far_apart_are_binned_in_chunks() -> None:
    # 3,000 groups x a span of ~665 exponents pass the 2**20 bins of one bincount: the groups
    # go in chunks, each giving what `exact_parts` gives.
    rng = np.random.default_rng(7)
    values = 10.0 ** rng.uniform(-100, 100, 9_000) * rng.choice([-1.0, 0.0, 1.0], 9_000)
    bounds = [0, *np.sort(rng.integers(0, 9_000, 2_999)).tolist(), 9_000]
    got = grouped_exact_parts(values, bounds)
    assert got == [exact_parts(values[a:b].tolist()) for a, b in pairwise(bounds)]
