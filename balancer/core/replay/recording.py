"""What a recording holds, as the replay reads it: the stats topic's messages, and one
context record per collector round and cluster (the broker load reports read that round,
with the bundles each broker owns). How a recording is stored and read (a directory, or the
Kafka topics themselves) is `balancer.app.replay.recording`'s business; this is the shape
both give.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from balancer.core.broker_load import BrokerLoadReport


@dataclass(frozen=True, slots=True)
class RecordedMessage:
    """One message of the stats topic, as Kafka held it (the value is parsed by the stream's
    own parser, so bad records are counted and dead-lettered as `run` would)."""

    partition: int
    offset: int
    timestamp_ms: int  # the Kafka record's timestamp
    key: bytes | None
    value: bytes


@dataclass(frozen=True, slots=True)
class RoundContext:
    """One collector round of one cluster: the load reports read in it. The reports' bundle
    lists give the layout and owners at that time (bundles no broker owns carry no load)."""

    cluster: str
    round_ms: int  # the round's time on the collector's interval grid (event time)
    reports: tuple[BrokerLoadReport, ...]


class Recording(Protocol):
    """A recording, read in time order."""

    @property
    def description(self) -> str: ...  # for the report: a directory, or `kafka:<topic>`

    def stats_messages(self) -> Iterator[RecordedMessage]: ...

    def contexts(self) -> Iterator[RoundContext]: ...  # in round_ms order
