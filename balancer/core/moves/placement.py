"""Where a bundle may go: namespace isolation policies, anti-affinity groups with failure
domains, and the topic limit. Pulsar's admin unload path may not check these for us (the
extensible load manager applies no isolation or anti-affinity filter to an explicit
destination), so the mover checks them itself.

Purely computational, with no side effects.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from balancer.core.moves.model import BrokerState, IsolationPolicy, PlacementRules

DEFAULT_DOMAIN = "default"  # LoadManagerShared.DEFAULT_DOMAIN: brokers in no failure domain

# NamespaceService's system namespaces (isSystemServiceNamespace): `pulsar/system`, the
# brokers' heartbeat namespaces (HEARTBEAT_NAMESPACE_PATTERN `pulsar/<cluster>/<host:port>`,
# HEARTBEAT_NAMESPACE_PATTERN_V2 `pulsar/<host:port>`) and the SLA monitor's
# (SLA_NAMESPACE_PATTERN `sla-monitor/<cluster>/<host:port>`). Each broker owns its own
# heartbeat namespace; none of them is user load to balance.
SYSTEM_NAMESPACE = "pulsar/system"
_SYSTEM_PATTERNS = (
    re.compile(r"pulsar/[^/]+/([^:]+:\d+)"),
    re.compile(r"pulsar/([^:]+:\d+)"),
    re.compile(r"sla-monitor/[^/]+/([^:]+:\d+)"),
)


def is_system_namespace(namespace: str) -> bool:
    """`tenant/ns` is one of Pulsar's own namespaces (never moved)."""
    return namespace == SYSTEM_NAMESPACE or any(p.fullmatch(namespace) for p in _SYSTEM_PATTERNS)


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re.Pattern[str] | None:
    """The pattern as Python reads it; None when Python cannot read it as Java does: a
    compile error (Java-only syntax: `\\Q...\\E`, `\\p{...}`, `(?<name>...)`) or a
    FutureWarning (a Java class intersection `[a-z&&[^e]]` or nested class Python would read
    otherwise)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            return re.compile(pattern)
    except (re.error, FutureWarning):
        return None


def unreadable_patterns(policies: Iterable[IsolationPolicy]) -> tuple[str, ...]:
    """The patterns of the policies Python cannot read as Java does, sorted: with any of them
    the cluster's isolation rules are unreadable (a pattern matching nothing would turn
    isolated brokers into shared ones)."""
    return tuple(
        sorted(
            {
                pattern
                for p in policies
                for pattern in (*p.namespaces, *p.primary, *p.secondary)
                if _compiled(pattern) is None
            }
        )
    )


def _matches_any(patterns: Iterable[str], text: str) -> bool:
    # Java's String.matches: the whole text (NamespaceIsolationPolicyImpl.isApplicable,
    # matchesBrokerRegex).
    for pattern in patterns:
        compiled = _compiled(pattern)
        if compiled is not None and compiled.fullmatch(text):
            return True
    return False


def same_group(a: str | None, b: str | None) -> bool:
    """Two anti-affinity group names as LoadManagerShared compares them: String
    .equalsIgnoreCase (per char: equal, or equal upper-cased, or equal lower-cased); a blank
    name is no group (StringUtils.isBlank)."""
    if a is None or b is None or not a.strip() or not b.strip() or len(a) != len(b):
        return False
    pairs = zip(a, b, strict=True)
    return all(x == y or x.upper() == y.upper() or x.lower() == y.lower() for x, y in pairs)


def _names_broker(patterns: Iterable[str], broker: BrokerState) -> bool:
    """Pulsar matches policies against the broker's host; a pattern that names the whole id
    `host:port` is taken too, to tell apart brokers that share a host (as the simulator's
    do, all on 127.0.0.1)."""
    patterns = tuple(patterns)
    return _matches_any(patterns, broker.host) or _matches_any(patterns, broker.broker)


def policy_for(namespace: str, rules: PlacementRules) -> IsolationPolicy | None:
    """The isolation policy of a namespace: the first (by name) whose namespace regexes match."""
    for policy in sorted(rules.isolation, key=lambda p: p.name):
        if _matches_any(policy.namespaces, namespace):
            return policy
    return None


def is_shared_broker(broker: BrokerState, rules: PlacementRules) -> bool:
    """A broker that is no policy's primary (NamespaceIsolationPolicies.isSharedBroker):
    the brokers a namespace under no policy may use."""
    return not any(_names_broker(p.primary, broker) for p in rules.isolation)


def isolation_allowed(
    namespace: str, brokers: Sequence[BrokerState], rules: PlacementRules
) -> frozenset[str]:
    """The active brokers the isolation policies allow for a namespace.

    Follows LoadManagerShared.applyNamespacePolicies: a namespace under a policy goes to its
    primary brokers, and also to its secondary ones when fewer than `min_primary_brokers`
    primaries are active (auto_failover_policy min_limit); a namespace under no policy goes
    to shared brokers only.
    """
    if unreadable_patterns(rules.isolation):
        return frozenset()  # rules that cannot be read allow nothing (the planner says why)
    active = [b for b in brokers if b.active]
    policy = policy_for(namespace, rules)
    if policy is None:
        return frozenset(b.broker for b in active if is_shared_broker(b, rules))
    primaries = {b.broker for b in active if _names_broker(policy.primary, b)}
    # MinAvailablePolicy.shouldFailoverToSecondary: primaries < min_limit (0: never).
    if len(primaries) >= policy.min_primary_brokers:
        return frozenset(primaries)
    secondaries = {b.broker for b in active if _names_broker(policy.secondary, b)}
    return frozenset(primaries | secondaries)


def anti_affinity_allowed(
    candidates: Iterable[str],
    group_counts: Mapping[str, int],
    domains: Mapping[str, str | None],
    *,
    domains_enabled: bool,
) -> frozenset[str]:
    """Keep the candidates whose failure domain, then whose broker, hold the fewest
    NAMESPACES of the group (LoadManagerShared.filterAntiAffinityGroupOwnedBrokers and
    filterDomainsNotHavingLeastNumberAntiAffinityNamespaces). `group_counts`: broker -> the
    group's namespaces with a bundle on it (without the bundle being placed). The domain
    step applies only with `domains_enabled` (failureDomainsEnabled) and a domain defined;
    a broker in none is in domain "default"."""
    kept = sorted(set(candidates))
    if not kept:
        return frozenset()
    if domains_enabled and any(domains.get(b) for b in domains):
        per_domain: dict[str, int] = {}
        for b in kept:
            domain = domains.get(b) or DEFAULT_DOMAIN
            per_domain[domain] = per_domain.get(domain, 0) + group_counts.get(b, 0)
        least_domain = min(per_domain.values())
        kept = [b for b in kept if per_domain[domains.get(b) or DEFAULT_DOMAIN] == least_domain]
    least = min(group_counts.get(b, 0) for b in kept)
    return frozenset(b for b in kept if group_counts.get(b, 0) == least)
