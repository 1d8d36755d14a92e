"""Topic hash positions exactly as Pulsar computes them.

Pulsar: `Hashing.crc32().hashString(fullName, UTF_8).padToLong()` - the CRC32 of the
UTF-8 bytes of the full topic name, as an unsigned 32-bit value. Each partition is hashed
by its own full name. Purely computational, with no side effects.
"""

from __future__ import annotations

import zlib

from balancer.core.topics import TopicName, parse_topic

FULL_LOWER = 0x00000000
FULL_UPPER = 0xFFFFFFFF


def hash_position(full_name: str) -> int:
    """Position of an already-normalised full topic name (no parsing: the hot path)."""
    return zlib.crc32(full_name.encode("utf-8")) & 0xFFFFFFFF


def topic_position(topic: TopicName | str) -> int:
    """Position of a topic given in any accepted spelling."""
    name = topic if isinstance(topic, TopicName) else parse_topic(topic)
    return hash_position(name.full)
