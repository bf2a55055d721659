"""The generated alert rules under Prometheus' own rule tester (`promtool test rules`): every rule fires on the
series that should fire it, after the time it says, with its summary rendered; none fires on a healthy cluster.
Plus the scrape and Alertmanager configs under `promtool check config` and `amtool check-config`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpckit.blueprint import Blueprint, load_blueprint
from hpckit.deploy.monitoring import (
    alert_rules,
    alertmanager_config,
    monitoring_extravars,
    prometheus_config,
    prometheus_text,
)

REPO = Path(__file__).resolve().parent.parent
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian's prometheus package) is not here")

EXPORTER = 'job="hpckit-slurm",instance="10.10.0.11:9341",host="login01"'
NODE = 'job="node",instance="10.10.0.11:9100",host="login01"'
EXP_EXPORTER = {"job": "hpckit-slurm", "instance": "10.10.0.11:9341", "host": "login01"}
EXP_NODE = {"job": "node", "instance": "10.10.0.11:9100", "host": "login01"}


def _case(
    series: str, values: str, eval_time: str, labels: dict[str, str], summary: str, interval: str = "30s"
) -> dict[str, Any]:
    return {"series": series, "values": values, "eval_time": eval_time, "labels": labels, "summary": summary,
            "interval": interval}  # fmt: skip


def cases(bp: Blueprint) -> dict[str, dict[str, Any]]:
    """What fires each rule of ``bp``: a series that stays bad, when to look, and the alert expected then."""
    down = bp.monitoring.node_down_for_s
    late = f"{down + 60}s"
    wait = bp.monitoring.pending_resources_max_s
    return {
        "HpckitSlurmExporterDown": _case(
            'up{job="hpckit-slurm",instance="10.10.0.11:9341",host="login01"}', "0x20", "3m", EXP_EXPORTER,
            "hpckit's Slurm exporter on login01 does not answer: no Slurm metrics, no Slurm alerts"),
        "SlurmctldUnreachable": _case(
            f"slurm_up{{{EXPORTER}}}", "0x20", "3m", EXP_EXPORTER,
            "slurmctld does not answer the Slurm clients on login01"),
        "SlurmdbdUnreachable": _case(
            f"slurm_dbd_up{{{EXPORTER}}}", "0x20", "6m", EXP_EXPORTER,
            "slurmdbd does not answer: accounting and limits are not enforced from the database"),
        "SlurmNodeDown": _case(
            f'slurm_node_up{{{EXPORTER},node="gpu003"}}', f"0x{down // 30 + 4}", late,
            {**EXP_EXPORTER, "node": "gpu003"}, "gpu003 is down or not responding to slurmctld"),
        "HpckitNodeDrained": _case(
            f'slurm_node_drained_by_hpckit{{{EXPORTER},node="gpu003",reason="hpckit:munge-down:host.munge"}}',
            "1x4", "1m", {**EXP_EXPORTER, "node": "gpu003", "reason": "hpckit:munge-down:host.munge"},
            "hpckit drained gpu003: hpckit:munge-down:host.munge"),
        "SlurmJobsPendingOnResources": _case(
            f'slurm_job_pending_oldest_seconds{{{EXPORTER},reason="Resources"}}', f"{wait + 30}x4", "1m",
            {**EXP_EXPORTER, "reason": "Resources"}, f"a job has waited for resources longer than {wait} s"),
        "NodeExporterDown": _case(
            'up{job="node",instance="10.10.0.103:9100",host="gpu003"}', f"0x{down // 30 + 4}", late,
            {"job": "node", "instance": "10.10.0.103:9100", "host": "gpu003"},
            "gpu003 does not answer Prometheus (node exporter)"),
        "HpckitCircuitBreakerHolding": _case(
            f'hpckit_health_circuit_breaker_tripped{{{NODE},check="gpu.ecc"}}', "5x4", "1m",
            {**EXP_NODE, "check": "gpu.ecc"}, "gpu.ecc fails on 5 nodes: hpckit holds its drains, look at the fleet"),
        "SharedFilesystemMissing": _case(
            f'hpckit_health_status{{{NODE},node="gpu003",check="host.mounts",metric="/home"}}', "3x4", "1m",
            {**EXP_NODE, "node": "gpu003", "check": "host.mounts", "metric": "/home"},
            "gpu003: a shared filesystem is missing or read-only (/home)"),
        "HpckitHealthSweepStale": _case(
            # a sweep two days and a minute before the test's clock starts (at 0): no 49 h of evaluations
            f"hpckit_health_last_sweep_timestamp_seconds{{{NODE}}}", "-172860x4", "1m", EXP_NODE,
            "the nightly health sweep has not run for two days"),
        "GpuXidErrors": _case(
            f'hpckit_health_status{{{NODE},node="gpu003",check="gpu.xid",metric="xid79"}}', "3x4", "1m",
            {**EXP_NODE, "node": "gpu003", "check": "gpu.xid", "metric": "xid79"},
            "gpu003: GPU XID errors (xid79)"),
        "GpuEccErrors": _case(
            f'hpckit_health_status{{{NODE},node="gpu003",check="gpu.ecc",metric="dbe_volatile"}}', "3x4", "1m",
            {**EXP_NODE, "node": "gpu003", "check": "gpu.ecc", "metric": "dbe_volatile"},
            "gpu003: GPU memory errors (gpu.ecc, dbe_volatile)"),
    }  # fmt: skip


# The same sources on a healthy cluster, for longer than any rule waits.
HEALTHY = [
    ('up{job="hpckit-slurm",instance="10.10.0.11:9341",host="login01"}', "1x120"),
    (f"slurm_up{{{EXPORTER}}}", "1x120"),
    (f"slurm_dbd_up{{{EXPORTER}}}", "1x120"),
    (f'slurm_node_up{{{EXPORTER},node="gpu003"}}', "1x120"),
    (f'slurm_job_pending_oldest_seconds{{{EXPORTER},reason="Resources"}}', "60x120"),
    ('up{job="node",instance="10.10.0.103:9100",host="gpu003"}', "1x120"),
    (f'hpckit_health_status{{{NODE},node="gpu003",check="host.mounts",metric="/home"}}', "0x120"),
    (f'hpckit_health_status{{{NODE},node="gpu003",check="gpu.xid",metric="xid79"}}', "1x120"),  # WARN only
    (f'hpckit_health_status{{{NODE},node="gpu003",check="gpu.ecc",metric="dbe_volatile"}}', "0x120"),
    (f"hpckit_health_last_sweep_timestamp_seconds{{{NODE}}}", "0+30x120"),  # a sweep every scrape: fresh
]


def with_monitoring(name: str, **changes: Any) -> Blueprint:
    bp = load_blueprint(REPO / "blueprints" / name)
    return bp.model_copy(update={"monitoring": bp.monitoring.model_copy(update={"enabled": True, **changes})})


def rules_text(bp: Blueprint) -> str:
    """The rule file as the role writes it (its template's filters: see hpckit.deploy.monitoring)."""
    return prometheus_text(yaml.safe_dump(alert_rules(bp), sort_keys=False))


def names(rules: dict[str, Any]) -> list[str]:
    return [r["alert"] for g in rules["groups"] for r in g["rules"]]


def rule_tests(bp: Blueprint) -> dict[str, Any]:
    rules = names(alert_rules(bp))
    known = cases(bp)
    tests: list[dict[str, Any]] = []
    for name in rules:
        case = known[name]
        alert = {"exp_labels": {**case["labels"], "severity": _severity(bp, name)},
                 "exp_annotations": {"summary": case["summary"]}}  # fmt: skip
        tests.append({
            "interval": case["interval"],
            "input_series": [{"series": case["series"], "values": case["values"]}],
            "alert_rule_test": [{"eval_time": case["eval_time"], "alertname": name, "exp_alerts": [alert]}],
        })  # fmt: skip
    tests.append({
        "interval": "30s",
        "input_series": [{"series": s, "values": v} for s, v in HEALTHY],
        "alert_rule_test": [{"eval_time": "59m", "alertname": name, "exp_alerts": []} for name in rules],
    })  # fmt: skip
    return {"rule_files": ["rules.yml"], "evaluation_interval": "30s", "tests": tests}


def _severity(bp: Blueprint, name: str) -> str:
    return next(r["labels"]["severity"] for g in alert_rules(bp)["groups"] for r in g["rules"] if r["alert"] == name)


BLUEPRINTS = [
    pytest.param(with_monitoring("h100-ib.yaml"), id="h100-ib"),
    pytest.param(with_monitoring("h100-ib.yaml", node_down_for_s=90, pending_resources_max_s=600), id="h100-short"),
    pytest.param(with_monitoring("lab.yaml"), id="lab"),
    pytest.param(with_monitoring("vm.yaml"), id="vm"),
]


@pytest.mark.parametrize("bp", BLUEPRINTS)
def test_every_rule_has_a_case(bp: Blueprint) -> None:
    assert set(names(alert_rules(bp))) <= set(cases(bp))


def test_rules_follow_the_blueprint() -> None:
    """GPU rules only with GPUs; slurmdbd's only with accounting; the times the blueprint gives."""
    h100 = names(alert_rules(with_monitoring("h100-ib.yaml")))
    assert {"GpuXidErrors", "GpuEccErrors", "SlurmdbdUnreachable"} <= set(h100)
    vm = with_monitoring("vm.yaml")  # no GPUs
    assert not {"GpuXidErrors", "GpuEccErrors"} & set(names(alert_rules(vm)))
    no_db = vm.model_copy(update={"slurm": vm.slurm.model_copy(update={"accounting": False})})
    assert "SlurmdbdUnreachable" not in names(alert_rules(no_db))
    short = alert_rules(with_monitoring("h100-ib.yaml", node_down_for_s=90))
    down = next(r for g in short["groups"] for r in g["rules"] if r["alert"] == "SlurmNodeDown")
    assert down["for"] == "90s"


@needs_promtool
@pytest.mark.parametrize("bp", BLUEPRINTS)
def test_promtool_tests_every_rule(bp: Blueprint, tmp_path: Path) -> None:
    (tmp_path / "rules.yml").write_text(rules_text(bp))
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(rule_tests(bp), sort_keys=False))
    done = subprocess.run(
        [str(PROMTOOL), "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
@pytest.mark.parametrize("bp", BLUEPRINTS)
def test_configs_pass_prometheus_own_checks(bp: Blueprint, tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(rules_text(bp))
    config = {**prometheus_config(bp), "rule_files": [str(rules)]}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(alertmanager_config(bp), sort_keys=False))
    for argv in (["promtool", "check", "config", "prometheus.yml"], ["amtool", "check-config", "alertmanager.yml"]):
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr


def test_targets_are_every_host_and_the_exporter() -> None:
    bp = with_monitoring("h100-ib.yaml")
    jobs = {j["job_name"]: j for j in prometheus_config(bp)["scrape_configs"]}
    hosts = [c["labels"]["host"] for c in jobs["node"]["static_configs"]]
    assert hosts[:3] == ["head01", "login01", "login02"] and len(hosts) == 3 + 16
    assert jobs["hpckit-slurm"]["static_configs"] == [{"targets": ["10.10.0.11:9341"], "labels": {"host": "login01"}}]
    assert not [j for j in jobs if j.startswith("slurmctld-")]  # this blueprint's Slurm has no metrics endpoint


def test_slurm_own_endpoint_from_25_11() -> None:
    bp = with_monitoring("h100-ib.yaml")
    newer = bp.model_copy(update={"slurm": bp.slurm.model_copy(update={"version": "25.11"})})
    jobs = {j["job_name"]: j for j in prometheus_config(newer)["scrape_configs"]}
    assert jobs["slurmctld-nodes"]["metrics_path"] == "/metrics/nodes"
    assert jobs["slurmctld-jobs"]["static_configs"] == [{"targets": ["10.10.0.10:6817"]}]


def test_monitoring_off_is_one_variable() -> None:
    assert monitoring_extravars(load_blueprint(REPO / "blueprints" / "lab.yaml")) == {"monitoring_enabled": False}


def test_receivers_from_the_blueprint() -> None:
    bp = with_monitoring("h100-ib.yaml")
    alerts = bp.monitoring.alerts.model_copy(
        update={"webhooks": ["http://relay:9000/hook"], "email": ["ops@example.org"],
                "email_from": "slurm@example.org", "smarthost": "mail:25"}
    )  # fmt: skip
    bp = bp.model_copy(update={"monitoring": bp.monitoring.model_copy(update={"alerts": alerts})})
    (receiver,) = alertmanager_config(bp)["receivers"]
    assert receiver["webhook_configs"] == [{"url": "http://relay:9000/hook", "send_resolved": True}]
    assert receiver["email_configs"][0]["smarthost"] == "mail:25"


def test_no_braces_ansible_would_render() -> None:
    """Ansible renders {{ }} in any variable: the rules carry Prometheus' templates as [[ ]], and their
    expressions have neither (the role turns every [[ ]] into {{ }})."""
    text = yaml.safe_dump(alert_rules(with_monitoring("h100-ib.yaml")))
    assert "{{" not in text and "[[ $labels.node ]]" in text
    for group in alert_rules(with_monitoring("h100-ib.yaml"))["groups"]:
        assert not [r["expr"] for r in group["rules"] if "[[" in r["expr"] or "]]" in r["expr"]]


def test_targets_follow_the_blueprints_nodes() -> None:
    """Day 2: the deploy that adds or removes nodes hands Prometheus the new list (no target kept by hand)."""
    from hpckit.blueprint import parse_blueprint

    text = (REPO / "blueprints" / "lab.yaml").read_text().replace("monitoring:\n  enabled: false", "monitoring: {}")
    bp = parse_blueprint(text)
    grown = parse_blueprint(text.replace("node[1-4]", "node[1-6]").replace(".[21-24]", ".[21-26]"))

    def hosts(blueprint: Blueprint) -> list[str]:
        jobs = {j["job_name"]: j for j in prometheus_config(blueprint)["scrape_configs"]}
        return [c["labels"]["host"] for c in jobs["node"]["static_configs"]]

    assert hosts(bp) == ["ctl", "login", "node1", "node2", "node3", "node4"]
    assert hosts(grown) == ["ctl", "login", *(f"node{i}" for i in range(1, 7))]


def test_plan_labels_a_monitoring_change_as_harmless_to_jobs() -> None:
    from hpckit.deploy.changes import Action, plan_changes
    from hpckit.deploy.events import ConfigDiff

    diff = ConfigDiff(
        "ctl", "Write the alert rules", "/etc/prometheus/hpckit-rules.yml", "groups: []\n", "groups: [x]\n"
    )
    (change,) = plan_changes([diff])
    assert change.action == Action.NONE and change.file == "/etc/prometheus/hpckit-rules.yml"


def test_dcgm_exporter_where_the_site_runs_it() -> None:
    """dcgm-exporter is the site's (its DCGM and driver): with its port given, every GPU node is scraped there."""
    assert "dcgm" not in {j["job_name"] for j in prometheus_config(with_monitoring("h100-ib.yaml"))["scrape_configs"]}
    jobs = {
        j["job_name"]: j
        for j in prometheus_config(with_monitoring("h100-ib.yaml", dcgm_exporter_port=9400))["scrape_configs"]
    }
    configs = jobs["dcgm"]["static_configs"]
    assert len(configs) == 16 and configs[0] == {"targets": ["10.10.0.101:9400"], "labels": {"host": "gpu001"}}


@needs_promtool
def test_the_roles_files_as_expand_renders_them(tmp_path: Path) -> None:
    """`hpckit expand` renders the role's own templates: the rules come out with Prometheus' {{ }} back, pass
    promtool, and say what the rule data says."""
    from hpckit.deploy.expand import expand

    bp = with_monitoring("h100-ib.yaml")
    expand(bp, tmp_path)
    folder = tmp_path / "files" / "head01" / "etc" / "prometheus"
    rules = (folder / "hpckit-rules.yml").read_text()
    assert "{{ $labels.node }}" in rules and "[[" not in rules
    assert yaml.safe_load(rules) == yaml.safe_load(rules_text(bp))
    # the config names the rules at their place on the host: here its syntax alone
    for argv in (["check", "rules", "hpckit-rules.yml"], ["check", "config", "--syntax-only", "prometheus.yml"]):
        done = subprocess.run([str(PROMTOOL), *argv], cwd=folder, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
