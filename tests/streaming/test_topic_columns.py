"""A flush's topic columns (`streaming.read.topic_columns`) agree with the per-name reference:
`parse_topic` for the full name and namespace, `topic_position`, `topic_hash` and
`topic_bucket`, whatever the names, their repeats and what was seen before."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from balancer.core.buckets import java_string_hash_code, topic_bucket
from balancer.core.hashing import topic_position
from balancer.core.topics import InvalidTopicName, parse_topic
from streaming.read.topic_columns import (
    _PARTS,
    CanonicalNames,
    DedupeChoice,
    _sliced_parts,
    canonical_rows,
    full_name,
    java_hash_codes,
    topic_columns,
)
from streaming.shared.topic_keys import topic_hash
from tests.streaming.test_fastparse import ENTITY, TOPICS, VALID_TOPICS


def reference_full_name(name: str) -> str | None:
    try:
        return parse_topic(name).full
    except InvalidTopicName:
        return None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(TOPICS | VALID_TOPICS, min_size=1, max_size=6), max_size=8),
       st.integers(1, 8))  # fmt: skip
def test_full_names_agree_with_the_reference_whatever_was_seen_before(
    runs: list[list[str]], max_entries: int
) -> None:
    names = CanonicalNames(max_entries=max_entries)
    for run in runs:
        expected = [reference_full_name(name) for name in run]
        assert [full_name(name) for name in run] == expected
        assert names.full_names(list(run)) == (None if None in expected else expected)


def test_names_seen_before_and_past_the_bound_keep_their_full_names() -> None:
    names = CanonicalNames(max_entries=2)
    first = ["persistent://t/ns/a", "non-persistent://t/ns/b"]
    assert names.full_names(first) == first
    assert names.full_names(first[::-1]) == first[::-1]  # seen before
    assert names.full_names(["a"]) == ["persistent://public/default/a"]
    assert names.full_names(["persistent://t/ns/c"]) == ["persistent://t/ns/c"]  # clears
    assert names.full_names(["t/ns/x", "t//x"]) is None
    assert names.full_names(["persistent://t/ns/x "]) is None


def test_dedupe_is_chosen_by_the_distinct_share_last_measured_and_probed_again() -> None:
    choice = DedupeChoice(probe_every=4)
    assert choice.dedupe()  # nothing measured yet
    choice.measured(distinct=90, events=100)  # nearly every name once: skip
    assert [choice.dedupe() for _ in range(4)] == [False, False, False, True]
    choice.measured(distinct=10, events=100)  # names repeat: dedupe
    assert [choice.dedupe() for _ in range(5)] == [True] * 5


FULL_NAMES = VALID_TOPICS.map(reference_full_name).filter(lambda full: full is not None)


@settings(max_examples=300, deadline=None)
@given(st.lists(FULL_NAMES, max_size=12), st.integers(1, 2**31 - 1) | st.integers(1, 8),
       st.booleans())  # fmt: skip
@example(["persistent://t/ns/line\nbreak", "persistent://t/ns/😀", "non-persistent://a=:/b./c d"],
         3, False)  # fmt: skip
@example(["persistent://t/ns/a", "persistent://u/ns/a", "persistent://t/ns/a"], 16, True)
def test_topic_columns_agree_with_the_reference(
    full_names: list[str], num_buckets: int, dedupe: bool
) -> None:
    columns = topic_columns(full_names, num_buckets, dedupe=dedupe)
    assert columns.distinct == (len(set(full_names)) if dedupe else None)
    assert columns.topic.to_pylist() == full_names
    assert columns.namespace.to_pylist() == [parse_topic(n).namespace_name for n in full_names]
    assert columns.position.tolist() == [topic_position(n) for n in full_names]
    assert columns.key_part.tolist() == [topic_hash(n) for n in full_names]
    assert columns.bucket.tolist() == [topic_bucket(n, num_buckets) for n in full_names]


@pytest.mark.parametrize("dedupe", [False, True])
def test_a_flush_of_repeated_names_shares_one_dictionary_of_namespaces(dedupe: bool) -> None:
    full_names = [f"persistent://t/ns-{i % 3}/topic-{i % 5}" for i in range(30)]
    columns = topic_columns(full_names, 4, dedupe=dedupe)
    assert sorted(columns.namespace.dictionary.to_pylist()) == ["t/ns-0", "t/ns-1", "t/ns-2"]


@given(st.lists(st.text(max_size=40) | st.text(st.characters(min_codepoint=0x10000)), max_size=10))
def test_java_hash_codes_match_the_reference(texts: list[str]) -> None:
    assert java_hash_codes(texts).tolist() == [java_string_hash_code(t) for t in texts]


def test_java_hash_codes_known_values() -> None:
    texts = ["", "a", "hello", "polygenelubricants", "😀", ""]
    assert java_hash_codes(texts).tolist() == [0, 97, 99162322, -(2**31), 1772899, 0]
    assert java_hash_codes([]).tolist() == []


# --- the sliced path: namespaces and bucket hashes read off the names' bytes ---------------

ASCII_LOCAL = st.text(st.characters(min_codepoint=0, max_codepoint=0x7F), min_size=1, max_size=8)
ASCII_FULL_NAMES = st.builds(
    lambda domain, t, n, local: f"{domain}://{t}/{n}/{local}",
    st.sampled_from(["persistent", "non-persistent"]), ENTITY, ENTITY,
    ASCII_LOCAL | st.text("ab/\n", min_size=1, max_size=3)
    | st.text("xyz", min_size=60, max_size=90),
)  # fmt: skip


def regex_parts(names: list[str]) -> tuple[list[str | None], list[int]]:
    """What the sliced path replaces: `_PARTS` by Arrow's regex, hashes by `java_hash_codes`."""
    parts = pc.extract_regex(pa.array(names, pa.string()), _PARTS)
    locals_ = parts.field("local").to_pylist()
    return parts.field("namespace").to_pylist(), java_hash_codes(locals_).tolist()


@settings(max_examples=300, deadline=None)
@given(st.lists(ASCII_FULL_NAMES, min_size=1, max_size=12), st.integers(0, 3))
@example(["persistent://t/ns/" + "z" * 64, "persistent://t/ns/a"], 0)  # the widest window
@example(["persistent://t/ns/" + "z" * 65, "persistent://t/ns/a"], 0)  # past it: per unit
@example(["persistent://t/n/a/b", "persistent://t//"], 1)  # a slash kept in the local name
def test_the_sliced_parts_are_the_regex_parts_for_ascii_names(names: list[str], skip: int) -> None:
    sliced = _sliced_parts(pa.array(names, pa.string()).slice(min(skip, len(names) - 1)))
    names = names[min(skip, len(names) - 1) :]  # an array's offset is honoured
    assert sliced is not None  # every ASCII full name takes it
    namespaces, codes = sliced
    assert (namespaces.to_pylist(), codes.tolist()) == regex_parts(names)


@pytest.mark.parametrize(
    "names",
    [["persistent://t/ns/ä", "persistent://t/ns/a"], ["no-scheme/a/b/c"], ["persistent://t/ns"],
     ["persistent:/x//t/ns/a"]],
)  # fmt: skip
def test_names_the_sliced_path_cannot_prove_go_to_the_regex(names: list[str]) -> None:
    assert _sliced_parts(pa.array(names, pa.string())) is None


NEAR_CANONICAL = st.builds(
    lambda domain, t, n, local, tail: f"{domain}://{t}/{n}/{local}{tail}",
    st.sampled_from(["persistent", "non-persistent", "Persistent", "persistent:"]),
    ENTITY | st.text(max_size=3), ENTITY | st.text(max_size=3),
    st.text(max_size=6), st.sampled_from(["", "", "x", " ", "\n", "\x1f", "/", "\u2003", "ä"]),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(NEAR_CANONICAL | TOPICS | VALID_TOPICS | st.none(), max_size=12), st.integers(0, 3))
def test_a_name_marked_canonical_is_its_own_full_name(names: list[str | None], skip: int) -> None:
    """canonical_rows is at least as strict as CanonicalNames: what it marks, the JSON fast
    path accepts as is, and parse_topic gives back unchanged (sliced arrays too)."""
    array = pa.array(["x", *names][: skip + 1 + len(names)], pa.string()).slice(1)
    marked = canonical_rows(array)
    assert len(marked) == len(array)
    for name, canonical in zip(array.to_pylist(), marked.tolist(), strict=True):
        if canonical:
            assert name is not None and name.isascii()
            assert full_name(name) == name == reference_full_name(name)
            assert CanonicalNames().full_names([name]) == [name]


def test_canonical_ascii_names_are_marked() -> None:
    names = [
        "persistent://t/ns/a", "non-persistent://tenant-1/ns.x_y:z=/topic-partition-3",
        "persistent://a/b/local with space inside", "persistent://a/b/x!~",
    ]  # fmt: skip
    assert canonical_rows(pa.array(names)).tolist() == [True] * len(names)
    assert [reference_full_name(name) for name in names] == names
    odd = ["persistent://a/b/", "persistent://a//c", "persistent://a/b/c ", "persistent://a/b/c/d",
           "persistent://ä/b/c", "persistent://a/b/cä", "t/ns/a", "", "persistent://a b/c/d",
           "persistent://a/b/c\n"]  # fmt: skip
    assert canonical_rows(pa.array(odd)).tolist() == [False] * len(odd)
