"""A split whose bundle Pulsar no longer knows: 412 (`NamespaceBundles.validateBundle`) reads
the layout back and ends `stale` or `applied`, 404 is the namespace gone, and a 204 whose
layout read still shows the parent (a load balancer's lagging answer) is rechecked, not failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from balancer.controller.clock import FakeClock
from balancer.core.bundles import BundleRange, NamespaceBundles
from balancer.core.results import ActionResult
from balancer.pulsar import NotFoundError, PreconditionFailedError
from tests.controller.test_controller_apply import (
    PARENT,
    FakeAdmin,
    make,
    split_decision,
)

MID = PARENT.lower + PARENT.width // 2
SPLIT_CALL = "split:specified_positions_divide:True"


@dataclass
class RacingAdmin(FakeAdmin):
    """Pulsar's own auto-split (or our earlier attempt) changes the bundle before our split
    lands: the split answers 412 "Cannot find bundle in the bundles list"."""

    boundaries_first: tuple[int, ...] = (MID + 1,)

    def split_bundle(
        self,
        namespace: str,
        bundle: BundleRange | str,
        *,
        algorithm: str,
        boundaries: Sequence[int] = (),
        unload: bool = False,
    ) -> None:
        self.calls.append(f"split:{algorithm}:{unload}")
        assert isinstance(bundle, BundleRange)
        self.layout, _ = self.layout.split(bundle, self.boundaries_first)
        raise PreconditionFailedError(
            "HTTP 412: Cannot find bundle in the bundles list",
            status=412,
            reason="Cannot find bundle in the bundles list",
        )


def test_a_412_after_someone_else_split_the_bundle_is_stale(tmp_path: Path) -> None:
    admin = RacingAdmin()
    controller = make(tmp_path, admin)
    outcome = controller.apply_split(split_decision())
    assert outcome.result is ActionResult.STALE, outcome.detail
    assert "412" in outcome.detail and "changed by someone else" in outcome.detail
    assert admin.calls == ["get_bundles", SPLIT_CALL, "get_bundles"]  # read back, not re-sent
    entry = controller.journal.get("split-1")
    assert entry is not None and entry.result == "stale"


def test_a_412_when_our_boundaries_are_already_there_is_applied(tmp_path: Path) -> None:
    admin = RacingAdmin(boundaries_first=(MID,))  # e.g. an earlier attempt did land
    outcome = make(tmp_path, admin).apply_split(split_decision())
    assert outcome.result is ActionResult.APPLIED and outcome.children == 2, outcome.detail


@dataclass
class GoneAdmin(FakeAdmin):
    def split_bundle(self, *args: object, **kwargs: object) -> None:
        self.calls.append("split")
        raise NotFoundError("HTTP 404: Namespace does not exist", status=404)


def test_a_404_on_split_is_the_namespace_gone(tmp_path: Path) -> None:
    admin = GoneAdmin()
    outcome = make(tmp_path, admin).apply_split(split_decision())
    assert outcome.result is ActionResult.STALE and "namespace gone" in outcome.detail
    assert admin.calls == ["get_bundles", "split"]  # nothing to read back


@dataclass
class LaggingAdmin(FakeAdmin):
    """A layout read through a load balancer answers from before the split for `lag` reads."""

    lag: int = 1
    _before: NamespaceBundles | None = None

    def split_bundle(self, *args: object, **kwargs: object) -> None:
        self._before = self.layout
        super().split_bundle(*args, **kwargs)  # type: ignore[arg-type]

    def get_bundles(self, namespace: str) -> NamespaceBundles:
        if self._before is not None and self.lag > 0:
            self.lag -= 1
            self.calls.append("get_bundles")
            return self._before
        return super().get_bundles(namespace)


def test_a_204_whose_layout_still_shows_the_parent_is_rechecked_not_failed(
    tmp_path: Path,
) -> None:
    admin = LaggingAdmin()
    controller = make(tmp_path, admin)
    outcome = controller.apply_split(split_decision())
    assert outcome.result is ActionResult.UNKNOWN, outcome.detail
    assert "204" in outcome.detail
    assert controller.reconcile() == [("split-1", ActionResult.APPLIED)]
    assert admin.calls.count(SPLIT_CALL) == 1


def test_a_204_that_changed_nothing_fails_once_settled(tmp_path: Path) -> None:
    clock = FakeClock()
    controller = make(tmp_path, FakeAdmin(apply_splits=False), clock)
    assert controller.apply_split(split_decision()).result is ActionResult.UNKNOWN
    assert controller.reconcile() == []  # may be a lagging read: not failed yet
    clock.advance(61)
    assert controller.reconcile() == [("split-1", ActionResult.FAILED)]
    entry = controller.journal.get("split-1")
    assert entry is not None and entry.result == "failed"
