"""The Prometheus configuration, alert rules and Grafana dashboard in deploy/: checked by promtool
(Debian's prometheus package) where it is installed, and every query against the metric names a
real API in Redis mode actually exports. Also the optional rq-dashboard compose service."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support.redis_server import RedisServer
from tests.support.server import ROOT, running_server

DEPLOY = ROOT / "deploy"
DASHBOARD = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
ALERTS = yaml.safe_load((DEPLOY / "prometheus-alerts.yml").read_text())
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus)")
# Series Prometheus makes itself, not the service.
PROMETHEUS_OWN = frozenset({"up"})
METRIC = re.compile(r"\b(scaling_grader_[a-z_]+|up)\b")


def _dashboard_queries() -> list[str]:
    return [t["expr"] for panel in DASHBOARD["panels"] for t in panel["targets"]]


def _alert_queries() -> list[str]:
    return [rule["expr"] for group in ALERTS["groups"] for rule in group["rules"]]


def _promtool(*args: str) -> subprocess.CompletedProcess:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def exported_metrics(tmp_path_factory) -> set[str]:
    """Metric names (with their histogram and counter sample suffixes) from a real API's /metrics
    in Redis mode, after one grade."""
    redis_server = RedisServer().start()
    try:
        with running_server({"SCALING_GRADER_REDIS_URL": redis_server.url}) as url:
            httpx.post(url + "/v1/grade", json={"reference": {"values": ["1 s"]}, "completion": "Final answer: 1 s"})
            text = httpx.get(url + "/metrics").text
    finally:
        redis_server.close()
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
            if kind == "counter":
                names.add(f"{name}_total")
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


@needs_promtool
def test_prometheus_config_passes_promtool(tmp_path: Path) -> None:
    for name in ("prometheus.yml", "prometheus-alerts.yml"):
        shutil.copy(DEPLOY / name, tmp_path / name)
    (tmp_path / "scaling-grader.key").write_text("sg_example\n")  # the file the config names
    checked = _promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 1 rule files found" in checked.stdout


@needs_promtool
def test_alert_rules_pass_promtool() -> None:
    checked = _promtool("check", "rules", str(DEPLOY / "prometheus-alerts.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


@needs_promtool
def test_promtool_rejects_a_broken_query(tmp_path: Path) -> None:
    """The check above can fail: a query with a syntax error is refused."""
    rules = {"groups": [{"name": "g", "rules": [{"record": "r", "expr": "sum by (le (rate(x[5m]))"}]}]}
    (tmp_path / "bad.yml").write_text(yaml.safe_dump(rules))
    assert _promtool("check", "rules", str(tmp_path / "bad.yml")).returncode != 0


def _expected_alert(name: str) -> dict:
    rule = next(r for g in ALERTS["groups"] for r in g["rules"] if r.get("alert") == name)
    return {"exp_labels": rule["labels"], "exp_annotations": rule["annotations"]}


def _faults_series(replica: str, per_minute: int) -> dict:
    # The same ledger-backed counter (in Redis), as every API replica reports it.
    labels = f'split="impl",grading="impl",outcome="sandbox_error",job="scaling-grader-api",instance="{replica}"'
    return {"series": f"scaling_grader_grades_total{{{labels}}}", "values": f"0+{per_minute}x30"}


@needs_promtool
def test_alerts_fire_on_synthetic_series(tmp_path: Path) -> None:
    """promtool's rule unit tests: faults fire the fault alert, two replicas reporting the same
    counter are not added up, and a deployment without workers is noticed."""
    tests = {
        "rule_files": [str(DEPLOY / "prometheus-alerts.yml")],
        "evaluation_interval": "1m",
        "tests": [
            {"interval": "1m",
             "input_series": [_faults_series("api-1", 60), _faults_series("api-2", 60)],  # 1 fault/s
             "alert_rule_test": [{"eval_time": "15m", "alertname": "ScalingGraderGraderFaults",
                                  "exp_alerts": [_expected_alert("ScalingGraderGraderFaults")]}]},
            {"interval": "1m",
             # 0.06/s seen by each of two replicas: 0.06 in all (max), under the 0.1 threshold
             "input_series": [_faults_series("api-1", 4), _faults_series("api-2", 4)],
             "alert_rule_test": [{"eval_time": "15m", "alertname": "ScalingGraderGraderFaults", "exp_alerts": []}]},
            {"interval": "1m",
             "input_series": [{"series": 'scaling_grader_workers{state="idle",instance="api-1"}', "values": "0x10"},
                              {"series": 'scaling_grader_workers{state="busy",instance="api-1"}', "values": "0x10"}],
             "alert_rule_test": [{"eval_time": "5m", "alertname": "ScalingGraderNoWorkers",
                                  "exp_alerts": [_expected_alert("ScalingGraderNoWorkers")]}]},
        ],
    }
    (tmp_path / "alerts-test.yml").write_text(yaml.safe_dump(tests))
    checked = _promtool("test", "rules", str(tmp_path / "alerts-test.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


@needs_promtool
def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each query as a recording rule (Grafana's $__rate_interval made concrete)."""
    rules = [{"record": f"dashboard:query_{i}", "expr": expr.replace("$__rate_interval", "5m")}
             for i, expr in enumerate(_dashboard_queries())]
    (tmp_path / "dashboard-queries.yml").write_text(yaml.safe_dump({"groups": [{"name": "d", "rules": rules}]}))
    checked = _promtool("check", "rules", str(tmp_path / "dashboard-queries.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules)} rules found" in checked.stdout


@pytest.mark.slow
def test_every_query_references_an_exported_metric(exported_metrics: set[str]) -> None:
    for expr in _dashboard_queries() + _alert_queries():
        used = set(METRIC.findall(expr))
        assert used, expr
        unknown = used - exported_metrics - PROMETHEUS_OWN
        assert not unknown, f"{expr} uses metrics the service does not export: {unknown}"


@pytest.mark.slow
def test_the_dashboard_covers_the_api_and_the_workers(exported_metrics: set[str]) -> None:
    used = {m for expr in _dashboard_queries() for m in METRIC.findall(expr)}
    for wanted in ("scaling_grader_grades_total", "scaling_grader_queue_jobs",
                   "scaling_grader_workers", "scaling_grader_http_requests_total",
                   "scaling_grader_http_request_seconds_bucket", "scaling_grader_grade_seconds_bucket"):
        assert wanted in used and wanted in exported_metrics


def test_dashboard_shape() -> None:
    assert DASHBOARD["uid"] and DASHBOARD["title"] and DASHBOARD["schemaVersion"] >= 30
    variables = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for panel in DASHBOARD["panels"]:
        assert panel["type"] in ("timeseries", "stat") and panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs))
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        area = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not area & cells, f"panel {panel['title']!r} overlaps another"
        cells |= area


def test_rq_dashboard_is_an_optional_loopback_service() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    dashboard = services["rq-dashboard"]
    assert dashboard["profiles"] == ["dashboard"]  # not started by a plain `docker compose up`
    assert all(p.startswith("127.0.0.1:") for p in dashboard["ports"])  # it shows candidates' completions
    command = dashboard["command"]
    assert "--json" in command  # our jobs are JSON-serialised
    assert "--disable-delete" in command
    dockerfile = (ROOT / dashboard["build"]["dockerfile"]).read_text()
    install = next(line for line in dockerfile.splitlines() if "pip install" in line)
    assert "rq-dashboard==" in install and " six" in install  # rq-dashboard 0.9 imports six undeclared
    for name in ("redis", "api", "worker"):
        assert "profiles" not in services[name]
