"""How a simulated broker vets a split request before running the algorithm: which
algorithm, and whether the caller's positions make sense (Pulsar's 412 answers)."""

from __future__ import annotations

from collections.abc import Sequence

from balancer.core.bundles import BundleRange, NamespaceBundles, format_position
from balancer.core.split import SplitAlgorithm, SplitOptions
from balancer.sim.scenarios import BrokerSettings
from balancer.sim.state import SimError

PULSAR_SPLIT_ALGORITHMS = (
    SplitAlgorithm.RANGE_EQUALLY_DIVIDE,
    SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE,
    SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE,
    SplitAlgorithm.FLOW_OR_QPS_EQUALLY_DIVIDE,
)


def check_supported(
    requested: str | None, broker: BrokerSettings, boundaries: Sequence[int]
) -> None:
    """The REST-level checks of a split naming its algorithm, before any redirect or lookup.

    Follows Pulsar's `NamespacesBase.internalSplitNamespaceBundleAsync`: a name outside the
    broker's `supportedNamespaceBundleSplitAlgorithms` is 412 with the list in Java's
    `List.toString` form; `specified_positions_divide` without boundaries is 412 too.
    """
    if not requested:
        return  # the broker default runs; Pulsar checks nothing here
    supported = broker.supported_split_algorithms
    if requested not in supported:
        raise SimError(
            412,
            "Unsupported namespace bundle split algorithm, supported algorithms are "
            f"[{', '.join(supported)}]",
        )
    if requested.lower() == SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE.value and not boundaries:
        raise SimError(
            412,
            "With specified_positions_divide split algorithm, splitBoundaries must not be empty",
        )


def choose_algorithm(
    requested: str | None, broker: BrokerSettings, boundaries: Sequence[int]
) -> SplitAlgorithm:
    """The algorithm to run: the requested one (or the broker default) if Pulsar would."""
    name = requested or broker.default_split_algorithm
    supported = [a.value for a in PULSAR_SPLIT_ALGORITHMS]
    if name not in supported:
        raise SimError(
            412,
            f"Unsupported namespace bundle split algorithm {name}, "
            f"supported algorithms are {supported}",
        )
    algo = SplitAlgorithm(name)
    if (
        algo is SplitAlgorithm.FLOW_OR_QPS_EQUALLY_DIVIDE
        and broker.default_split_algorithm != algo.value
    ):
        # Pulsar PR 17872: this algorithm only works as the broker's default.
        raise SimError(
            412,
            "Unsupported namespace bundle split algorithm flow_or_qps_equally_divide: "
            "it is not the broker's default split algorithm",
        )
    if algo is SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE and not boundaries:
        raise SimError(412, "SplitBoundaries can't be empty")
    return algo


def check_positions(algo: SplitAlgorithm, parent: BundleRange, boundaries: Sequence[int]) -> None:
    """Every caller position must lie strictly inside the bundle.

    Stricter than Pulsar, which drops such positions silently: a boundary outside the
    bundle means the caller's view of the layout is stale, and a test should see that.
    """
    if algo is not SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE:
        return  # the other algorithms ignore the body, as in Pulsar
    outside = [b for b in boundaries if not parent.strictly_inside(b)]
    if outside:
        raise SimError(
            412,
            f"Split boundaries {[format_position(b) for b in outside]} are not "
            f"strictly inside bundle {parent}",
        )


def split_options(broker: BrokerSettings, boundaries: Sequence[int]) -> SplitOptions:
    return SplitOptions(
        max_msg_rate=broker.max_msg_rate,
        max_bandwidth_mbytes=broker.max_bandwidth_mbytes,
        difference_threshold_pct=broker.flow_or_qps_difference_threshold_pct,
        positions=tuple(boundaries),
    )


def validate_bundle(layout: NamespaceBundles, bundle: BundleRange) -> None:
    """412 unless `bundle` is one of the layout's bundles, with Pulsar's reasons: split, unload
    and topicHashPositions go through `PulsarWebResource.validateNamespaceBundleRange` ->
    `NamespaceBundles.validateBundle` (binary search of the lower bound, then the upper one);
    404 is left for a missing namespace. A stale parent (already split) lands here."""
    if bundle.lower not in layout.boundaries:
        raise SimError(412, "Cannot find bundle in the bundles list")
    if not layout.has(bundle):
        raise SimError(412, "Invalid upper boundary for bundle")
