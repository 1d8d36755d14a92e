"""The window stage's keys (routes): each bucket on its own shuffle partition, as Spark puts it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming.stage.routing import bucket_of_route, bucket_routes, spark_partition_of_long


@given(st.integers(1, 64), st.integers(1, 64))
def test_each_bucket_lands_on_partition_bucket_mod_partitions_and_maps_back(
    num_buckets: int, num_partitions: int
) -> None:
    routes = bucket_routes(num_buckets, num_partitions)
    assert len(set(routes)) == num_buckets
    for bucket, route in enumerate(routes):
        assert 0 <= route < 2**31
        assert bucket_of_route(route, num_buckets) == bucket
        assert spark_partition_of_long(route, num_partitions) == bucket % num_partitions


def test_the_buckets_themselves_would_crowd_partitions() -> None:
    # Why routes: Spark's hash of the plain numbers 0..3 uses 3 of 4 partitions (a long key).
    assert len({spark_partition_of_long(b, 4) for b in range(4)}) < 4


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match=">= 1"):
        bucket_routes(0, 4)


@pytest.mark.spark
def test_partitions_are_those_of_sparks_hash_partitioning(spark: Any) -> None:
    from pyspark.sql import functions as F

    values = [*range(-5, 200), *bucket_routes(16, 7), 2**40 + 3, -(2**33)]
    for partitions in (1, 4, 7, 200):
        rows = (
            spark.createDataFrame([(v,) for v in values], "v long")
            .select("v", F.pmod(F.hash("v"), F.lit(partitions)).alias("p"))
            .collect()
        )
        assert {r.v: r.p for r in rows} == {
            v: spark_partition_of_long(v, partitions) for v in values
        }


@pytest.mark.spark
def test_a_grouped_shuffle_puts_each_route_on_its_partition(spark: Any) -> None:
    from pyspark.sql import functions as F

    routes = bucket_routes(8, 4)
    df = spark.createDataFrame([(r, 1) for r in routes for _ in range(3)], "route long, n int")
    grouped = df.repartition(4, "route").select("route", F.spark_partition_id().alias("p"))
    placed = {r.route: r.p for r in grouped.collect()}
    assert placed == {route: bucket % 4 for bucket, route in enumerate(routes)}
