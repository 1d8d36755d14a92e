"""Issue 32: the controller's calls to one cluster do not hold back another's.

East's admin API hangs (its first call blocks until the test releases it); west's answers.
West's split is applied in the same batch, the batch does not wait past `batch_wait_s`,
east's later decisions are skipped while its action is in flight, and reconciling open
intents does not wait for east either.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from balancer.controller.clock import FakeClock
from balancer.controller.handler import ControllerHandler
from balancer.core.detect import DetectionSettings
from balancer.core.load import TopicLoad, roll_up
from balancer.core.results import ActionResult
from balancer.core.thresholds import Thresholds
from balancer.pulsar.routing import routing_hint
from tests.controller.test_controller_apply import NS, PARENT, FakeAdmin, make
from tests.reports import batch_report


class HungAdmin(FakeAdmin):
    """A FakeAdmin whose every call waits for `release`, and says when one arrived."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__()
        self.release = release
        self.asked = threading.Event()

    def _maybe_fail(self, name: str) -> None:
        self.asked.set()
        self.release.wait()
        super()._maybe_fail(name)


class ByCluster:
    """The admin port, answered by the cluster the controller routes the call to."""

    def __init__(self, admins: dict[str, FakeAdmin]) -> None:
        self.admins = admins

    def __getattr__(self, name: str) -> object:
        cluster = routing_hint()
        assert cluster is not None, "every controller call is routed to a cluster"
        return getattr(self.admins[cluster], name)


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def _hot(cluster: str, window: int) -> object:
    topics = tuple(
        TopicLoad(f"persistent://{NS}/t{i}", 0x01000000 * (i + 1), msg_rate_in=8000.0)
        for i in range(5)
    )
    return roll_up(
        cluster=cluster, namespace=NS, bundle=PARENT, window_end_ms=window * 1000, topics=topics
    )


def _report(batch: int, clusters: Sequence[str]) -> object:
    window = batch + 1
    return batch_report(batch, window * 1000, tuple(_hot(c, window) for c in clusters))


def test_a_hung_cluster_does_not_hold_back_another_clusters_split(
    tmp_path: Path, release: threading.Event
) -> None:
    east, west = HungAdmin(release), FakeAdmin()
    clock = FakeClock()
    controller = make(tmp_path, ByCluster({"east": east, "west": west}), clock)  # type: ignore[arg-type]
    handler = ControllerHandler(
        controller,
        thresholds=Thresholds(),
        detection=DetectionSettings(hit_count_threshold=1, cooldown_ms=0),
        batch_wait_s=0.3,
    )
    handler.handle(_report(0, ["east", "west"]))  # type: ignore[arg-type]
    # West's split is applied in this batch; east's is still waiting for its admin API.
    assert [(o.cluster, o.result) for o in handler.last_outcomes] == [
        ("west", ActionResult.APPLIED)
    ]
    assert east.asked.is_set() and not release.is_set()
    assert handler.controller.journal.batch_handled("0")
    # The next window: west is decided again (an outcome of its own), east is skipped
    # while it is busy.
    handler.handle(_report(1, ["east", "west"]))  # type: ignore[arg-type]
    assert [o.cluster for o in handler.last_outcomes] == ["west"]
    counters = handler.stats.snapshot().counters
    assert counters[("split", "skipped", "cluster_busy")] == 1
    # East answers: its first action ends and is recorded once; close waits for it.
    release.set()
    east_thread = handler._busy["east"]
    east_thread.join(timeout=10)
    applied = [e for e in controller.journal.entries() if e.result == ActionResult.APPLIED.value]
    assert sorted(e.cluster for e in applied) == ["east", "west"]  # each split once
    handler.close(wait_s=10)


def test_reconciling_open_intents_does_not_wait_for_a_busy_cluster(
    tmp_path: Path, release: threading.Event
) -> None:
    east = HungAdmin(release)
    controller = make(tmp_path, ByCluster({"east": east, "west": FakeAdmin()}))  # type: ignore[arg-type]
    decision = dataclasses.replace(_split_for("east"))
    worker = threading.Thread(target=controller.apply_split, args=(decision,), daemon=True)
    worker.start()
    assert east.asked.wait(timeout=10)
    # East's intent is open because its call is in flight, not because of a crash.
    assert controller.reconcile() == []
    release.set()
    worker.join(timeout=10)
    assert not worker.is_alive()
    controller.close()


def _split_for(cluster: str) -> object:
    from tests.controller.test_controller_apply import split_decision

    return dataclasses.replace(split_decision(), cluster=cluster)


def test_batch_wait_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="batch_wait_s"):
        ControllerHandler(
            make(tmp_path, FakeAdmin()),
            thresholds=Thresholds(),
            detection=DetectionSettings(),
            batch_wait_s=0,
        )
