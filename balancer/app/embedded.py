"""The embedded default: everything `pulsar-balancer run` needs when no config is given.

A simulated Pulsar peer group (conf/scenarios/default.yaml), an embedded Kafka-protocol
broker (tansu), and a config that points the balancer at both, all on 127.0.0.1, with its
state (checkpoint, journal, audit log) in a fresh directory.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

from balancer.app.config import BalancerConfig
from balancer.kafka.embedded import EmbeddedKafka
from balancer.sim import PeerGroup, RunningPeerGroup
from balancer.support.lifecycle import StopsOnExit

log = logging.getLogger(__name__)

DEFAULT_SCENARIO = Path(__file__).resolve().parents[2] / "conf" / "scenarios" / "default.yaml"
# One real second is one simulated minute: a two-minute demo shows two hours of traffic.
DEFAULT_TIME_SCALE = 60.0


def default_scenario_path() -> Path:
    if DEFAULT_SCENARIO.is_file():
        return DEFAULT_SCENARIO
    raise FileNotFoundError(
        f"default scenario not found at {DEFAULT_SCENARIO}; pass --scenario FILE"
    )


@dataclass
class EmbeddedStack(StopsOnExit):
    peers: RunningPeerGroup
    kafka: EmbeddedKafka
    config: BalancerConfig
    state_dir: Path

    @classmethod
    def start(
        cls,
        *,
        scenario: Path | None = None,
        time_scale: float = DEFAULT_TIME_SCALE,
        state_dir: Path | None = None,
        mode: str = "apply",
        metrics_port: int = 0,
        seed: int | None = None,
    ) -> EmbeddedStack:
        state = state_dir or Path(tempfile.mkdtemp(prefix="pulsar-balancer-"))
        state.mkdir(parents=True, exist_ok=True)
        peers = PeerGroup.from_scenario(
            scenario or default_scenario_path(), seed=seed, time_scale=time_scale
        ).start()
        try:
            kafka = EmbeddedKafka.start(log_path=state / "kafka.log")
        except Exception:
            peers.stop()
            raise
        config = BalancerConfig.embedded_default(
            bootstrap_servers=[kafka.bootstrap_servers],
            clusters=sorted(peers.admin_urls.items()),
            state_dir=state,
            mode="apply" if mode == "apply" else "dry-run",
            metrics_port=metrics_port,
        )
        log.info(
            "embedded stack: clusters %s, Kafka %s, state in %s",
            peers.admin_urls,
            kafka.bootstrap_servers,
            state,
        )
        return cls(peers=peers, kafka=kafka, config=config, state_dir=state)

    def stop(self) -> None:
        self.kafka.stop()
        self.peers.stop()
