"""The contract suite's fixtures: `target` runs every test once per target, `sim` and `pulsar`.

`sim` always runs (the simulator over real HTTP). `pulsar` runs against the cluster named by
`PULSAR_ADMIN_URL`, or a testcontainers Pulsar standalone with `PULSAR_CONTRACT_CONTAINER=1`;
otherwise it is skipped with the reason. Both are started once per session.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.contract.targets import (
    ContractTarget,
    Namespace,
    real_target,
    real_target_reason,
    sim_target,
)


@pytest.fixture(scope="session", params=["sim", "pulsar"])
def target(request: pytest.FixtureRequest) -> Iterator[ContractTarget]:
    if request.param == "sim":
        with sim_target() as sim:
            yield sim
        return
    reason = real_target_reason()
    if reason is not None:
        pytest.skip(reason)
    with real_target() as real:
        yield real


@pytest.fixture(scope="module")
def shared_ns(target: ContractTarget) -> Namespace:
    """A namespace the module's tests only read: 4 bundles, >= 2 topics in each."""
    return target.namespace()


@pytest.fixture
def fresh_ns(target: ContractTarget) -> Namespace:
    """A namespace of the test's own, which it may split or offload."""
    return target.namespace()


@pytest.fixture
def peer_group(target: ContractTarget) -> ContractTarget:
    """The simulated peer group; a single real cluster cannot show a peer redirect."""
    if target.sim is None:
        pytest.skip("needs a peer group (PIP-8): a single cluster cannot show a peer redirect")
    return target
