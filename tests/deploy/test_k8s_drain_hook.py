"""The broker drain hook (k8s/broker-drain-hook, issue 43 point 4): renders onto a stand-in of
the Pulsar Helm chart's broker StatefulSet and validates; the broker is stopped only after
`pulsar-balancer drain --wait` returns; the grace period covers the drain; no RBAC; the
hook's config reaches the balancer's marks topic and writer-lease group."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from balancer.app.config import load_config
from tests.deploy.test_k8s import K8S, Manifest, needs_renderer, one, render, validate

HOOK = K8S / "broker-drain-hook"
EXAMPLE = HOOK / "example"
SHARED = "/var/run/pulsar-drain"
BROKER_SHUTDOWN_S = 60  # Pulsar's brokerShutdownTimeoutMs default


def _pod(manifests: tuple[Manifest, ...]) -> Manifest:
    pod: Manifest = one(manifests, "StatefulSet", "pulsar-broker")["spec"]["template"]["spec"]
    return pod


def _containers(pod: Manifest) -> dict[str, Manifest]:
    return {c["name"]: c for c in pod["containers"]}


def _script(container: Manifest) -> str:
    command: list[str] = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["/bin/sh", "-c"]
    return command[2]


def _hook_config(manifests: tuple[Manifest, ...], tmp_path: Path) -> Path:
    data = one(manifests, "ConfigMap", "pulsar-balancer-drain-hook")["data"]
    path = tmp_path / "drain-hook.yaml"
    path.write_text(data["drain-hook.yaml"])
    return path


@needs_renderer
def test_the_example_renders_and_every_manifest_validates() -> None:
    manifests = render(EXAMPLE)
    assert {m["kind"] for m in manifests} == {"ConfigMap", "StatefulSet"}
    for manifest in manifests:
        validate(manifest)
        assert manifest["metadata"]["namespace"] == "pulsar"


@needs_renderer
def test_the_hook_needs_no_kubernetes_api_access() -> None:
    manifests = render(EXAMPLE)
    rbac = {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ServiceAccount"}
    assert not [m for m in manifests if m["kind"] in rbac]
    assert _pod(manifests)["serviceAccountName"] == "pulsar-broker-acct"  # the chart's, as it was


@needs_renderer
def test_the_broker_stops_only_after_the_drain_returns() -> None:
    pod = _pod(render(EXAMPLE))
    boxes = _containers(pod)
    broker, hook = boxes["pulsar-broker"], boxes["drain-hook"]
    drain = _script(hook)
    assert re.search(r'pulsar-balancer drain --config \S+ --cluster \S+ --wait --timeout-s \d+ '
                     r'"\$BROKER_ID" > /proc/1/fd/1 2>&1;', drain)  # fmt: skip
    assert f"code=$?; echo $code > {SHARED}/exit-code; exit $code" in drain
    waits = _script(broker)
    assert f"until [ -f {SHARED}/exit-code ]" in waits
    volume = {m["mountPath"]: m["name"] for m in broker["volumeMounts"]}[SHARED]
    assert {m["mountPath"]: m["name"] for m in hook["volumeMounts"]}[SHARED] == volume
    assert "emptyDir" in {v["name"]: v for v in pod["volumes"]}[volume]
    env = {e["name"]: e for e in hook["env"]}
    assert env["BROKER_ID"]["value"].endswith(":8080")  # the broker id: host:webServicePort
    assert "secretKeyRef" in env["KAFKA_PASSWORD"]["valueFrom"]
    # The chart's own containers are kept (the patch adds, never replaces).
    assert broker["image"].startswith("apachepulsar/pulsar") and broker["args"]


@needs_renderer
def test_the_grace_period_covers_the_drain_and_the_broker_shutdown() -> None:
    pod = _pod(render(EXAMPLE))
    boxes = _containers(pod)
    timeout_s = int(re.search(r"--timeout-s (\d+)", _script(boxes["drain-hook"]))[1])  # type: ignore[index]
    broker_wait_s = int(re.search(r"-ge (\d+) \]", _script(boxes["pulsar-broker"]))[1])  # type: ignore[index]
    grace_s = pod["terminationGracePeriodSeconds"]
    assert timeout_s < broker_wait_s  # the broker's wait outlasts the drain's timeout
    assert grace_s >= broker_wait_s + BROKER_SHUTDOWN_S  # and the broker still shuts down cleanly
    # The arithmetic of broker-prestop.yaml: 100 bundles at the configured pace, a decision
    # cycle, the last moves landing; the pace key comes with the drain controller (issue 43).
    config = load_config(K8S / "base" / "balancer.yaml")
    per_minute = getattr(config.moves, "drain_moves_per_minute", 20)
    assert timeout_s >= 100 / per_minute * 60 + config.spark.window_s + 30


@needs_renderer
def test_the_hook_config_reaches_the_balancers_marks_and_lease(tmp_path: Path) -> None:
    manifests = render(EXAMPLE)
    hook = load_config(_hook_config(manifests, tmp_path))
    base = load_config(K8S / "base" / "balancer.yaml")
    assert hook.kafka.bootstrap_servers == base.kafka.bootstrap_servers
    assert hook.kafka.security == base.kafka.security
    assert hook.kafka.drain_marks_topic == base.kafka.drain_marks_topic
    names = [c.name for c in base.clusters]
    hook_names = [c.name for c in hook.clusters]
    lease, hook_lease = base.controller.writer_lease, hook.controller.writer_lease
    assert hook_lease.group_id(hook_names) == lease.group_id(names)
    assert hook_lease.topic_name(hook_names) == lease.topic_name(names)
    assert hook.controller.uses_writer_lease  # else the hook cannot tell a balancer is down
    (cluster,) = hook.clusters
    assert cluster.admin_url == base.cluster(cluster.name).admin_url
    pod = _pod(manifests)
    drain = _script(_containers(pod)["drain-hook"])
    assert f"--cluster {cluster.name} " in drain
    # What the config names is mounted: the token from the Secret, the config itself.
    mounts = {m["mountPath"]: m["name"] for m in _containers(pod)["drain-hook"]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert cluster.token_file is not None
    token = volumes[mounts[str(cluster.token_file.parent)]]["secret"]
    assert [i["path"] for i in token["items"]] == [cluster.token_file.name]
    config_dir = re.search(r"--config (\S+)/drain-hook.yaml", drain)[1]  # type: ignore[index]
    assert "projected" in volumes[mounts[config_dir]]


def test_the_component_file_is_a_component() -> None:
    spec = yaml.safe_load((HOOK / "component" / "kustomization.yaml").read_text())
    assert spec["kind"] == "Component"
    assert [p["target"]["name"] for p in spec["patches"]] == ["pulsar-broker"]


@needs_renderer
def test_the_hooks_run_in_order_with_a_stand_in_command(tmp_path: Path) -> None:
    # The two preStop scripts as sh runs them: the drain's exit code reaches the shared
    # file and the hook's own exit; the broker's hook returns once the file is there.
    boxes = _containers(_pod(render(EXAMPLE)))
    shared = tmp_path / "shared"
    shared.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "pulsar-balancer"
    fake.write_text('#!/bin/sh\necho "$@" > "$ARGS_FILE"\nexit 3\n')
    fake.chmod(0o755)

    def run(container: str) -> subprocess.CompletedProcess[str]:
        script = _script(boxes[container]).replace(SHARED, str(shared))
        script = script.replace("/proc/1/fd/1", str(tmp_path / "log"))
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "BROKER_ID": "b-0.x:8080",
               "ARGS_FILE": str(tmp_path / "args")}  # fmt: skip
        return subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True,
                              text=True, timeout=30)  # fmt: skip

    assert run("drain-hook").returncode == 3
    assert (shared / "exit-code").read_text().strip() == "3"
    assert (tmp_path / "args").read_text().split()[-1] == "b-0.x:8080"
    assert run("pulsar-broker").returncode == 0  # returns at once: the file is there
