"""Per-namespace policies (limits, algorithm, bundle cap, offload), with glob overrides.

Defaults are Pulsar's (`loadBalancerNamespaceBundleMax*`, `loadBalancerNamespaceMaximumBundles`);
the bundle limits and the rule for reading them are in `balancer.core.limits`.
A namespace's policy is the defaults with the fields of the FIRST override whose glob
pattern matches `tenant/namespace` laid on top; later matching overrides are ignored, so
put specific patterns before general ones. Patterns are `fnmatch` globs matched
case-sensitively (`*` also matches `/`: `acme/*` covers every namespace of tenant `acme`).

Purely computational, with no side effects.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field, replace

from balancer.core.limits import BundleLimits
from balancer.core.split import SplitAlgorithm

# Pulsar's broker default (`loadBalancerNamespaceMaximumBundles`).
DEFAULT_MAX_BUNDLES = 128


@dataclass(frozen=True, slots=True)
class NamespacePolicy:
    """Everything the detector needs to know about one namespace."""

    limits: BundleLimits = field(default_factory=BundleLimits)
    algorithm: SplitAlgorithm = SplitAlgorithm.BALANCED_FLOW_DIVIDE
    max_bundles: int = DEFAULT_MAX_BUNDLES
    offload_threshold_bytes: int | None = None  # None: no size-based offload
    split_enabled: bool = True


@dataclass(frozen=True, slots=True)
class PolicyOverride:
    """Fields to change for namespaces matching `pattern`; None keeps the default."""

    pattern: str
    max_topics: int | None = None
    max_sessions: int | None = None
    max_msg_rate: float | None = None
    max_bandwidth_mbytes: float | None = None
    algorithm: SplitAlgorithm | None = None
    max_bundles: int | None = None
    offload_threshold_bytes: int | None = None
    offload_enabled: bool | None = None  # False turns offload off even with a default threshold
    split_enabled: bool | None = None

    def matches(self, namespace: str) -> bool:
        return fnmatch.fnmatchcase(namespace, self.pattern)

    def apply(self, base: NamespacePolicy) -> NamespacePolicy:
        limits = base.limits
        limit_changes = {
            name: value
            for name, value in (
                ("max_topics", self.max_topics),
                ("max_sessions", self.max_sessions),
                ("max_msg_rate", self.max_msg_rate),
                ("max_bandwidth_mbytes", self.max_bandwidth_mbytes),
            )
            if value is not None
        }
        if limit_changes:
            limits = replace(limits, **limit_changes)  # type: ignore[arg-type]
        offload = base.offload_threshold_bytes
        if self.offload_threshold_bytes is not None:
            offload = self.offload_threshold_bytes
        if self.offload_enabled is False:
            offload = None
        return NamespacePolicy(
            limits=limits,
            algorithm=self.algorithm if self.algorithm is not None else base.algorithm,
            max_bundles=self.max_bundles if self.max_bundles is not None else base.max_bundles,
            offload_threshold_bytes=offload,
            split_enabled=(
                self.split_enabled if self.split_enabled is not None else base.split_enabled
            ),
        )


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Default policy plus ordered overrides: `policy_for` applies the first match only."""

    defaults: NamespacePolicy = field(default_factory=NamespacePolicy)
    overrides: tuple[PolicyOverride, ...] = ()

    def policy_for(self, namespace: str) -> NamespacePolicy:
        for override in self.overrides:
            if override.matches(namespace):
                return override.apply(self.defaults)
        return self.defaults

    def min_offload_threshold_bytes(self) -> int | None:
        """The smallest threshold any namespace can have (what the stream must report), or None."""
        candidates: list[int] = []
        if self.defaults.offload_threshold_bytes is not None:
            candidates.append(self.defaults.offload_threshold_bytes)
        for override in self.overrides:
            if override.offload_enabled is False:
                continue
            if override.offload_threshold_bytes is not None:
                candidates.append(override.offload_threshold_bytes)
        return min(candidates) if candidates else None
