"""A flush's topic columns, computed together from its topic names.

Each event's topic gives a pack four columns besides its name: the namespace, Pulsar's hash
position (CRC-32 of the name), the topic's part of its key (`streaming.shared.topic_keys`) and its
PIP-157 bucket (Java's `String.hashCode` of the local name). At 10M topics a read task meets
nearly every name for the first time, so no cache of per-name results can help: an earlier
cache of one struct per name spent ~2.4 us an event on lookups, inserts and struct fields
(docs/decisions.md#topic-columns-per-flush-no-per-name-cache). Here a flush's names are
hashed in one C loop per hash (once per distinct name when names repeat within the flush);
the namespace and local name come from Arrow's string kernels, the bucket from numpy over
the local names.

Two steps, as a read task needs them:
- `CanonicalNames.full_names`, when a run of events is accepted: each name as Pulsar's full
  name, or None when one is not a topic name (the caller then takes the slow path, which
  gives the reason). Canonical names, what collectors send, are checked by one regex, and
  remembered in a bounded set so a stable population skips even that;
- `topic_columns`, at the flush: the columns of every kept event, from full names, once
  per distinct name when `DedupeChoice` finds that names repeat within a flush.

Purely computational.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.lib.stride_tricks import sliding_window_view

from balancer.core.hashing import hash_positions_utf8
from balancer.core.topics import InvalidTopicName, parse_topic
from streaming.shared.topic_keys import topic_hashes_utf8

# A canonical full name whose parts parse_topic accepts unchanged: domain, tenant and
# namespace in Pulsar's NamedEntity alphabet, a non-empty local name without "/", no
# trailing whitespace (parse_topic rejects surrounding whitespace). Every full name that
# parse_topic gives has this form.
_CANONICAL: Final = re.compile(
    r"(?:persistent|non-persistent)://[-=:.\w]+/[-=:.\w]+/[^/]+", re.ASCII
)
_LAST: Final = itemgetter(-1)

# A full name's namespace and local name, in Arrow's RE2 (one pass for both; a backtracking
# `.*/` took 2.5x as long). (?s): a local name may hold a line break.
_PARTS: Final = "(?s)^[^/]*//(?P<namespace>[^/]*/[^/]*)/(?P<local>.*)$"
_SLASH: Final = ord("/")
# Local names up to this long are hashed in windows of the longest one's width (a flush's
# names times the width bytes); longer ones by the per-unit sum of `java_hash_codes`.
_MAX_WINDOW: Final = 64


def full_name(name: str) -> str | None:
    """Pulsar's full name for any accepted spelling of a topic name; None when invalid."""
    if _CANONICAL.fullmatch(name) is not None and not name[-1].isspace():
        return name
    try:
        return parse_topic(name).full
    except InvalidTopicName:
        return None


# Bytes a canonical name may hold in its tenant and namespace (Pulsar's NamedEntity: `[-=:.\w]`
# in ASCII), and may end with (printable ASCII but "/": never whitespace).
_ENTITY_BYTES: Final = np.zeros(256, dtype=bool)
_ENTITY_BYTES[[ord(c) for c in "-=:._"]] = True
_ENTITY_BYTES[ord("0") : ord("9") + 1] = True
_ENTITY_BYTES[ord("A") : ord("Z") + 1] = True
_ENTITY_BYTES[ord("a") : ord("z") + 1] = True
_LAST_BYTES: Final = np.zeros(256, dtype=bool)
_LAST_BYTES[0x21:0x7F] = True
_LAST_BYTES[_SLASH] = False
_DOMAINS: Final = ("persistent://", "non-persistent://")


def canonical_rows(names: pa.StringArray) -> np.ndarray:
    """Whether each name is canonical (bool), vectorized over the names' UTF-8 bytes.

    At least as strict as `CanonicalNames` (its regex, no trailing whitespace), so a name
    marked canonical is its own full name: ASCII only, a domain prefix, exactly four
    slashes (a local name holds none), non-empty tenant and namespace of NamedEntity bytes,
    and a last byte that is printable and not "/" (so the local name is not empty either).
    Null and non-ASCII names are not marked (the caller asks `full_name`).
    """
    n = len(names)
    ok = np.zeros(n, dtype=bool)
    if n == 0:
        return ok
    for domain in _DOMAINS:
        ok |= pc.starts_with(names, domain).fill_null(False).to_numpy(zero_copy_only=False)
    ok &= pc.string_is_ascii(names).fill_null(False).to_numpy(zero_copy_only=False)
    _, offsets_buffer, data_buffer = names.buffers()
    if offsets_buffer is None or data_buffer is None or not ok.any():
        return np.zeros(n, dtype=bool)
    offsets = np.frombuffer(offsets_buffer, np.int32, count=n + 1, offset=4 * names.offset)
    offsets = offsets.astype(np.int64)
    data = np.frombuffer(data_buffer, np.uint8)[offsets[0] : offsets[-1]]
    offsets -= offsets[0]
    starts, ends = offsets[:-1], offsets[1:]
    ok &= ends > starts  # (a domain prefix is not empty: a formality)
    last = np.where(ok, ends - 1, 0)
    ok &= _LAST_BYTES[data[last]] if data.size else False
    slashes = np.flatnonzero(data == _SLASH)
    first = np.searchsorted(slashes, starts)
    ok &= np.searchsorted(slashes, ends) - first == 4
    # The domain's "//" are slashes 1 and 2; the tenant runs to slash 3, the namespace to 4.
    at = np.where(ok, first, 0)
    if slashes.size < 4:
        return np.zeros(n, dtype=bool)
    at = np.minimum(at, slashes.size - 4)
    second, third, fourth = slashes[at + 1], slashes[at + 2], slashes[at + 3]
    ok &= (third > second + 1) & (fourth > third + 1)
    # Bytes no tenant or namespace may hold (rare in any name): are they in one?
    odd = np.flatnonzero(~_ENTITY_BYTES[data] & (data != _SLASH))
    if odd.size:
        row = np.searchsorted(ends, odd, side="right")
        inside = (odd > second[row]) & (odd < fourth[row])
        ok[row[inside]] = False
    return ok


class CanonicalNames:
    """Topic names as sent -> full names, remembering the canonical names seen (bounded:
    cleared whole when full, as at 10M topics, where few names come back before that)."""

    def __init__(self, *, max_entries: int = 1 << 19) -> None:
        self.max_entries = max_entries
        self._known: set[str] = set()

    def clear(self) -> None:
        """Forget every name (benchmarks of the cold path)."""
        self._known = set()

    def full_names(self, names: list[str]) -> list[str] | None:
        """Each name as its full name; None when any name is not a valid topic name."""
        known = self._known
        if known.issuperset(names):
            return names
        # map() keeps both checks' loops in C; the match objects are dropped at once.
        if all(map(_CANONICAL.fullmatch, names)) and not any(map(str.isspace, map(_LAST, names))):
            if len(known) + len(names) > self.max_entries:
                known.clear()
            known.update(names)
            return names
        fulls = list(map(full_name, names))  # another spelling, or not a name: rare
        return None if None in fulls else fulls  # type: ignore[return-value]


class DedupeChoice:
    """Whether a flush computes its topic columns once per distinct name.

    Deduplicating costs ~0.2 us a name (Arrow's hash table) and saves ~0.7 us for each
    repeat, so it pays when distinct names are fewer than ~2/3 of the events: at 10k topics
    (~0.1 of a 100,000-event flush), not at 500k or 10M (nearly every name once a flush).
    Whether names were seen in earlier flushes does not tell: at 500k topics they were,
    yet a flush holds each once. So the share is measured by the flushes that deduplicate,
    and one flush in `probe_every` deduplicates to measure it again. The choice changes the
    cost only, never the columns.
    """

    MAX_DISTINCT_SHARE: Final = 2 / 3

    def __init__(self, *, probe_every: int = 8) -> None:
        self.probe_every = probe_every
        self._distinct_share = 0.0  # until measured: deduplicate
        self._skipped = 0

    def dedupe(self) -> bool:
        if self._distinct_share <= self.MAX_DISTINCT_SHARE or self._skipped + 1 >= self.probe_every:
            return True
        self._skipped += 1
        return False

    def measured(self, distinct: int, events: int) -> None:
        """What a flush that deduplicated found."""
        self._distinct_share = distinct / max(events, 1)
        self._skipped = 0


@dataclass(frozen=True, slots=True)
class TopicNameColumns:
    """What a flush derives from its events' topic names: one value per event, in the order
    of the names given."""

    distinct: int | None  # distinct names, when deduplicated
    topic: pa.Array  # string: the full name
    namespace: pa.DictionaryArray  # "tenant/namespace"
    position: np.ndarray  # int64: Pulsar's hash position (balancer.core.hashing)
    key_part: np.ndarray  # int64: the topic's part of its key (streaming.shared.topic_keys)
    bucket: np.ndarray  # int64: the PIP-157 bucket (balancer.core.buckets.topic_bucket)


def topic_columns(
    full_names: Sequence[str] | pa.StringArray, num_buckets: int, *, dedupe: bool
) -> TopicNameColumns:
    """The columns of events whose topics have these full names (as `CanonicalNames` or
    `parse_topic` gives them).

    `dedupe`: compute each distinct name once (`DedupeChoice` says when that pays).
    """
    names = full_names if isinstance(full_names, pa.Array) else pa.array(full_names, pa.string())
    rows: np.ndarray | None = None
    distinct = names
    if dedupe:
        encoded = names.dictionary_encode()
        rows = encoded.indices.to_numpy(zero_copy_only=False)
        distinct = encoded.dictionary
    count = len(distinct)
    # The names' UTF-8 bytes straight from Arrow: no str object, no encoding per hash.
    utf8 = distinct.cast(pa.binary()).to_pylist()
    positions = np.fromiter(hash_positions_utf8(utf8), np.int64, count=count)
    key_parts = topic_hashes_utf8(utf8)
    namespaces, codes = _namespaces_and_codes(distinct)
    buckets = np.abs(codes.astype(np.int64)) % num_buckets
    if rows is None:
        return TopicNameColumns(None, names, namespaces, positions, key_parts, buckets)
    namespace_rows = namespaces.indices.take(pa.array(rows))
    return TopicNameColumns(
        distinct=count,
        topic=names,
        namespace=pa.DictionaryArray.from_arrays(namespace_rows, namespaces.dictionary),
        position=positions[rows],
        key_part=key_parts[rows],
        bucket=buckets[rows],
    )


def _namespaces_and_codes(names: pa.Array) -> tuple[pa.DictionaryArray, np.ndarray]:
    """Each full name's namespace (dictionary-encoded) and its local name's Java hash code."""
    sliced = _sliced_parts(names)
    if sliced is not None:
        return sliced
    parts = pc.extract_regex(names, _PARTS)
    codes = java_hash_codes(parts.field("local").to_pylist())
    return parts.field("namespace").dictionary_encode(), codes


def _sliced_parts(names: pa.Array) -> tuple[pa.DictionaryArray, np.ndarray] | None:
    """What `_PARTS` gives, read off the names' UTF-8 bytes with numpy, or None (then the
    regex): ASCII names only, where the Java hash's UTF-16 units are the bytes.

    Exact by construction: `_PARTS` matches where the first two slashes are adjacent and a
    name holds four or more; the namespace then runs from after the second slash to the
    fourth, the local name from there to the end. A "/" byte is always the character (UTF-8
    never uses it inside another's encoding). Regex, per-name lists and UTF-16 encoding
    took 0.5-0.7 us a name of the read task's ~5 us an event (AMD EPYC, 2026-11-29).
    """
    n = len(names)
    if n == 0 or names.null_count or not isinstance(names, pa.StringArray):
        return None
    _, offsets_buffer, data_buffer = names.buffers()
    if offsets_buffer is None or data_buffer is None:
        return None
    offsets = np.frombuffer(offsets_buffer, np.int32, count=n + 1, offset=4 * names.offset)
    offsets = offsets.astype(np.int64)
    data = np.frombuffer(data_buffer, np.uint8)[offsets[0] : offsets[-1]]
    offsets -= offsets[0]
    if data.size == 0 or int(data.max()) >= 0x80:
        return None
    slashes = np.flatnonzero(data == _SLASH)
    starts, ends = offsets[:-1], offsets[1:]
    first = np.searchsorted(slashes, starts)
    if np.any(np.searchsorted(slashes, ends) - first < 4):
        return None
    scheme_end, second, fourth = slashes[first], slashes[first + 1], slashes[first + 3]
    if np.any(second != scheme_end + 1):
        return None
    namespace_bytes, namespace_lengths = _gather(data, second + 1, fourth)
    namespace_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(namespace_lengths, out=namespace_offsets[1:])
    namespaces = pa.StringArray.from_buffers(
        n, pa.py_buffer(namespace_offsets), pa.py_buffer(namespace_bytes)
    )
    return namespaces.dictionary_encode(), _tail_hashes(data, fourth + 1, ends)


def _gather(
    data: np.ndarray, starts: np.ndarray, stops: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The bytes data[starts[i]:stops[i]] of every i, joined, and their lengths (int32
    indices: half the memory traffic of int64; a flush's names are far below 2 GiB)."""
    lengths = (stops - starts).astype(np.int32)
    ends = np.cumsum(lengths, dtype=np.int32)
    if ends[-1] == 0:
        return data[:0], lengths
    shifts = (starts - (ends - lengths)).astype(np.int32)
    positions = np.arange(int(ends[-1]), dtype=np.int32) + np.repeat(shifts, lengths)
    return data[positions], lengths


def _tail_hashes(data: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Java's hash of each ASCII text data[starts[i]:stops[i]]: for short texts, from a
    window of the widest one's width ending at each text's end (the bytes before its start
    masked), one multiply-and-sum a row; longer ones as `java_hash_codes`."""
    lengths = stops - starts
    width = int(lengths.max())
    if width > _MAX_WINDOW:
        units, unit_lengths = _gather(data, starts, stops)
        return _polynomial_hashes(units.astype(np.uint32), unit_lengths)
    padded = np.concatenate([np.zeros(width, np.uint8), data])  # a window may start before 0
    windows = sliding_window_view(padded, width)[stops]  # padded[stop:stop+width]: data's
    kept = np.arange(width)[None, :] >= (width - lengths)[:, None]
    powers = np.ones(width, dtype=np.uint32)
    powers[1:] = 31
    powers = np.cumprod(powers, dtype=np.uint32)[::-1]  # 31^(width-1) ... 31^0, wrapping
    terms = np.where(kept, windows, 0).astype(np.uint32) * powers
    hashes: np.ndarray = terms.sum(axis=1, dtype=np.uint32).view(np.int32)
    return hashes


def java_hash_codes(texts: Sequence[str]) -> np.ndarray:
    """Java's `String.hashCode()` of each text (signed 32-bit), computed in one numpy pass.

    h = sum(unit[i] * 31^(n-1-i)) mod 2^32 over the UTF-16 code units; uint32 arithmetic
    wraps exactly like Java's int.
    """
    if not texts:
        return np.zeros(0, dtype=np.int32)
    joined = "".join(texts).encode("utf-16-le")
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    if len(joined) != 2 * int(lengths.sum()):  # a character beyond the BMP: 2 code units
        units_of = (len(text.encode("utf-16-le")) // 2 for text in texts)
        lengths = np.fromiter(units_of, dtype=np.int64, count=len(texts))
    units = np.frombuffer(joined, dtype="<u2").astype(np.uint32)
    return _polynomial_hashes(units, lengths)


def _polynomial_hashes(units: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Java's hash (int32) of each text, from its UTF-16 code units (uint32, joined) and the
    texts' lengths in units."""
    out = np.zeros(len(lengths), dtype=np.uint32)
    if units.size:
        ends = np.cumsum(lengths)
        starts = ends - lengths
        powers = np.ones(int(lengths.max()), dtype=np.uint32)
        if powers.size > 1:
            powers[1:] = 31
            powers = np.cumprod(powers, dtype=np.uint32)
        exponents = np.repeat(ends - 1, lengths) - np.arange(units.size, dtype=np.int64)
        terms = units * powers[exponents]
        nonempty = lengths > 0
        out[nonempty] = np.add.reduceat(terms, starts[nonempty], dtype=np.uint32)
    return out.view(np.int32)


__all__ = [
    "CanonicalNames",
    "DedupeChoice",
    "TopicNameColumns",
    "canonical_rows",
    "full_name",
    "java_hash_codes",
    "topic_columns",
]
