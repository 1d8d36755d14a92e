"""Topic loads as numpy columns, so a bundle of 100,000+ topics is handled in vector steps.

Purely computational, with no side effects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from balancer.core.bundles import BundleRange
from balancer.core.load import TopicLoad

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class TopicColumns:
    """Positions and per-topic loads (msgRate and throughput are in + out)."""

    positions: IntArray
    msg_rate: FloatArray
    throughput_bytes: FloatArray
    sessions: IntArray

    @classmethod
    def from_topics(cls, topics: Sequence[TopicLoad]) -> TopicColumns:
        n = len(topics)
        return cls(
            positions=np.fromiter((t.position for t in topics), dtype=np.int64, count=n),
            msg_rate=np.fromiter(
                (t.msg_rate_in + t.msg_rate_out for t in topics), dtype=np.float64, count=n
            ),
            throughput_bytes=np.fromiter(
                (t.msg_throughput_in + t.msg_throughput_out for t in topics),
                dtype=np.float64,
                count=n,
            ),
            sessions=np.fromiter(
                (t.producer_count + t.consumer_count for t in topics), dtype=np.int64, count=n
            ),
        )

    def __len__(self) -> int:
        return int(self.positions.shape[0])

    def within(self, bundle: BundleRange) -> TopicColumns:
        """Only the topics whose position lies in the bundle (closed at 0xffffffff if last)."""
        p = self.positions
        upper_ok = p <= bundle.upper if bundle.is_last else p < bundle.upper
        mask = (p >= bundle.lower) & upper_ok
        if bool(mask.all()):
            return self
        return TopicColumns(
            self.positions[mask],
            self.msg_rate[mask],
            self.throughput_bytes[mask],
            self.sessions[mask],
        )

    def sorted_by_position(self) -> TopicColumns:
        order = np.argsort(self.positions, kind="stable")
        return TopicColumns(
            self.positions[order],
            self.msg_rate[order],
            self.throughput_bytes[order],
            self.sessions[order],
        )
