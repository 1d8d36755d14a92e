"""Bundle split algorithms: Pulsar's four, exactly as Pulsar computes them, and ours.

`compute_split` runs one algorithm on a bundle and its topics and returns the boundaries
with the children and their loads. Purely computational, with no side effects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from balancer.core.bundles import BundleRange, format_position
from balancer.core.load import TopicLoad
from balancer.core.split.balanced import (
    Targets,
    balanced_boundaries,
    balanced_flow_divide,
    over_threshold,
)
from balancer.core.split.builtin import (
    flow_or_qps_equally_divide,
    range_equally_divide,
    specified_positions_divide,
    topic_count_equally_divide,
)
from balancer.core.split.columns import TopicColumns
from balancer.core.split.model import (
    ChildLoad,
    SplitAlgorithm,
    SplitError,
    SplitOptions,
    SplitResult,
    child_loads,
    topics_in,
)

__all__ = [
    "ALGORITHMS",
    "ChildLoad",
    "SplitAlgorithm",
    "SplitError",
    "SplitOptions",
    "SplitResult",
    "Targets",
    "TopicColumns",
    "balanced_flow_divide",
    "compute_split",
    "flow_or_qps_equally_divide",
    "over_threshold",
    "range_equally_divide",
    "specified_positions_divide",
    "topic_count_equally_divide",
]

SplitFunction = Callable[[BundleRange, Sequence[TopicLoad], SplitOptions], tuple[int, ...]]

ALGORITHMS: dict[SplitAlgorithm, SplitFunction] = {
    SplitAlgorithm.RANGE_EQUALLY_DIVIDE: range_equally_divide,
    SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE: topic_count_equally_divide,
    SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE: specified_positions_divide,
    SplitAlgorithm.FLOW_OR_QPS_EQUALLY_DIVIDE: flow_or_qps_equally_divide,
    SplitAlgorithm.BALANCED_FLOW_DIVIDE: balanced_flow_divide,
}


def compute_split(
    algorithm: SplitAlgorithm,
    bundle: BundleRange,
    topics: Sequence[TopicLoad],
    options: SplitOptions = SplitOptions(),  # noqa: B008 - frozen, so a shared default is safe
) -> SplitResult:
    """Run one algorithm; boundaries `()` (and the parent as the only child) for "no split".

    A bundle of width <= 1 is never split (Pulsar cannot). A Pulsar algorithm whose raw
    boundaries Pulsar's own split step would reject (not strictly inside the bundle, or
    repeated) raises `SplitError` naming them, as the broker would fail that split.
    """
    algorithm = SplitAlgorithm(algorithm)
    columns = TopicColumns.from_topics(topics).within(bundle)
    boundaries: tuple[int, ...] = ()
    if bundle.splittable and algorithm is SplitAlgorithm.BALANCED_FLOW_DIVIDE:
        boundaries = balanced_boundaries(bundle, columns, options)  # columns built once
    elif bundle.splittable:
        boundaries = ALGORITHMS[algorithm](bundle, topics_in(bundle, topics), options)
    bad = [b for b in boundaries if not bundle.strictly_inside(b)]
    if bad:
        raise SplitError(
            f"{algorithm} gave boundaries {[format_position(b) for b in bad]} outside bundle "
            f"{bundle}; Pulsar would reject this split"
        )
    if len(set(boundaries)) != len(boundaries) or list(boundaries) != sorted(boundaries):
        raise SplitError(
            f"{algorithm} gave repeated boundaries {[format_position(b) for b in boundaries]}; "
            "Pulsar would reject this split"
        )
    return SplitResult(
        algorithm=algorithm,
        bundle=bundle,
        boundaries=boundaries,
        children=child_loads(bundle, boundaries, columns),
    )
