"""The replay's count of distinct topics and their clusters (`engine.DistinctTopics`)."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from balancer.app.replay.engine import DistinctTopics

_names = st.text(alphabet="ab:/\x00", min_size=0, max_size=4)


def _add(seen: DistinctTopics, pairs: list[tuple[str, str]]) -> None:
    seen.add(
        pa.table(
            {
                "cluster": pa.array([c for c, _ in pairs], pa.string()),
                "topic": pa.array([t for _, t in pairs], pa.string()),
            }
        )
    )


def test_pairs_that_join_to_the_same_string_are_two_topics() -> None:
    seen = DistinctTopics()
    _add(seen, [("ab", "t"), ("a", "bt"), ("a:b", "t"), ("a", "b:t")])
    assert len(seen) == 4
    assert seen.clusters == {"ab", "a", "a:b"}


@given(st.lists(st.lists(st.tuples(_names, _names), max_size=8), max_size=5))
def test_counts_what_a_set_of_pairs_counts(windows: list[list[tuple[str, str]]]) -> None:
    seen = DistinctTopics()
    expected: set[tuple[str, str]] = set()
    for pairs in windows:
        _add(seen, pairs)
        expected |= set(pairs)
        assert len(seen) == len(expected)
        assert seen.clusters == {cluster for cluster, _ in expected}


def test_one_name_in_two_clusters_is_two_topics_in_windows_of_one_or_both() -> None:
    seen = DistinctTopics()
    _add(seen, [("c", "aab")])  # one cluster: its names as they are
    _add(seen, [("c", "aba"), ("c", "aab"), ("c", "aba"), ("d", "aab")])
    _add(seen, [("d", "aab"), ("d", "aba")])
    _add(seen, [("c", "aba"), ("c", "aab")])
    assert len(seen) == 4
    assert seen.clusters == {"c", "d"}
