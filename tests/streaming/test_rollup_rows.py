"""`sorted_topic_rows`: each topic's first row, sorted by (cluster, namespace, position,
topic), as a hash group-by keeping the first row of each (cluster, topic) gives them."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.core.hashing import hash_position
from streaming.driver.rollup import sorted_topic_rows, topic_loads
from streaming.stage.partials import TOPIC_ROWS_SCHEMA

KEYS = ("cluster", "namespace", "position", "topic")


def reference(*tables: pa.Table) -> pa.Table:
    """The group-by `sorted_topic_rows` replaced (a topic's first row in input order)."""
    rows = (
        pa.concat_tables(tables)
        .group_by(["cluster", "topic"], use_threads=False)
        .aggregate([(n, "first") for n in TOPIC_ROWS_SCHEMA.names if n not in ("cluster", "topic")])
    )
    rows = rows.rename_columns([n.removesuffix("_first") for n in rows.column_names])
    return rows.sort_by([(k, "ascending") for k in KEYS]).select(TOPIC_ROWS_SCHEMA.names)


@st.composite
def tables(draw: st.DrawFn, *, positions: int = 1 << 32) -> list[pa.Table]:
    """One to three tables of rows of a few topics, repeated with other values; `positions`
    fewer than 2**32 make topics of one namespace share a position."""
    out = []
    for _ in range(draw(st.integers(1, 3))):
        columns: dict[str, list[object]] = {n: [] for n in TOPIC_ROWS_SCHEMA.names}
        for _ in range(draw(st.integers(0, 25))):
            cluster = draw(st.sampled_from(["c1", "c2"]))
            ns = draw(st.sampled_from(["a/x", "a/y", "b/x"]))
            topic = f"persistent://{ns}/t{draw(st.integers(0, 6))}"
            columns["window_end"].append(60_000)
            columns["cluster"].append(cluster)
            columns["namespace"].append(ns)
            columns["topic"].append(topic)
            columns["position"].append(hash_position(topic) % positions)
            for name in TOPIC_ROWS_SCHEMA.names[5:]:
                columns[name].append(draw(st.integers(0, 9)))  # tells rows of a topic apart
        out.append(pa.table(columns).cast(TOPIC_ROWS_SCHEMA))
    return out


@settings(max_examples=200, deadline=None)
@given(tables())
def test_each_topics_first_row_sorted_as_the_group_by_gave_them(parts: list[pa.Table]) -> None:
    got = sorted_topic_rows(*parts)
    assert got.select(TOPIC_ROWS_SCHEMA.names).equals(reference(*parts))
    loads = topic_loads(*parts)
    assert [(c, n, t.topic) for c, n, t in loads] == list(
        zip(*(got.column(k).to_pylist() for k in ("cluster", "namespace", "topic")), strict=True)
    )


@settings(max_examples=200, deadline=None)
@given(tables(positions=2))
def test_topics_at_one_position_sort_by_name_as_the_group_by_gave_them(
    parts: list[pa.Table],
) -> None:
    """The sort keys a row on its namespace and position: topics sharing both (and a
    topic's own rows) must still come in (topic, input) order."""
    got = sorted_topic_rows(*parts)
    assert got.select(TOPIC_ROWS_SCHEMA.names).equals(reference(*parts))


def test_positions_outside_a_hash_range_sort_as_the_group_by_gave_them() -> None:
    """No real position is negative or past 2**32, but the rows say so: Arrow's sort."""
    columns: dict[str, list[object]] = {n: [] for n in TOPIC_ROWS_SCHEMA.names}
    rows = [(0, 1 << 40), (1, -5), (2, 7), (3, -5), (0, 1 << 40)]
    for i, (topic, position) in enumerate(rows):
        for name in TOPIC_ROWS_SCHEMA.names:
            columns[name].append(i)
        columns["cluster"][-1] = "c1"
        columns["namespace"][-1] = "a/x"
        columns["topic"][-1] = f"persistent://a/x/t{topic}"
        columns["position"][-1] = position
    parts = [pa.table(columns).cast(TOPIC_ROWS_SCHEMA)]
    got = sorted_topic_rows(*parts)
    assert got.column("position").to_pylist() == [-5, -5, 7, 1 << 40]
    assert got.select(TOPIC_ROWS_SCHEMA.names).equals(reference(*parts))
