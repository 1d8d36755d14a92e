"""The balancer's one configuration: typed, frozen and validated, loaded once from YAML.

Every model forbids unknown keys, so a typo fails at start-up with the key's path
(`controller.rate_limits.splits_per_minut: Extra inputs are not permitted`). Secrets are
never values here: a token or password is given as a file path or the NAME of an
environment variable, and `as_dict()` masks even those references.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, Self, get_args

from pydantic import Field, ValidationError, field_validator, model_validator

from balancer.app.config_base import FrozenModel as _Model
from balancer.app.config_base import env_name as _env_name
from balancer.app.kafka_config import KafkaConfig
from balancer.app.lease_config import WriterLeaseConfig
from balancer.app.moves_config import MovesConfig
from balancer.collector.rounds import DEFAULT_MAX_PARALLEL_PER_CLUSTER
from balancer.core.detect import DetectionSettings
from balancer.core.envelopes import (
    DEFAULT_ENVELOPE_FORMAT,
    DEFAULT_ENVELOPE_MAX_BYTES,
    DEFAULT_ENVELOPE_MAX_EVENTS,
    EnvelopeFormat,
)
from balancer.core.events import MAX_MESSAGE_BYTES
from balancer.core.limits import (
    DEFAULT_MAX_BANDWIDTH_MBYTES,
    DEFAULT_MAX_MSG_RATE,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_TOPICS,
    BundleLimits,
)
from balancer.core.sizes import parse_size
from balancer.core.split import SplitAlgorithm
from balancer.core.thresholds import (
    DEFAULT_MAX_BUNDLES,
    NamespacePolicy,
    PolicyOverride,
    Thresholds,
)
from balancer.core.window_rules import check_hit_count, check_windows
from balancer.support.yamlfile import read_yaml
from streaming.spark.master import SparkMasterError, check_master

# RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens.
_HOSTNAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)
_MASK = "***"
# Fields that point at a secret: their values are masked by as_dict().
SECRET_REFERENCE_FIELDS = frozenset({"token_file", "token_env", "password_file", "password_env"})
# An event is ~300 B plus its topic name: a smaller cap would drop events of long names.
MIN_ENVELOPE_MAX_BYTES = 4096


class ConfigError(ValueError):
    """The config file cannot be read or is invalid; the message names every bad key."""


def _parse_size(value: str | int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("must be a size like 10G or a number of bytes")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("must be >= 0")
        return value
    try:
        return parse_size(value)
    except ValueError as exc:
        raise ValueError(str(exc)) from None


def _is_ip(value: str) -> bool:
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        return False
    return True


def _not_specified_positions(value: SplitAlgorithm) -> SplitAlgorithm:
    if value is SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE:
        # The detector has no positions to give it; the controller uses it to APPLY splits.
        raise ValueError("specified_positions_divide cannot be a detection algorithm")
    return value


class SparkConfig(_Model):
    master: str = "local[2]"
    checkpoint_dir: Path = Path("state/checkpoints")
    # Fitted to Pulsar's 60 s stats interval (the collector's): a window holds one sample,
    # so the hit count counts distinct samples, and one window closes per minute, like
    # Pulsar's 1-minute check. The collector's round marker closes it once its round is
    # in; the watermark only for a round without one (docs/pipeline.md#when-a-window-closes).
    window_s: int = Field(default=60, gt=0)  # window length
    slide_s: int = Field(default=60, gt=0)  # a window starts every slide_s
    watermark_s: int = Field(default=60, ge=0)  # lateness accepted before a window closes
    # A closed window is emitted a batch after the one reading its marker: 15 s puts the
    # first split ~30 s before Pulsar's (bench.reaction_time).
    trigger_interval_s: int = Field(default=15, gt=0)  # micro-batch interval
    max_offsets_per_trigger: int | None = Field(default=200_000, gt=0)
    # An event stamped further ahead of the reader's clock is dead-lettered: it would push
    # the event-time watermark ahead and make every on-time event late (docs/events.md).
    max_future_skew_s: int = Field(default=600, gt=0)
    # The window state is kept per PIP-157 bucket: the stage's unit of parallelism.
    num_buckets: int = Field(default=4, ge=1, le=4096)
    # One task per core holds its buckets: each task of the stage costs a fixed time per batch.
    shuffle_partitions: int = Field(default=2, ge=1)
    # The JVMs' options (driver and executors). C1 only: C2 kept compiling in steady batches
    # (46 % of the JVM's CPU over minutes of a 500,000-topic stream); C1's code costs no more
    # here (docs/decisions.md#the-jvm-compiles-with-c1-only). "" leaves the JVM's defaults.
    jvm_options: str = "-XX:TieredStopAtLevel=1"

    @field_validator("master")
    @classmethod
    def _spark_master(cls, value: str) -> str:
        try:
            check_master(value)
        except SparkMasterError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _windows_fit(self) -> Self:
        # The stream's own rule (streaming.stage.windows.WindowSpec checks the same function).
        check_windows(self.window_s, self.slide_s, self.watermark_s, prefix="spark.")
        return self


class ClusterConfig(_Model):
    name: str = Field(min_length=1, pattern=r"^[^/\s]+$")
    admin_url: str
    token_file: Path | None = None
    token_env: str | None = None
    tls_ca_file: Path | None = None
    tls_verify: bool = True
    connect_timeout_s: float = Field(default=5.0, gt=0)
    request_timeout_s: float = Field(default=30.0, gt=0)
    # Broker web URLs the collector polls; empty: listed with GET /admin/v2/brokers/{cluster}.
    brokers: tuple[str, ...] = ()

    check_env = field_validator("token_env")(_env_name)

    @field_validator("admin_url")
    @classmethod
    def _url(cls, value: str) -> str:
        match = re.match(r"^(https?)://([^/?#]+)(/[^?#]*)?$", value)
        if match is None:
            raise ValueError("must be http(s)://host[:port][/prefix] without query")
        if "@" in match.group(2):
            raise ValueError("must not hold credentials; use token_file or token_env")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _one_token_source(self) -> Self:
        if self.token_file is not None and self.token_env is not None:
            raise ValueError("give token_file or token_env, not both")
        return self


# Kafka codecs the collector can send (kafka-python; lz4 with the `lz4` package).
Compression = Literal["none", "gzip", "lz4"]
COMPRESSION_CODECS: tuple[str, ...] = get_args(Compression)


class CollectorConfig(_Model):
    interval_s: float = Field(default=60.0, gt=0)  # Pulsar refreshes broker stats every 60 s
    # After each round (its retries included) send a marker: no event older than the next
    # round will come, so the stream closes the round's window without waiting for the
    # watermark (docs/pipeline.md#when-a-window-closes). Only with one collector writing the
    # stats topic: a marker speaks for every cluster.
    round_markers: bool = True
    # Events per Kafka message, an envelope keyed by namespace; 0 or 1: one JSON event per
    # message keyed by topic. Why 500: balancer.core.envelopes.DEFAULT_ENVELOPE_MAX_EVENTS.
    envelope_max_events: int = Field(default=DEFAULT_ENVELOPE_MAX_EVENTS, ge=0)
    # What an envelope is: an Arrow IPC stream, whose columns the stream reads for a fraction
    # of the CPU the same events cost in JSON (the read tasks were ~70 % of the stream's CPU:
    # docs/decisions.md#the-collector-sends-arrow-envelopes-issue-42), or {"events": [...]}
    # for other consumers of the stats topic. The stream reads both.
    envelope_format: EnvelopeFormat = DEFAULT_ENVELOPE_FORMAT
    # No message (key, value and Kafka's framing) larger: keep it at most the stats topic's
    # max.message.bytes. At least one long event; at most what the stream accepts.
    envelope_max_bytes: int = Field(
        default=DEFAULT_ENVELOPE_MAX_BYTES, ge=MIN_ENVELOPE_MAX_BYTES, le=MAX_MESSAGE_BYTES
    )
    # The codec of the collector's record batches. lz4: stats JSON shrinks ~10x, and the
    # readers (librdkafka in the read tasks, Spark's Kafka client) inflate it for far less
    # CPU than the broker and the fetch spend on the full bytes: +25-35 % events/s at 500k
    # topics (docs/decisions.md#lz4-on-the-stats-topic).
    compression: Compression = "lz4"
    # Brokers of one cluster fetched at once (every answer is held until sent: memory).
    # Clusters never wait for each other.
    max_parallel_per_cluster: int = Field(default=DEFAULT_MAX_PARALLEL_PER_CLUSTER, ge=1, le=256)
    # A cluster none of whose brokers was read for this many intervals fails /readyz.
    unread_intervals: int = Field(default=3, ge=1)

    check_size = field_validator("envelope_max_bytes", mode="before")(_parse_size)

    @property
    def compression_type(self) -> str | None:
        """kafka-python's `compression_type`."""
        return None if self.compression == "none" else self.compression


class ThresholdDefaults(_Model):
    max_topics: int = Field(default=DEFAULT_MAX_TOPICS, gt=0)
    max_sessions: int = Field(default=DEFAULT_MAX_SESSIONS, ge=0)  # 0 disables, as in Pulsar
    max_msg_rate: float = Field(default=DEFAULT_MAX_MSG_RATE, gt=0)
    max_bandwidth_mbytes: float = Field(default=DEFAULT_MAX_BANDWIDTH_MBYTES, gt=0)
    max_bundles: int = Field(default=DEFAULT_MAX_BUNDLES, ge=1)
    algorithm: SplitAlgorithm = SplitAlgorithm.BALANCED_FLOW_DIVIDE

    @field_validator("algorithm")
    @classmethod
    def _not_specified(cls, value: SplitAlgorithm) -> SplitAlgorithm:
        return _not_specified_positions(value)


class NamespaceOverride(_Model):
    """Per-namespace changes; the FIRST override whose glob matches wins (order matters)."""

    namespace: str = Field(min_length=1)  # fnmatch glob over tenant/namespace, e.g. "acme/*"
    max_topics: int | None = Field(default=None, gt=0)
    max_sessions: int | None = Field(default=None, ge=0)
    max_msg_rate: float | None = Field(default=None, gt=0)
    max_bandwidth_mbytes: float | None = Field(default=None, gt=0)
    max_bundles: int | None = Field(default=None, ge=1)
    algorithm: SplitAlgorithm | None = None
    split_enabled: bool | None = None
    offload_threshold: int | None = None  # size string like 10G, or bytes
    offload_enabled: bool | None = None

    check_size = field_validator("offload_threshold", mode="before")(_parse_size)

    @field_validator("algorithm")
    @classmethod
    def _not_specified(cls, value: SplitAlgorithm | None) -> SplitAlgorithm | None:
        return None if value is None else _not_specified_positions(value)

    def to_policy_override(self) -> PolicyOverride:
        return PolicyOverride(
            pattern=self.namespace,
            max_topics=self.max_topics,
            max_sessions=self.max_sessions,
            max_msg_rate=self.max_msg_rate,
            max_bandwidth_mbytes=self.max_bandwidth_mbytes,
            algorithm=self.algorithm,
            max_bundles=self.max_bundles,
            offload_threshold_bytes=self.offload_threshold,
            offload_enabled=self.offload_enabled,
            split_enabled=self.split_enabled,
        )


class ThresholdsConfig(_Model):
    defaults: ThresholdDefaults = ThresholdDefaults()
    overrides: tuple[NamespaceOverride, ...] = ()


class DetectionConfig(_Model):
    hit_count_threshold: int = Field(default=3, ge=1)
    min_completeness: float = Field(default=0.9, ge=0, le=1)
    max_splits_per_cycle: int = Field(default=10, ge=1)
    cooldown_s: float = Field(default=60.0, ge=0)
    difference_threshold_pct: float = Field(default=10.0, ge=0)
    fill_factor: float = Field(default=0.8, gt=0, le=1)
    topic_rows_min_load_ratio: float = Field(default=0.9, ge=0, le=1)


class RateLimitsConfig(_Model):
    splits_per_minute: int = Field(default=10, ge=0)  # cluster-wide; 0 forbids splits
    splits_per_minute_per_namespace: int = Field(default=3, ge=0)
    offloads_per_minute: int = Field(default=30, ge=0)
    offloads_per_minute_per_namespace: int = Field(default=10, ge=0)
    moves_per_minute: int = Field(default=60, ge=0)  # cluster-wide; 0 forbids moves
    moves_per_minute_per_namespace: int = Field(default=40, ge=0)


class BreakerConfig(_Model):
    failure_threshold: int = Field(default=5, ge=1)  # consecutive 5xx / unavailable answers
    cooloff_s: float = Field(default=60.0, gt=0)  # actions paused this long once open


class ControllerConfig(_Model):
    mode: Literal["dry-run", "apply"] = "dry-run"
    allow_namespaces: tuple[str, ...] = ("*",)
    deny_namespaces: tuple[str, ...] = ()
    unload_after_split: bool = True
    # A started offload (its 204) is followed through its status this long; one still
    # RUNNING after it is recorded `failed` (its bytes never counted).
    offload_follow_s: float = Field(default=1800.0, gt=0)
    # A moved bundle no broker owns yet (the modular load manager answers before the next
    # lookup places it) stays `unknown` this long, then is recorded `failed`.
    move_settle_s: float = Field(default=300.0, gt=0)
    # Set Pulsar's own shedder / auto-split off at start (apply mode only): they fight our
    # moves and splits. False: only warn (and export them) when they are on.
    disable_pulsar_shedder: bool = False
    disable_pulsar_auto_split: bool = False
    # `apply PLAN` refuses a plan older than this: the load and layouts it read have moved on.
    plan_max_age_s: float = Field(default=900.0, gt=0)
    rate_limits: RateLimitsConfig = RateLimitsConfig()
    breaker: BreakerConfig = BreakerConfig()
    # Batches in a row whose controller step failed before /readyz fails.
    unready_after_errors: int = Field(default=3, ge=1)
    journal_path: Path = Path("state/journal.sqlite3")
    audit_log_path: Path = Path("state/audit.jsonl")
    writer_lease: WriterLeaseConfig = WriterLeaseConfig()

    @property
    def uses_writer_lease(self) -> bool:
        return self.mode == "apply" and self.writer_lease.enabled


class OffloadConfig(_Model):
    enabled: bool = True
    default_threshold: int | None = 10 * 1024**3  # keep this much in BookKeeper; None: off

    check_size = field_validator("default_threshold", mode="before")(_parse_size)


class MetricsConfig(_Model):
    bind_address: str = "127.0.0.1"
    port: int = Field(default=9464, ge=0, le=65535)  # 0: any free port

    @field_validator("bind_address")
    @classmethod
    def _address(cls, value: str) -> str:
        if not _is_ip(value) and not _HOSTNAME.fullmatch(value):
            raise ValueError(
                "must be an IPv4 address (0.0.0.0 for every interface) or a host name: "
                "the metrics server listens on IPv4"
            )
        return value


class BalancerConfig(_Model):
    kafka: KafkaConfig = KafkaConfig()
    spark: SparkConfig = SparkConfig()
    clusters: tuple[ClusterConfig, ...] = Field(min_length=1)
    collector: CollectorConfig = CollectorConfig()
    thresholds: ThresholdsConfig = ThresholdsConfig()
    detection: DetectionConfig = DetectionConfig()
    controller: ControllerConfig = ControllerConfig()
    offload: OffloadConfig = OffloadConfig()
    metrics: MetricsConfig = MetricsConfig()
    moves: MovesConfig = MovesConfig()

    @field_validator("clusters")
    @classmethod
    def _unique_names(cls, value: tuple[ClusterConfig, ...]) -> tuple[ClusterConfig, ...]:
        names = [c.name for c in value]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate cluster names: {', '.join(duplicates)}")
        return value

    @model_validator(mode="after")
    def _hits_need_distinct_samples(self) -> Self:
        check_hit_count(self.detection.hit_count_threshold, self.spark.window_s, self.spark.slide_s)
        return self

    # --- views for the pure core -------------------------------------------------------------

    def thresholds_model(self) -> Thresholds:
        d = self.thresholds.defaults
        offload = self.offload.default_threshold if self.offload.enabled else None
        defaults = NamespacePolicy(
            limits=BundleLimits(
                max_topics=d.max_topics,
                max_sessions=d.max_sessions,
                max_msg_rate=d.max_msg_rate,
                max_bandwidth_mbytes=d.max_bandwidth_mbytes,
            ),
            algorithm=d.algorithm,
            max_bundles=d.max_bundles,
            offload_threshold_bytes=offload,
        )
        overrides = tuple(o.to_policy_override() for o in self.thresholds.overrides)
        if not self.offload.enabled:
            # Offload switched off globally wins over any namespace threshold.
            overrides = tuple(replace(o, offload_enabled=False) for o in overrides)
        return Thresholds(defaults=defaults, overrides=overrides)

    def detection_settings(self) -> DetectionSettings:
        d = self.detection
        return DetectionSettings(
            hit_count_threshold=d.hit_count_threshold,
            min_completeness=d.min_completeness,
            max_splits_per_cycle=d.max_splits_per_cycle,
            cooldown_ms=round(d.cooldown_s * 1000),
            difference_threshold_pct=d.difference_threshold_pct,
            fill_factor=d.fill_factor,
            topic_rows_min_load_ratio=d.topic_rows_min_load_ratio,
        )

    def cluster(self, name: str) -> ClusterConfig:
        for c in self.clusters:
            if c.name == name:
                return c
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        """The whole config as plain data, secret references masked: safe to log or print."""
        masked: dict[str, Any] = _mask(self.model_dump(mode="json"))
        return masked

    # --- construction ------------------------------------------------------------------------

    @classmethod
    def from_mapping(cls, data: Any, *, source: str = "config") -> BalancerConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: the top level must be a mapping of sections")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{source}: invalid configuration\n{format_errors(exc)}") from None

    @classmethod
    def embedded_default(
        cls,
        *,
        bootstrap_servers: Sequence[str],
        clusters: Sequence[tuple[str, str]],
        state_dir: Path,
        mode: Literal["dry-run", "apply"] = "apply",
        metrics_port: int = 0,
    ) -> BalancerConfig:
        """The config of the no-config run: embedded broker, simulated clusters, local state."""
        return cls.model_validate(
            {
                "kafka": {"bootstrap_servers": list(bootstrap_servers)},
                "spark": {
                    "checkpoint_dir": str(state_dir / "checkpoints"),
                    # The defaults' schedule on the demo's 5 s rounds: one round a window,
                    # closed by its round marker.
                    "window_s": 5,
                    "slide_s": 5,
                    "watermark_s": 5,
                    "trigger_interval_s": 5,
                },
                "clusters": [{"name": n, "admin_url": u} for n, u in clusters],
                "collector": {"interval_s": 5},
                "detection": {"cooldown_s": 10},
                "controller": {
                    "mode": mode,
                    "journal_path": str(state_dir / "journal.sqlite3"),
                    "audit_log_path": str(state_dir / "audit.jsonl"),
                    # Alone on its own broker: the shortest lease, since tansu's group join
                    # waits half the session timeout before the first assignment.
                    "writer_lease": {"lease_s": 10, "safety_margin_s": 2},
                },
                "metrics": {"port": metrics_port},
            }
        )


def _mask(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: (_MASK if k in SECRET_REFERENCE_FIELDS and v is not None else _mask(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_mask(v) for v in value]
    return value


def format_errors(exc: ValidationError) -> str:
    """One line per problem, `dotted.key.path: message`, never echoing the input value."""
    lines = []
    for error in exc.errors(include_url=False, include_input=False):
        path = ".".join(str(p) for p in error["loc"]) or "(top level)"
        message = error["msg"].removeprefix("Value error, ")
        lines.append(f"  {path}: {message}")
    return "\n".join(lines)


def load_config(path: Path | str) -> BalancerConfig:
    """Read and validate a YAML config file; raise ConfigError naming every bad key."""
    data = read_yaml(path, ConfigError, "the config file")
    return BalancerConfig.from_mapping(data, source=str(path))
