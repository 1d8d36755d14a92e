"""Bundle ranges and namespace layouts, exactly as Pulsar prints, validates, finds and splits."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from balancer.core.bundles import (
    BundleRange,
    InvalidBundle,
    NamespaceBundles,
    format_position,
    initial_boundaries,
    parse_position,
)
from balancer.core.hashing import FULL_UPPER


def test_range_text_round_trip() -> None:
    bundle = BundleRange.parse("0x00000000_0x40000000")
    assert (bundle.lower, bundle.upper) == (0, 0x40000000)
    assert str(bundle) == "0x00000000_0x40000000"
    assert str(BundleRange.parse("0xC0000000_0xFFFFFFFF")) == "0xc0000000_0xffffffff"
    assert bundle.key("t/ns") == "t/ns/0x00000000_0x40000000"


BAD_RANGES = [
    "0x0_0x40000000",
    "00000000_40000000",
    "0x40000000_0x00000000",
    "0x40000000_0x40000000",
    "0x00000000-0x40000000",
    "0x00000000_0x1ffffffff",
    "",
]


@pytest.mark.parametrize("text", BAD_RANGES, ids=[repr(t) for t in BAD_RANGES])
def test_invalid_range_text(text: str) -> None:
    with pytest.raises(InvalidBundle):
        BundleRange.parse(text)


@pytest.mark.parametrize(
    ("lower", "upper"), [(5, 5), (6, 5), (-1, 5), (0, FULL_UPPER + 1)], ids=str
)
def test_range_must_be_inside_the_full_range(lower: int, upper: int) -> None:
    with pytest.raises(InvalidBundle, match="lower < upper"):
        BundleRange(lower, upper)


def test_half_open_except_the_last_bundle() -> None:
    first = BundleRange(0, 0x40000000)
    last = BundleRange(0xC0000000, FULL_UPPER)
    assert first.contains(0) and not first.contains(0x40000000)
    assert not first.is_last and last.is_last
    assert last.contains(FULL_UPPER) and last.contains(0xC0000000)
    assert first.strictly_inside(1) and not first.strictly_inside(0)
    assert not first.strictly_inside(0x40000000)


@pytest.mark.parametrize(
    ("lower", "upper", "splittable"), [(0, 1, False), (0, 2, True), (7, 9, True)], ids=str
)
def test_splittable_only_wider_than_one(lower: int, upper: int, splittable: bool) -> None:
    assert BundleRange(lower, upper).splittable is splittable


INITIAL = [
    (1, (0, FULL_UPPER)),
    (2, (0, 0x80000000, FULL_UPPER)),
    (4, (0, 0x40000000, 0x80000000, 0xC0000000, FULL_UPPER)),  # the contract's default
    (3, (0, 0x55555555, 0xAAAAAAAA, FULL_UPPER)),
]


@pytest.mark.parametrize(("n", "boundaries"), INITIAL, ids=[str(n) for n, _ in INITIAL])
def test_initial_layouts(n: int, boundaries: tuple[int, ...]) -> None:
    assert initial_boundaries(n) == boundaries
    layout = NamespaceBundles.initial("t/ns", n)
    assert layout.num_bundles == n


@pytest.mark.parametrize("n", [0, -1, FULL_UPPER + 1], ids=str)
def test_initial_rejects_bad_counts(n: int) -> None:
    with pytest.raises(InvalidBundle):
        initial_boundaries(n)


def test_json_round_trip() -> None:
    layout = NamespaceBundles.initial("t/ns")
    body = layout.to_json()
    assert body == {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
        "numBundles": 4,
    }
    assert NamespaceBundles.from_json("t/ns", body) == layout
    with pytest.raises(InvalidBundle, match="numBundles 3"):
        NamespaceBundles.from_json("t/ns", {**body, "numBundles": 3})


BAD_LAYOUTS = [
    ((0,), "at least 2"),
    ((1, FULL_UPPER), "start at 0x00000000"),
    ((0, 5), "end at 0xffffffff"),
    ((0, 5, 5, FULL_UPPER), "strictly increasing"),
]


@pytest.mark.parametrize(("b", "problem"), BAD_LAYOUTS, ids=[p for _, p in BAD_LAYOUTS])
def test_invalid_layouts(b: tuple[int, ...], problem: str) -> None:
    with pytest.raises(InvalidBundle, match=problem):
        NamespaceBundles("t/ns", b)


POSITION_TEXT = [
    ("0x40000000", 0x40000000),
    ("0x1", 1),
    ("1073741824", 0x40000000),
    (" 0xFFFFFFFF ", FULL_UPPER),
    (12, 12),
]


@pytest.mark.parametrize(("text", "value"), POSITION_TEXT, ids=[repr(t) for t, _ in POSITION_TEXT])
def test_parse_position(text: str | int, value: int) -> None:
    assert parse_position(text) == value


@pytest.mark.parametrize("text", ["0x100000000", "-1", "4294967296", "x", "", "1.5", True, "²"])
def test_parse_position_rejects(text: str | int) -> None:
    with pytest.raises(InvalidBundle):
        parse_position(text)


FIND = [
    (0, "0x00000000_0x40000000"),
    (0x3FFFFFFF, "0x00000000_0x40000000"),
    (0x40000000, "0x40000000_0x80000000"),
    (0xC0000000, "0xc0000000_0xffffffff"),
    (FULL_UPPER, "0xc0000000_0xffffffff"),  # the closed upper end of the last bundle
]


@pytest.mark.parametrize(("position", "bundle"), FIND, ids=[format_position(p) for p, _ in FIND])
def test_find(position: int, bundle: str) -> None:
    assert str(NamespaceBundles.initial("t/ns").find(position)) == bundle


def test_find_rejects_positions_outside_the_range() -> None:
    with pytest.raises(InvalidBundle):
        NamespaceBundles.initial("t/ns").find(FULL_UPPER + 1)


def test_split_returns_new_layout_and_children() -> None:
    layout = NamespaceBundles.initial("t/ns")
    parent = BundleRange(0x40000000, 0x80000000)
    new, children = layout.split(parent, [0x60000000, 0x50000000])
    assert [str(c) for c in children] == [
        "0x40000000_0x50000000",
        "0x50000000_0x60000000",
        "0x60000000_0x80000000",
    ]
    assert new.num_bundles == 6 and not new.has(parent)
    assert all(new.has(c) for c in children)


SPLIT_ERRORS = [
    ((0x40000000, 0x80000000), [], "can't be empty"),
    ((0x40000000, 0x80000000), [0x40000000], "not strictly inside"),
    ((0x40000000, 0x80000000), [0x80000000], "not strictly inside"),
    ((0x40000000, 0x80000000), [0x90000000], "not strictly inside"),
    ((0x40000000, 0x70000000), [0x50000000], "no bundle"),
]


@pytest.mark.parametrize(
    ("parent", "b", "problem"), SPLIT_ERRORS, ids=[str(x[1]) for x in SPLIT_ERRORS]
)
def test_split_errors(parent: tuple[int, int], b: list[int], problem: str) -> None:
    with pytest.raises(InvalidBundle, match=problem):
        NamespaceBundles.initial("t/ns").split(BundleRange(*parent), b)


@given(
    n=st.integers(1, 64),
    points=st.lists(st.integers(0, FULL_UPPER), min_size=1, max_size=20),
)
def test_find_agrees_with_contains(n: int, points: list[int]) -> None:
    layout = NamespaceBundles.initial("t/ns", n)
    for p in points:
        found = layout.find(p)
        assert found.contains(p)
        assert sum(b.contains(p) for b in layout.bundles) == 1
