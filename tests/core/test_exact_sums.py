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
