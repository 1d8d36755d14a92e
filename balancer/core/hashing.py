"""Topic hash positions exactly as Pulsar computes them.

Pulsar: `Hashing.crc32().hashString(fullName, UTF_8).padToLong()` - the CRC32 of the
UTF-8 bytes of the full topic name, as an unsigned 32-bit value. Each partition is hashed
by its own full name. Purely computational, with no side effects.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from balancer.core.topics import TopicName, parse_topic

FULL_LOWER = 0x00000000
FULL_UPPER = 0xFFFFFFFF


def hash_position(full_name: str) -> int:
    """Position of an already-normalised full topic name (no parsing: the hot path)."""
    return zlib.crc32(full_name.encode("utf-8")) & 0xFFFFFFFF


def hash_positions(full_names: Sequence[str]) -> list[int]:
    """`hash_position` of each name, in C loops (zlib's CRC32 is already unsigned)."""
    return hash_positions_utf8(list(map(str.encode, full_names)))


def hash_positions_utf8(full_names: Sequence[bytes]) -> list[int]:
    """`hash_position` of each name given as its UTF-8 bytes (as Arrow holds them)."""
    return list(map(zlib.crc32, full_names))


def topic_position(topic: TopicName | str) -> int:
    """Position of a topic given in any accepted spelling."""
    name = topic if isinstance(topic, TopicName) else parse_topic(topic)
    return hash_position(name.full)
