"""A simulated Pulsar peer group: clusters of brokers answering Pulsar's admin REST API over
real HTTP on 127.0.0.1, driven by a seeded traffic model over simulated time.

Public entry points: `load_scenario`, `PeerGroup.from_scenario`, `start_peer_group`.
"""

from balancer.sim.faults import FaultInjector
from balancer.sim.group import PeerGroup, RunningPeerGroup, SimulatedPeerGroup, start_peer_group
from balancer.sim.model import SimModel, SplitRecord
from balancer.sim.scenarios import Scenario, ScenarioError, load_scenario, parse_scenario
from balancer.sim.sim_clock import SimClock

__all__ = [
    "FaultInjector",
    "PeerGroup",
    "RunningPeerGroup",
    "Scenario",
    "ScenarioError",
    "SimClock",
    "SimModel",
    "SimulatedPeerGroup",
    "SplitRecord",
    "load_scenario",
    "parse_scenario",
    "start_peer_group",
]
