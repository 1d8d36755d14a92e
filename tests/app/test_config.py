"""The typed config: the shipped example validates; bad keys fail naming the key; secrets masked."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from balancer.app.commands import validate_config
from balancer.app.config import BalancerConfig, ConfigError, load_config
from balancer.core.split import SplitAlgorithm
from tests.configs import with_setting

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "conf" / "balancer.yaml"
MINIMAL: dict[str, Any] = {"clusters": [{"name": "c1", "admin_url": "http://127.0.0.1:8080"}]}


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "balancer.yaml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def with_(path: str, value: Any) -> dict[str, Any]:
    """MINIMAL with one dotted key set."""
    return with_setting(MINIMAL, path, value)


def test_shipped_example_validates() -> None:
    config = load_config(EXAMPLE)
    assert [c.name for c in config.clusters] == ["pulsar-east", "pulsar-west"]
    assert config.controller.mode == "dry-run"
    policy = config.thresholds_model().policy_for("acme/orders")
    assert policy.limits.max_msg_rate == 50_000
    assert policy.offload_threshold_bytes == 50 * 1024**3
    tenant = config.thresholds_model().policy_for("acme/billing")
    assert tenant.algorithm is SplitAlgorithm.FLOW_OR_QPS_EQUALLY_DIVIDE
    assert tenant.max_bundles == 64 and tenant.offload_threshold_bytes == 10 * 1024**3
    audit = config.thresholds_model().policy_for("audit/x")
    assert not audit.split_enabled and audit.offload_threshold_bytes is None


def test_every_line_of_the_example_is_documented() -> None:
    for number, line in enumerate(EXAMPLE.read_text().splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#"):
            assert "#" in line, f"conf/balancer.yaml:{number} has no comment: {line!r}"


def test_minimal_config_has_pulsars_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, MINIMAL))
    d = config.thresholds.defaults
    limits = (d.max_topics, d.max_sessions, d.max_msg_rate, d.max_bandwidth_mbytes, d.max_bundles)
    assert limits == (1000, 1000, 30000, 100, 128)
    settings = config.detection_settings()
    assert (settings.hit_count_threshold, settings.max_splits_per_cycle) == (3, 10)
    assert config.controller.mode == "dry-run"


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (
            with_("controller.rate_limits.splits_per_minut", 3),
            "controller.rate_limits.splits_per_minut",
        ),
        (with_("clusters.0.token", "eyJhbGciOi.secret"), "clusters.0.token"),
        (with_("detection.hit_count_threshold", "three"), "detection.hit_count_threshold"),
        (with_("detection.fill_factor", 1.5), "detection.fill_factor"),
        (with_("detection.fill_factor", 0), "detection.fill_factor"),
        (with_("spark.window_s", 0), "spark.window_s"),
        (with_("spark.slide_s", 240), "spark"),
        (with_("controller.mode", "yolo"), "controller.mode"),
        (with_("offload.default_threshold", "10 parsecs"), "offload.default_threshold"),
        (
            with_("thresholds.defaults.algorithm", "specified_positions_divide"),
            "thresholds.defaults.algorithm",
        ),
        (with_("clusters.0.admin_url", "http://user:pw@host:8080"), "clusters.0.admin_url"),
        (with_("clusters.0.token_env", "abc.def-ghi"), "clusters.0.token_env"),
        ({"clusters": []}, "clusters"),
        ({}, "clusters"),
        ({"clusters": [MINIMAL["clusters"][0], MINIMAL["clusters"][0]]}, "clusters"),
        (with_("kafka.bootstrap_servers", ["no-port"]), "kafka.bootstrap_servers"),
        (with_("controller.offload_follow_s", 0), "controller.offload_follow_s"),
    ],
    ids=[
        "unknown-key",
        "literal-token-key",
        "wrong-type",
        "fill-factor-1.5",
        "fill-factor-0",
        "zero-window",
        "slide-longer-than-window",
        "bad-mode",
        "bad-size",
        "specified-positions-as-detection",
        "credentials-in-url",
        "token-env-not-a-name",
        "no-clusters",
        "clusters-missing",
        "duplicate-cluster",
        "server-without-port",
        "offload-follow-zero",
    ],
)
def test_invalid_config_names_the_key(tmp_path: Path, data: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, data))
    assert f"  {named}" in str(info.value)


def test_offload_follow_reaches_the_controller(tmp_path: Path) -> None:
    from balancer.app.controller_wiring import controller_settings

    config = load_config(write(tmp_path, with_("controller.offload_follow_s", 90)))
    assert controller_settings(config).offload_follow_s == 90.0
    default = load_config(write(tmp_path, MINIMAL))
    assert controller_settings(default).offload_follow_s == 1800.0


def test_the_move_keys_reach_the_controller(tmp_path: Path) -> None:
    from balancer.app.controller_wiring import build_controller, controller_settings
    from balancer.controller.clock import FakeClock
    from balancer.core.decisions import DecisionKind

    data = with_setting(with_("controller.move_settle_s", 30), "controller.rate_limits", {
        "moves_per_minute": 1, "moves_per_minute_per_namespace": 1,
    })  # fmt: skip
    config = load_config(write(tmp_path, data))
    assert controller_settings(config).move_settle_s == 30.0
    assert not config.controller.disable_pulsar_shedder
    assert not config.controller.disable_pulsar_auto_split
    controller = build_controller(
        config, object(),  # type: ignore[arg-type]
        clock=FakeClock(), journal_path=tmp_path / "j.sqlite3", audit_path=tmp_path / "a.jsonl",
    )  # fmt: skip
    assert controller.mover is None  # a client without unload-to-a-destination: moves fail
    limits = controller.limits
    assert limits.try_acquire(DecisionKind.MOVE, "east", "a/b") is None
    assert limits.try_acquire(DecisionKind.MOVE, "east", "a/c") == "cluster"
    controller.close()
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, with_("controller.move_settle_s", 0)))
    assert "  controller.move_settle_s" in str(info.value)


def test_the_pulsar_switches_are_checked_at_start_and_off_only_in_apply(tmp_path: Path) -> None:
    from balancer.app.controller_wiring import check_pulsar_switches_at_start

    class Admin:
        def __init__(self) -> None:
            self.writes: list[tuple[str, str, str]] = []

        def runtime_configuration(self, cluster: str) -> dict[str, str]:
            return {"loadBalancerSheddingEnabled": "true"}

        def set_dynamic_configuration(self, cluster: str, name: str, value: str) -> None:
            self.writes.append((cluster, name, value))

    told = with_("controller.disable_pulsar_shedder", True)
    admin = Admin()
    (state,) = check_pulsar_switches_at_start(load_config(write(tmp_path, told)), admin)
    assert admin.writes == [] and state.shedding is True  # dry-run: the default mode
    told = with_setting(told, "controller.mode", "apply")
    (state,) = check_pulsar_switches_at_start(load_config(write(tmp_path, told)), admin)
    assert admin.writes == [(state.cluster, "loadBalancerSheddingEnabled", "false")]
    assert check_pulsar_switches_at_start(load_config(write(tmp_path, told)), object()) == []


def test_the_switch_checks_hold_up_neither_the_start_nor_another_cluster(
    tmp_path: Path,
) -> None:
    """A blackholed cluster's reads take minutes (attempts x timeout): `run` starts the
    checks in the background, one thread per cluster."""
    import threading

    from balancer.app.controller_wiring import start_pulsar_switch_checks

    release = threading.Event()
    read: list[str] = []

    class Admin:
        def runtime_configuration(self, cluster: str) -> dict[str, str]:
            if cluster == "slow":
                release.wait(30)
            read.append(cluster)
            return {}

        def set_dynamic_configuration(self, cluster: str, name: str, value: str) -> None:
            raise AssertionError("nothing is told to turn a switch off")

    data = with_setting(
        with_("controller.mode", "apply"),
        "clusters",
        [
            {"name": "slow", "admin_url": "http://127.0.0.1:1"},
            {"name": "fast", "admin_url": "http://127.0.0.1:2"},
        ],
    )
    threads = start_pulsar_switch_checks(load_config(write(tmp_path, data)), Admin())
    assert [t.name for t in threads] == ["pulsar-switches-slow", "pulsar-switches-fast"]
    threads[1].join(timeout=30)
    assert read == ["fast"] and threads[0].is_alive()  # returned while "slow" still waits
    release.set()
    threads[0].join(timeout=30)
    assert read == ["fast", "slow"]


def test_error_never_echoes_a_pasted_secret(tmp_path: Path) -> None:
    secret = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.sig"
    for data in (with_("clusters.0.token_env", secret), with_("clusters.0.token", secret)):
        with pytest.raises(ConfigError) as info:
            load_config(write(tmp_path, data))
        assert secret not in str(info.value)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("clusters: [", "not valid YAML"), ("- a\n- b\n", "top level must be a mapping")],
    ids=["broken-yaml", "not-a-mapping"],
)
def test_unreadable_files(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        load_config(write(tmp_path, text))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")


def test_frozen() -> None:
    config = BalancerConfig.from_mapping(MINIMAL)
    with pytest.raises(ValueError, match="frozen"):
        config.controller.mode = "apply"  # type: ignore[misc]


def test_secret_references_masked() -> None:
    config = load_config(EXAMPLE)
    text = json.dumps(config.as_dict())
    for reference in ("/var/run/secrets/pulsar-east/token", "PULSAR_WEST_TOKEN", "KAFKA_PASSWORD"):
        assert reference not in text
    assert config.clusters[0].token_file == Path("/var/run/secrets/pulsar-east/token")
    assert config.as_dict()["clusters"][0]["token_file"] == "***"
    assert config.as_dict()["clusters"][1]["token_file"] is None


def test_offload_disabled_globally_wins(tmp_path: Path) -> None:
    data = with_("offload.enabled", False)
    data["thresholds"] = {"overrides": [{"namespace": "a/*", "offload_threshold": "1G"}]}
    th = load_config(write(tmp_path, data)).thresholds_model()
    assert th.policy_for("a/b").offload_threshold_bytes is None
    assert th.min_offload_threshold_bytes() is None


def test_embedded_default(tmp_path: Path) -> None:
    config = BalancerConfig.embedded_default(
        bootstrap_servers=["127.0.0.1:39092"],
        clusters=[("sim-a", "http://127.0.0.1:8081"), ("sim-b", "http://127.0.0.1:8082")],
        state_dir=tmp_path,
    )
    assert config.controller.mode == "apply"
    assert config.controller.journal_path == tmp_path / "journal.sqlite3"
    assert [c.name for c in config.clusters] == ["sim-a", "sim-b"]
    # The default schedule at the demo's pace: one collector round a window, closed by
    # its round marker (issue 36).
    assert config.spark.window_s == config.spark.slide_s == config.collector.interval_s
    assert config.collector.round_markers


def test_the_default_schedule_holds_one_sample_a_window_closed_by_round_markers() -> None:
    config = BalancerConfig.from_mapping({"clusters": [{"name": "c", "admin_url": "http://h"}]})
    assert config.spark.window_s == config.spark.slide_s == config.collector.interval_s == 60
    assert config.collector.round_markers
    assert config.spark.trigger_interval_s == 15


def _cli(path: Path, *extra: str) -> int:
    parser = argparse.ArgumentParser()
    validate_config.register(parser.add_subparsers())
    args = parser.parse_args(["validate-config", str(path), *extra])
    result: int = args.handler(args)
    return result


def test_validate_config_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The example names files of the Kubernetes pod: check the file alone here.
    assert _cli(EXAMPLE, "--schema-only", "--show") == 0
    out = capsys.readouterr().out
    assert "valid (2 cluster(s), mode dry-run" in out and "PULSAR_WEST_TOKEN" not in out
    bad = write(tmp_path, with_("detection.fill_factor", 1.5))
    assert _cli(bad) == 2
    assert "detection.fill_factor" in capsys.readouterr().err


def test_one_stats_sample_cannot_make_up_every_hit(tmp_path: Path) -> None:
    # 180 s windows sliding every 60 s: one spike sample lies in 3 windows = 3 hits.
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, with_("spark.window_s", 180)))
    assert "detection.hit_count_threshold (3) must exceed" in str(info.value)
    assert "spark.window_s / spark.slide_s (3)" in str(info.value)
    # One more hit makes the same windows safe.
    data = with_("spark.window_s", 180)
    data["detection"] = {"hit_count_threshold": 4}
    assert load_config(write(tmp_path, data)).detection.hit_count_threshold == 4


def test_window_must_be_a_multiple_of_the_slide(tmp_path: Path) -> None:
    # The stream refuses it at start; validation must refuse it first, naming both settings.
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, with_("spark.window_s", 100)))
    assert "spark.window_s (100) must be a multiple of spark.slide_s (60)" in str(info.value)
    assert "Value error" not in str(info.value)


def test_the_stream_has_no_window_defaults_of_its_own() -> None:
    from streaming.spark.job import StreamSettings
    from streaming.stage.windows import WindowSpec

    with pytest.raises(TypeError, match="window_s"):
        StreamSettings(bootstrap_servers="h:1", topic="t", checkpoint_dir="c")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        WindowSpec()  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("data", "named", "fragment"),
    [
        (with_("kafka.dead_letter_topic", "pulsar-topic-stats"), "kafka",
         "kafka.dead_letter_topic must differ from kafka.stats_topic"),
        (with_("spark.master", "yarn-please"), "spark.master", "is not a Spark master URL"),
        (with_("spark.master", "local[0]"), "spark.master", "at least 1 thread"),
        (with_("spark.master", "spark://host"), "spark.master", "spark://host:port"),
        (with_("metrics.bind_address", "0.0.0.0:9464"), "metrics.bind_address",
         "IPv4 address"),
        (with_("metrics.bind_address", "my host"), "metrics.bind_address", "IPv4 address"),
        (with_("metrics.bind_address", "::"), "metrics.bind_address", "listens on IPv4"),
        (with_("kafka.security", {"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"}),
         "kafka.security", "needs kafka.security.username and kafka.security.password_file"),
    ],
    ids=["dead-letters-loop", "yarn-please", "local-0", "standalone-no-port",
         "address-with-port", "address-with-space", "ipv6", "sasl-without-login"],
)  # fmt: skip
def test_what_the_stream_would_refuse_is_refused_here(
    tmp_path: Path, data: dict[str, Any], named: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, data))
    assert f"  {named}: " in str(info.value) and fragment in str(info.value)


@pytest.mark.parametrize(
    "master",
    ["local", "local[*]", "local[4,2]", "spark://a:7077,b:7077", "yarn",
     "k8s://https://kubernetes.default.svc:443"],
)  # fmt: skip
def test_spark_masters_spark_accepts(tmp_path: Path, master: str) -> None:
    assert load_config(write(tmp_path, with_("spark.master", master))).spark.master == master


@pytest.mark.parametrize(
    "address", ["0.0.0.0", "127.0.0.1", "localhost", "balancer-0.pulsar.svc.cluster.local"]
)
def test_bind_addresses(tmp_path: Path, address: str) -> None:
    config = load_config(write(tmp_path, with_("metrics.bind_address", address)))
    assert config.metrics.bind_address == address


def test_binary_config_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "balancer.yaml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (
        f"{path}: cannot read the config file: not UTF-8 text (byte 0x89 at offset 0)"
    )


def test_the_collector_sends_envelopes_by_default_under_a_1_mib_cap(tmp_path: Path) -> None:
    collector = load_config(write(tmp_path, MINIMAL)).collector
    assert (collector.envelope_max_events, collector.envelope_max_bytes) == (500, 1024 * 1024)
    # The shipped example states the defaults (and k8s/base is byte-equal to it).
    example = load_config(EXAMPLE).collector
    assert (example.envelope_max_events, example.envelope_max_bytes) == (500, 1048576)


def test_the_collector_sends_arrow_envelopes_by_default(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, MINIMAL)).collector.envelope_format == "arrow"
    assert load_config(EXAMPLE).collector.envelope_format == "arrow"
    as_json = load_config(write(tmp_path, with_("collector.envelope_format", "json"))).collector
    assert as_json.envelope_format == "json"
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, with_("collector.envelope_format", "avro")))
    assert "  collector.envelope_format: " in str(info.value) and "'arrow'" in str(info.value)


def test_the_collector_compresses_with_lz4_by_default(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, MINIMAL)).collector.compression_type == "lz4"
    assert load_config(EXAMPLE).collector.compression == "lz4"
    none = load_config(write(tmp_path, with_("collector.compression", "none"))).collector
    assert none.compression_type is None  # kafka-python's "no codec"
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, with_("collector.compression", "snappy")))
    assert "  collector.compression: " in str(info.value) and "'lz4'" in str(info.value)


@pytest.mark.parametrize(
    ("value", "expected"), [("512K", 512 * 1024), (4096, 4096), ("8M", 8 * 1024 * 1024)]
)
def test_the_envelope_byte_cap_takes_sizes(tmp_path: Path, value: Any, expected: int) -> None:
    config = load_config(write(tmp_path, with_("collector.envelope_max_bytes", value)))
    assert config.collector.envelope_max_bytes == expected


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("collector.envelope_max_bytes", 4095, "greater than or equal to 4096"),
        # The stream rejects larger messages whole (too_large).
        ("collector.envelope_max_bytes", "9M", "less than or equal to 8388608"),
        ("collector.envelope_max_bytes", "lots", "invalid size"),
        ("collector.envelope_max_events", -1, "greater than or equal to 0"),
    ],
)
def test_envelope_caps_out_of_range_are_refused(
    tmp_path: Path, key: str, value: Any, fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, with_(key, value)))
    assert f"  {key}: " in str(info.value) and fragment in str(info.value)
