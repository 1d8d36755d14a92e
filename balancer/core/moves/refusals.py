"""Why Pulsar refuses an unload with destination: one vocabulary from the controller to the
exporter's labels (`pulsar_balancer_move_refusals_total{refusal}`, docs/operations.md).

Purely computational, with no side effects.
"""

from __future__ import annotations

from enum import StrEnum


class UnloadRefusal(StrEnum):
    """Why Pulsar refused an unload with destination (NamespacesBase
    .internalUnloadNamespaceBundleAsync), a typed flag of the outcome: the `refusal` label of
    `pulsar_balancer_move_refusals_total` and the audit line's `refusal`. The values never
    change (alerts select on them)."""

    # 412 from validateLeaderBrokerAsync, BEFORE the leader keeps the destination:
    NO_LEADER = "no_leader"  # "The current leader is empty."
    # "Redirected broker's service url is not configured.": the leader has no web service
    # URL for the request's scheme (an https admin URL, a leader without TLS): every move
    # through a non-leader broker fails until the brokers' config is fixed.
    LEADER_URL_MISSING = "leader_url_missing"
    # After the leader kept the destination under the bare range (the entry stays behind):
    BUNDLE_NOT_FOUND = "bundle_not_found"  # 412 validateNamespaceBundleRange: layout changed
    NAMESPACE_GONE = "namespace_gone"  # 404: `stale`
    # 412 "Failed to find ownership for ServiceUnit" (validateNamespaceBundleOwnershipAsync,
    # readOnly): no broker owns the bundle now (unloaded by someone else since the fresh
    # check); its next lookup takes the kept destination: ownership is read back.
    NOT_OWNED = "not_owned"
    INACTIVE_DESTINATION = "inactive_destination"  # 409, before the entry is written
    OTHER_412 = "other_412"  # a 412 reason not known here: failed, not stale


# Refusals that come after ModularLoadManagerImpl.setNamespaceBundleAffinity: the leader
# keeps the destination under the bundle's bare range until a lookup of ANY unowned bundle
# with that range uses it up.
AFFINITY_LEFT_BEHIND = frozenset(
    {UnloadRefusal.BUNDLE_NOT_FOUND, UnloadRefusal.NAMESPACE_GONE, UnloadRefusal.NOT_OWNED}
)

# 412 reasons of NamespaceBundles.validateBundle / PulsarWebResource
# .validateNamespaceBundleRange: the bundle is not in the namespace's layout (split, or a
# range never there).
_BUNDLE_NOT_FOUND = ("cannot find bundle", "invalid upper boundary", "invalid bundle range")


def classify_refusal(status: int | None, reason: str) -> UnloadRefusal | None:
    """What an unload-with-destination error means (None: not a refusal, e.g. a 5xx or no
    answer, read back instead)."""
    text = reason.lower()
    if status == 409:
        return UnloadRefusal.INACTIVE_DESTINATION
    if status == 404:
        return UnloadRefusal.NAMESPACE_GONE
    if status != 412:
        return None
    if "current leader is empty" in text:
        return UnloadRefusal.NO_LEADER
    if "redirected broker's service url is not configured" in text:
        return UnloadRefusal.LEADER_URL_MISSING
    if "failed to find ownership" in text:
        return UnloadRefusal.NOT_OWNED
    if any(needle in text for needle in _BUNDLE_NOT_FOUND) or (
        "bundle" in text and "not found" in text
    ):
        return UnloadRefusal.BUNDLE_NOT_FOUND
    return UnloadRefusal.OTHER_412
