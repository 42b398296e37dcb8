"""deploy/observability/ is usable: each file parses and has its tool's shape, and every metric it
names is in a real scrape of a runtime and a tool host that ran a run.

promtool is not a Python package; where it is on PATH (Debian's ``prometheus`` package), the
rules and the Prometheus config are checked with it as well.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentrt.client import Client
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import ToolHostProcess, spawn_runtime, spawn_tool_host
from tests.e2e.conftest import write_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "observability"
DASHBOARD = DEPLOY / "grafana" / "agentrt-dashboard.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"
COLLECTOR = DEPLOY / "otel-collector.yaml"

# PromQL words that are not metric names.
_PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "rate", "irate", "increase", "histogram_quantile", "by",
    "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset",
    "bool", "topk", "bottomk", "abs", "clamp_min", "clamp_max", "delta", "deriv", "absent",
    "vector", "scalar", "time", "le", "inf", "nan",
}  # fmt: skip
_DURATION = re.compile(r"^\d+[smhdw]$")


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: label matchers, grouping clauses, strings, ranges,
    Grafana variables and function names taken out."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\$\w+", "", expr)
    words = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr))
    return {w for w in words if w.lower() not in _PROMQL_WORDS}


def dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in board["panels"] for t in p["targets"]]


def alert_rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]
    return rules


def test_the_dashboard_is_a_grafana_dashboard_with_the_asked_panels() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] and board["title"] and isinstance(board["schemaVersion"], int)
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        assert panel["type"] in {"timeseries", "stat", "gauge", "table"} and panel["title"]
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["targets"] and all(t["expr"] and t["refId"] for t in panel["targets"])
    titles = " | ".join(p["title"].lower() for p in panels)
    for asked in (
        "runs by phase",
        "step latency",
        "model latency",
        "tokens",
        "tool errors",
        "unknown outcomes",
    ):
        assert asked in titles, asked


def test_the_alert_rules_cover_what_operators_must_hear_about() -> None:
    document = yaml.safe_load(ALERTS.read_text())
    assert [set(g) for g in document["groups"]] == [{"name", "rules"}]
    rules = alert_rules()
    for rule in rules:
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert re.fullmatch(r"Agentrt[A-Za-z]+", rule["alert"]) and _DURATION.match(rule["for"])
        assert rule["labels"]["severity"] in {"warning", "page"} and rule["annotations"]["summary"]
        assert metric_names(rule["expr"]), rule["alert"]
    assert {r["alert"] for r in rules} == {
        "AgentrtUnknownOutcomesWaiting",
        "AgentrtLeaseLostRate",
        "AgentrtRetryExhaustion",
        "AgentrtQueueDepthHigh",
        "AgentrtEscalatedRuns",
        "AgentrtCleanupFailures",
    }


def test_the_collector_config_wires_otlp_in_to_prometheus_and_debug_out() -> None:
    config = yaml.safe_load(COLLECTOR.read_text())
    protocols = config["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"].endswith(":4317") and protocols["http"]["endpoint"].endswith(":4318")
    assert {"prometheus", "debug"} <= set(config["exporters"])
    pipelines = config["service"]["pipelines"]
    assert {"traces", "metrics"} <= set(pipelines)
    assert "prometheus" in pipelines["metrics"]["exporters"]
    for name, pipeline in pipelines.items():  # every component a pipeline names is defined
        for kind in ("receivers", "processors", "exporters"):
            missing = set(pipeline.get(kind, [])) - set(config.get(kind, {}))
            assert not missing, f"pipeline {name} names undefined {kind}: {missing}"


def test_the_prometheus_config_loads_the_rules_and_scrapes_both_processes() -> None:
    config = yaml.safe_load(PROMETHEUS.read_text())
    assert config["rule_files"] == ["alerts.yml"]
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    assert {"agentrt-runtime", "agentrt-toolhost", "otel-collector"} <= jobs


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_the_rules_and_the_config() -> None:
    checked = subprocess.run(["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_name_extraction_sees_names_not_labels_or_functions() -> None:
    expr = 'histogram_quantile(0.95, sum by (le, tool) (rate(a_bucket{outcome!="ok"}[5m]))) / on (x) b'
    assert metric_names(expr) == {"a_bucket", "b"}


@pytest.fixture
def metered_host(tmp_path: Path) -> Iterator[ToolHostProcess]:
    with spawn_tool_host(
        tmp_path / "toolhost",
        plugins=["agentrt.plugins.demo_tools"],
        extra_args=["--metrics-listen", "127.0.0.1:0"],
    ) as host:
        yield host


def test_every_metric_the_files_name_is_in_a_real_scrape(
    tmp_path: Path, sqlite_url: str, metered_host: ToolHostProcess
) -> None:
    config = write_config(
        tmp_path / "agentrt.toml", db_url=sqlite_url, tool_host_address=metered_host.address
    )
    with spawn_runtime(["--config", str(config), "--listen", "127.0.0.1:0"], cwd=tmp_path) as runtime:
        with Client(runtime.address) as client:
            run_id = client.start_run("refund", "Please refund A100").run_id
            events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        scraped = runtime.metrics().names() | metered_host.metrics().names()
    named = set().union(*(metric_names(e) for e in [*dashboard_exprs(), *(r["expr"] for r in alert_rules())]))
    assert named, "no metric names found"
    assert named - scraped == set(), f"named but never exposed: {sorted(named - scraped)}"
