"""PIP-157 topic buckets: Java's String.hashCode, the bucket and the metadata path."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from balancer.core.buckets import (
    INT_MIN,
    encode_local_name,
    java_abs_mod,
    java_string_hash_code,
    metadata_path,
    topic_bucket,
)

HASH_CODES = [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),
    ("Aa", 2112),
    ("BB", 2112),  # Java's classic collision
    ("polygenelubricants", INT_MIN),  # hashes to Integer.MIN_VALUE
    ("é", 233),
    ("😀a", 54959966),  # a non-BMP character counts as two UTF-16 code units
]


@pytest.mark.parametrize(("text", "code"), HASH_CODES, ids=[repr(t) for t, _ in HASH_CODES])
def test_java_string_hash_code(text: str, code: int) -> None:
    assert java_string_hash_code(text) == code


@given(st.text(max_size=40))
def test_hash_code_is_signed_32_bit(text: str) -> None:
    assert INT_MIN <= java_string_hash_code(text) < 2**31


# The PIP's own example: 3 buckets.
PIP_EXAMPLE = [
    ("ptopic-partition-0", 0),
    ("ptopic-partition-3", 0),
    ("nptopic2", 1),
    ("ptopic-partition-1", 1),
    ("nptopic1", 2),
    ("ptopic-partition-2", 2),
]


@pytest.mark.parametrize(("local", "bucket"), PIP_EXAMPLE, ids=[n for n, _ in PIP_EXAMPLE])
def test_pip_157_example(local: str, bucket: int) -> None:
    assert topic_bucket(f"persistent://tenant/namespace/{local}", 3) == bucket
    assert (
        metadata_path(f"persistent://tenant/namespace/{local}", 3)
        == f"/managed-ledgers/tenant/namespace/persistent/${bucket}/{local}"
    )


@pytest.mark.parametrize(
    ("n", "java", "ours"), [(3, -2, 2), (7, -2, 2), (16, 0, 0), (1, 0, 0)], ids=str
)
def test_integer_min_value(n: int, java: int, ours: int) -> None:
    # Java: Math.abs(MIN_VALUE) is MIN_VALUE, and % keeps the sign: -(2^31 % n).
    assert java_abs_mod(INT_MIN, n) == java
    assert topic_bucket("t/ns/polygenelubricants", n) == ours == 2**31 % n


@pytest.mark.parametrize(("value", "n", "expected"), [(-7, 3, 1), (7, 3, 1), (0, 5, 0)], ids=str)
def test_java_abs_mod_agrees_elsewhere(value: int, n: int, expected: int) -> None:
    assert java_abs_mod(value, n) == expected


@given(
    name=st.text(min_size=1, max_size=20).filter(lambda s: "/" not in s and s == s.strip()),
    n=st.integers(1, 1000),
)
def test_bucket_in_range_and_equals_java_except_min_value(name: str, n: int) -> None:
    bucket = topic_bucket(f"persistent://t/ns/{name}", n)
    assert 0 <= bucket < n
    if java_string_hash_code(name) != INT_MIN:
        assert bucket == java_abs_mod(java_string_hash_code(name), n)


def test_one_bucket_means_no_bucketing() -> None:
    assert metadata_path("t/ns/x", 1) == "/managed-ledgers/t/ns/persistent/x"
    assert topic_bucket("t/ns/x", 1) == 0


def test_non_persistent_topics_have_no_managed_ledger() -> None:
    assert metadata_path("non-persistent://t/ns/x", 4) is None


def test_buckets_hash_the_local_name_not_the_domain() -> None:
    assert topic_bucket("persistent://t/ns/x", 7) == topic_bucket("non-persistent://a/b/x", 7)


@pytest.mark.parametrize(
    ("local", "encoded"),
    [
        ("a b", "a+b"),
        ("x:y", "x%3Ay"),
        ("a~b", "a%7Eb"),
        ("a*b.c-d_e", "a*b.c-d_e"),
        ("é", "%C3%A9"),
    ],
    ids=str,
)
def test_local_name_encoded_like_java_url_encoder(local: str, encoded: str) -> None:
    assert encode_local_name(local) == encoded


@pytest.mark.parametrize("n", [0, -1, True], ids=str)
def test_bucket_count_must_be_positive(n: int) -> None:
    with pytest.raises(ValueError, match="topic buckets"):
        topic_bucket("t/ns/x", n)
