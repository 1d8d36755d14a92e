"""Window-stage keys that Spark's hash partitioning spreads evenly over its partitions.

The window stage keeps its state per PIP-157 bucket, and Spark places a key on shuffle
partition `pmod(Murmur3Hash(key, seed 42), partitions)` (`HashPartitioning`). Keyed by the
bucket number itself, 4 buckets fell on 2 of 4 partitions (one task held 3 of them, so
one core did three quarters of every close while the other idled). So the stage is keyed
by a *route* per bucket instead: `bucket + num_buckets * k`, with the smallest `k` that
puts bucket `b` on partition `b mod partitions`. `route mod num_buckets` gives the bucket
back. Pure.
"""

from __future__ import annotations

from functools import cache

import mmh3

SPARK_HASH_SEED = 42  # Murmur3Hash's default seed in Spark's HashPartitioning


def spark_partition_of_long(value: int, num_partitions: int) -> int:
    """The shuffle partition Spark gives a grouping key of one LongType column `value`.

    Spark hashes a long as Murmur3_x86_32 over its 8 little-endian bytes (`hashLong`).
    """
    hashed = mmh3.hash(value.to_bytes(8, "little", signed=True), SPARK_HASH_SEED, signed=True)
    return hashed % num_partitions  # Python's % of a positive modulus is Spark's pmod


@cache
def bucket_routes(num_buckets: int, num_partitions: int) -> tuple[int, ...]:
    """The route (stage key) of each bucket: bucket `b` lands on partition `b % partitions`."""
    if num_buckets < 1 or num_partitions < 1:
        raise ValueError("num_buckets and num_partitions must be >= 1")
    routes = []
    for bucket in range(num_buckets):
        route = bucket
        while spark_partition_of_long(route, num_partitions) != bucket % num_partitions:
            route += num_buckets
        routes.append(route)
    return tuple(routes)


def bucket_of_route(route: int, num_buckets: int) -> int:
    return route % num_buckets


__all__ = ["bucket_of_route", "bucket_routes", "spark_partition_of_long"]
