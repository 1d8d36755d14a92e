"""The single-writer lease's local state machine, with the times given (no clock)."""

from __future__ import annotations

import pytest

from balancer.core.lease import LeaseState

VALIDITY_S = 25.0


@pytest.fixture
def state() -> LeaseState:
    return LeaseState(identity="me:1", validity_s=VALIDITY_S)


def test_not_held_until_the_group_assigns_it(state: LeaseState) -> None:
    state.confirm(100.0)  # a heartbeat of a standby proves nothing about the lease
    status = state.status(100.0)
    assert not status.held and status.holder is None
    assert status.detail == "standby: writer lease not acquired yet"


def test_assigned_but_unconfirmed_is_not_held(state: LeaseState) -> None:
    state.assign()
    status = state.status(100.0)
    assert not status.held and "not confirmed" in status.detail


def test_valid_until_the_confirmed_send_time_plus_validity(state: LeaseState) -> None:
    state.assign()
    state.confirm(100.0)
    assert state.status(100.0).held
    held = state.status(124.9)
    assert held.held and held.holder == "me:1" and held.valid_for_s == pytest.approx(0.1)
    expired = state.status(125.0)  # e.g. resumed after a SIGSTOP: the clock ran on
    assert not expired.held and expired.holder is None
    assert "expired" in expired.detail and "25.0 s ago" in expired.detail


def test_a_later_confirmation_extends_an_older_one_never_shortens(state: LeaseState) -> None:
    state.assign()
    state.confirm(100.0)
    state.confirm(110.0)
    state.confirm(105.0)  # an answer that arrived late: its send time is older
    assert state.status(134.9).held
    assert not state.status(135.0).held


def test_revoked_is_invalid_at_once_and_stays_so(state: LeaseState) -> None:
    state.assign()
    state.confirm(100.0)
    state.revoke("the group moved the writer lease to another member")
    status = state.status(100.5)  # well within the old deadline
    assert not status.held
    assert status.detail == "standby: the group moved the writer lease to another member"
    state.confirm(101.0)  # a heartbeat answered after the revoke does not bring it back
    assert not state.status(101.5).held


def test_reassigned_needs_a_new_confirmation(state: LeaseState) -> None:
    state.assign()
    state.confirm(100.0)
    state.revoke("this member left the group")
    state.assign()
    assert not state.status(101.0).held  # the old confirmation belongs to the old grant
    state.confirm(102.0)
    assert state.status(103.0).held


def test_a_standby_names_the_holder(state: LeaseState) -> None:
    state.observe_holder("other:2")
    status = state.status(0.0)
    assert not status.held and status.holder == "other:2"
    assert status.detail == "standby: writer lease held by other:2"
    assert status.as_dict() == {
        "role": "standby",
        "held": False,
        "holder": "other:2",
        "detail": "standby: writer lease held by other:2",
    }


def test_the_holders_own_name_is_not_a_standbys_holder(state: LeaseState) -> None:
    state.observe_holder("me:1")  # told before this member's own assignment is applied
    assert state.status(0.0).holder is None
    state.assign()
    state.confirm(0.0)
    state.observe_holder("other:2")  # a holder is not talked out of its lease
    assert state.status(1.0).held and state.status(1.0).holder == "me:1"


def test_validity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="validity_s"):
        LeaseState(identity="x", validity_s=0)
