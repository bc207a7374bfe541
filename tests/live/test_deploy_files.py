"""deploy/compose, deploy/k8s and the Dockerfile: they load, and what one file
names (images, ports, hosts, topics, volumes, settings) another one provides."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.deploy_support import DEPLOY, ROOT
from support.helpers import CaptureServer

from ragpulse.config import load_settings
from ragpulse.exporters.otel import OtelEvaluationSink
from ragpulse.plugins import plugin_problems

COMPOSE_DIR = DEPLOY / "compose"
COMPOSE = COMPOSE_DIR / "docker-compose.yaml"
K8S = DEPLOY / "k8s"


def compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return doc


def services() -> dict[str, Any]:
    return dict(compose()["services"])


def host_port(url_or_hostport: str) -> tuple[str, int]:
    netloc = urllib.parse.urlsplit(url_or_hostport).netloc or url_or_hostport
    host, port = netloc.rsplit(":", 1)
    return host, int(port)


def otelcol() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((COMPOSE_DIR / "otelcol.yaml").read_text())
    return doc


def otelcol_ports() -> dict[str, int]:
    """receiver/protocol -> port the compose Collector listens on."""
    ports = {}
    for name, receiver in otelcol()["receivers"].items():
        for protocol, conf in receiver["protocols"].items():
            ports[f"{name}/{protocol}"] = host_port(conf["endpoint"])[1]
    return ports


# --- compose -----------------------------------------------------------------------
def test_compose_has_the_stack() -> None:
    names = set(services())
    assert {"kafka", "otelcol", "ragpulse-1", "ragpulse-2", "prometheus", "grafana", "jaeger",
            "demo-app"} <= names  # fmt: skip
    kafka = services()["kafka"]["environment"]
    assert "controller" in kafka["KAFKA_PROCESS_ROLES"]  # KRaft, no ZooKeeper
    assert host_port(kafka["KAFKA_ADVERTISED_LISTENERS"].split("//")[1]) == ("kafka", 9092)


def test_compose_images_are_pinned_and_ragpulse_is_built_here() -> None:
    for name, service in services().items():
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), name
        if "build" in service:
            context = (COMPOSE_DIR / service["build"]["context"]).resolve()
            assert (context / service["build"]["dockerfile"]).is_file(), name
    assert services()["ragpulse-1"]["image"] == services()["demo-app"]["image"] == "ragpulse:local"


def test_compose_volumes_exist() -> None:
    named = set(compose().get("volumes") or {})
    for name, service in services().items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (COMPOSE_DIR / source).exists(), f"{name}: {source}"
            else:
                assert source in named, f"{name}: {source}"


def test_ragpulse_replicas_share_one_consumer_group_and_a_valid_config() -> None:
    mount = "/etc/ragpulse/ragpulse.yaml"
    for name in ("ragpulse-1", "ragpulse-2"):
        service = services()[name]
        assert service["command"] == ["serve", "--config", mount]
        assert f"./ragpulse.yaml:{mount}:ro" in service["volumes"]
    # Validated like `serve` does, sinks' options too.
    settings = load_settings(COMPOSE_DIR / "ragpulse.yaml", checks=[plugin_problems])
    assert settings.source == "kafka" and settings.host == "0.0.0.0"
    assert settings.kafka.bootstrap == "kafka:9092" and settings.kafka.group == "ragpulse"
    assert settings.kafka.encoding == "otlp_proto"
    # Evaluation signals go to the Collector's second receiver, not back into Kafka.
    otel = OtelEvaluationSink.options_from(settings)
    assert isinstance(otel, OtelEvaluationSink.Options)
    assert host_port(str(otel.endpoint)) == (
        "otelcol",
        otelcol_ports()["otlp/evaluations/http"],
    )
    pipeline = otelcol()["service"]["pipelines"]["traces/evaluations"]
    assert "kafka" not in pipeline["exporters"]
    # Prometheus scrapes both replicas on their metrics port.
    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    [job] = prom["scrape_configs"]
    targets = job["static_configs"][0]["targets"]
    assert targets == [f"ragpulse-{i}:{settings.metrics_port}" for i in (1, 2)]


def test_collector_writes_keyed_otlp_proto_to_the_topic_ragpulse_reads() -> None:
    exporter = otelcol()["exporters"]["kafka"]
    reference = yaml.safe_load((DEPLOY / "otelcol" / "config.yaml").read_text())
    assert exporter == reference["exporters"]["kafka"]  # same as the documented example
    assert exporter["partition_traces_by_id"] is True
    settings = load_settings(COMPOSE_DIR / "ragpulse.yaml")
    assert exporter["traces"] == {"topic": settings.kafka.topic, "encoding": "otlp_proto"}
    assert exporter["brokers"] == [settings.kafka.bootstrap]
    traces = otelcol()["service"]["pipelines"]["traces"]
    assert traces["receivers"] == ["otlp"] and "kafka" in traces["exporters"]
    jaeger = host_port(otelcol()["exporters"]["otlp/jaeger"]["endpoint"])
    assert jaeger[0] in services()
    # The app sends to the Collector's app receiver, published to the host as well.
    app = services()["demo-app"]["environment"]
    assert host_port(app["RAGPULSE_ENDPOINT"]) == ("otelcol", otelcol_ports()["otlp/http"])
    assert "4318:4318" in services()["otelcol"]["ports"]


def test_compose_mounts_prometheus_rules_and_grafana_provisioning() -> None:
    prom = services()["prometheus"]
    assert "--enable-feature=exemplar-storage" in prom["command"]
    assert "../prometheus:/etc/prometheus:ro" in prom["volumes"]
    grafana = services()["grafana"]
    assert "../grafana/provisioning:/etc/grafana/provisioning:ro" in grafana["volumes"]
    assert "../grafana/dashboards:/var/lib/grafana/dashboards:ro" in grafana["volumes"]
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (DEPLOY / "grafana" / "dashboards" / Path(home).name).is_file()
    sources = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "datasources" / "ragpulse.yaml").read_text()
    )["datasources"]
    by_uid = {s["uid"]: s for s in sources}
    assert host_port(by_uid["prometheus"]["url"]) == ("prometheus", 9090)
    assert host_port(by_uid["jaeger"]["url"]) == ("jaeger", 16686)
    [link] = by_uid["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert link == {"name": "trace_id", "datasourceUid": "jaeger"}  # the exemplar label
    alerting = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "alerting" / "ragpulse.yaml").read_text()
    )
    uids = {d["datasourceUid"] for g in alerting["groups"] for r in g["rules"] for d in r["data"]}
    assert uids == {"prometheus", "__expr__"}


def test_docker_compose_config() -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker CLI")
    if subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("the docker compose plugin is not installed")
    proc = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


# --- Dockerfile ----------------------------------------------------------------------
def test_dockerfile_is_multi_stage_non_root_with_healthcheck() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert len(re.findall(r"^FROM ", text, re.M)) >= 2
    assert re.search(r"^USER 10001", text, re.M)
    assert re.search(r"^HEALTHCHECK .*", text, re.M) and "/metrics" in text
    for folder in re.findall(r"^COPY (\w+) \1$", text, re.M):
        assert (ROOT / folder).is_dir()
    packages = set(re.findall(r"^COPY (\w+) \1$", text, re.M))
    pyproject = (ROOT / "pyproject.toml").read_text()
    dirs = set(re.findall(r'"ragpulse[\w.]*" = "(\w+)', pyproject))
    assert dirs <= packages, "every package folder of pyproject.toml goes into the image"


# --- Kubernetes ---------------------------------------------------------------------
def k8s() -> dict[str, dict[str, Any]]:
    """The manifests by kind; the headless OTLP Service under ``Service/headless``, so that
    ``Service`` is the main one whatever the order of the kustomization's resources."""
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    docs = {}
    for name in kustomization["resources"]:
        for doc in yaml.safe_load_all((K8S / name).read_text()):
            headless = doc["kind"] == "Service" and doc["spec"].get("clusterIP") == "None"
            docs["Service/headless" if headless else doc["kind"]] = doc
    return docs


def test_k8s_has_every_kind() -> None:
    assert set(k8s()) >= {"Deployment", "Service", "ConfigMap", "ServiceMonitor",
                          "PrometheusRule", "PodDisruptionBudget", "ScaledObject"}  # fmt: skip
    manifests = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert manifests == set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])


def test_k8s_objects_reference_each_other(tmp_path: Path) -> None:
    docs = k8s()
    deploy, service = docs["Deployment"], docs["Service"]
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert deploy["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    for kind in ("ServiceMonitor", "PodDisruptionBudget"):
        assert docs[kind]["spec"]["selector"]["matchLabels"].items() <= labels.items(), kind
    assert docs["ServiceMonitor"]["spec"]["selector"]["matchLabels"].items() <= (
        service["metadata"]["labels"].items()
    )
    [container] = deploy["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    [svc_port] = service["spec"]["ports"]
    assert svc_port["targetPort"] in ports
    assert docs["ServiceMonitor"]["spec"]["endpoints"][0]["port"] == svc_port["name"]
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] in ports
    # The ConfigMap is mounted where RAGPULSE_CONFIG points, and it is valid.
    env = {e["name"]: e for e in container["env"]}
    config_path = Path(env["RAGPULSE_CONFIG"]["value"])
    volumes = {v["name"]: v for v in deploy["spec"]["template"]["spec"]["volumes"]}
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == str(config_path.parent)]
    assert volumes[mount["name"]]["configMap"]["name"] == docs["ConfigMap"]["metadata"]["name"]
    (tmp_path / config_path.name).write_text(docs["ConfigMap"]["data"][config_path.name])
    # Validated like `serve` does, sinks' options too.
    settings = load_settings(tmp_path / config_path.name, checks=[plugin_problems])
    assert settings.metrics_port == ports["metrics"] and settings.host == "0.0.0.0"
    assert container["image"].split(":")[0] in {
        i["name"] for i in yaml.safe_load((K8S / "kustomization.yaml").read_text())["images"]
    }
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
    assert deploy["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"]
    # KEDA scales this Deployment on the lag of the group and topic it consumes.
    scaled = docs["ScaledObject"]["spec"]
    assert scaled["scaleTargetRef"]["name"] == deploy["metadata"]["name"]
    [trigger] = scaled["triggers"]
    assert trigger["type"] == "kafka"
    assert trigger["metadata"]["bootstrapServers"] == settings.kafka.bootstrap
    assert trigger["metadata"]["consumerGroup"] == settings.kafka.group
    assert trigger["metadata"]["topic"] == settings.kafka.topic
    assert scaled["minReplicaCount"] >= docs["PodDisruptionBudget"]["spec"]["minAvailable"] + 1


def test_prometheusrule_carries_the_rule_files() -> None:
    groups = k8s()["PrometheusRule"]["spec"]["groups"]
    expected = [
        g
        for name in ("recording.rules.yaml", "alerts.rules.yaml")
        for g in yaml.safe_load((DEPLOY / "prometheus" / name).read_text())["groups"]
    ]
    assert json.dumps(groups, sort_keys=True) == json.dumps(expected, sort_keys=True)


# --- the demo app of the compose stack ----------------------------------------------
def test_demo_app_main_sends_traces_to_ragpulse_endpoint() -> None:
    with CaptureServer() as backend:
        env = {**os.environ, "RAGPULSE_ENDPOINT": backend.url, "RAGPULSE_SERVICE_NAME": "demo"}
        proc = subprocess.run(
            [sys.executable, "-m", "ragpulse.cli.demo_app", "--count", "3", "--rate", "100"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        spans = backend.captured.spans()
    assert sum(s.name == "answer" for s in spans) == 3
    assert len({s.trace_id for s in spans}) == 3


def collector_configs() -> dict[str, dict[str, Any]]:
    """Every OpenTelemetry Collector config shipped under deploy/."""
    paths = [COMPOSE_DIR / "otelcol.yaml", *sorted((DEPLOY / "otelcol").glob("*.yaml"))]
    return {p.name: yaml.safe_load(p.read_text()) for p in paths}


def test_every_kafka_exporter_allows_a_whole_large_trace_per_message() -> None:
    consumer_limit = load_settings().kafka.max_message_bytes
    kafka_exporters = {
        name: config["exporters"]["kafka"]
        for name, config in collector_configs().items()
        if "kafka" in config.get("exporters", {})
    }
    assert kafka_exporters  # the configs are still there
    for name, exporter in kafka_exporters.items():
        # One trace is one message; the Collector's default (1,000,000) refuses a trace
        # with 25 documents of 16k characters.
        limit = exporter["producer"]["max_message_bytes"]
        assert 1_000_000 < limit <= consumer_limit, name
    broker = services()["kafka"]["environment"]
    assert int(broker["KAFKA_MESSAGE_MAX_BYTES"]) >= consumer_limit
    init = " ".join(services()["kafka-init"]["command"])
    assert f"max.message.bytes={consumer_limit}" in init


def test_loadbalancing_example_routes_traces_and_logs_by_trace_id_over_grpc() -> None:
    config = collector_configs()["loadbalancing.yaml"]
    exporter = config["exporters"]["loadbalancing"]
    assert exporter["routing_key"] == "traceID"
    assert "otlp" in exporter["protocol"]  # OTLP/gRPC to each ragpulse replica
    assert exporter["resolver"]["dns"]["port"] == "4317"
    pipelines = config["service"]["pipelines"]
    for signal in ("traces", "logs"):
        assert pipelines[signal]["exporters"] == ["loadbalancing"]


def test_k8s_otlp_receivers_for_the_loadbalancing_collector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The headless Service the loadbalancing exporter resolves: its ports are the
    container's and the settings' OTLP ports (they listen with source otlp_http)."""
    docs = k8s()
    headless = docs["Service/headless"]
    [container] = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    (tmp_path / "ragpulse.yaml").write_text(docs["ConfigMap"]["data"]["ragpulse.yaml"])
    monkeypatch.delenv("RAGPULSE_OTLP_GRPC_PORT", raising=False)  # conftest turns gRPC off
    settings = load_settings(tmp_path / "ragpulse.yaml", source="otlp_http")
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["selector"].items() <= (
        docs["Deployment"]["spec"]["template"]["metadata"]["labels"].items()
    )
    targets = {p["targetPort"]: p["port"] for p in headless["spec"]["ports"]}
    assert targets == {"otlp-grpc": ports["otlp-grpc"], "otlp-http": ports["otlp-http"]}
    assert (settings.otlp_grpc_port, settings.otlp_http_port) == (
        ports["otlp-grpc"],
        ports["otlp-http"],
    )
    resolver = collector_configs()["loadbalancing.yaml"]["exporters"]["loadbalancing"]["resolver"]
    namespace = yaml.safe_load((K8S / "kustomization.yaml").read_text())["namespace"]
    assert resolver["dns"]["hostname"].startswith(f"{headless['metadata']['name']}.{namespace}.")
    assert resolver["dns"]["port"] == str(ports["otlp-grpc"])
    assert "4317" in services()["ragpulse-1"]["expose"]
