"""Blueprint -> the monitoring role's variables: Prometheus' scrape config, the alert rules and Alertmanager's
config, as data the role writes out (and `promtool` checks there and in the tests). Pure.

Targets come from the blueprint on every deploy, so a node added or removed on day 2 is scraped or dropped by
the same deploy that changes slurm.conf. The rules read three sources: hpckit's Slurm exporter (`slurm_*`, one
login node, `hpckit metrics serve`), the health sweep's textfile (`hpckit_health_*`, through the sweep host's
node exporter) and Prometheus' own `up`.
"""

from __future__ import annotations

from typing import Any

from hpckit.blueprint.models import Blueprint
from hpckit.blueprint.release import slurm_release_of
from hpckit.deploy.inventory import host_entries

NODE_EXPORTER_PORT = 9100
PROMETHEUS_PORT = 9090
ALERTMANAGER_PORT = 9093
SLURMCTLD_PORT = 6817
# Debian's node exporter reads *.prom files here (its packaged default); the health sweep writes its own there.
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
RULES_FILE = "/etc/prometheus/hpckit-rules.yml"
# slurmctld serves OpenMetrics on its own port from 25.11 (MetricsType=metrics/openmetrics, no PrivateData).
SLURM_METRICS_SINCE = (25, 11)
SLURM_METRICS_PATHS = ("nodes", "jobs", "partitions", "scheduler")
# The sweep's verdict values (hpckit.health: 0 OK, 1 WARN, 2 UNKNOWN, 3 FAIL).
FAIL = 3

__all__ = [
    "alert_rules",
    "alertmanager_config",
    "monitoring_extravars",
    "prometheus_config",
    "prometheus_text",
    "slurm_serves_metrics",
]


def monitoring_extravars(bp: Blueprint) -> dict[str, Any]:
    """The monitoring role's extravars; only `monitoring_enabled: false` when the blueprint has it off."""
    mon = bp.monitoring
    if not mon.enabled:
        return {"monitoring_enabled": False}
    return {
        "monitoring_enabled": True,
        "monitoring_host": mon.host or bp.controller.host,
        "monitoring_slurm_exporter_host": bp.login[0].host,
        "monitoring_slurm_exporter_port": mon.slurm_exporter_port,
        "monitoring_slurm_exporter_accounting": bp.slurm.accounting,
        "monitoring_retention_days": mon.retention_days,
        "monitoring_prometheus_config": prometheus_config(bp),
        "monitoring_rules": alert_rules(bp),
        "monitoring_alertmanager_config": alertmanager_config(bp),
        # the health sweep's results reach Prometheus through the sweep host's node exporter
        "hpckit_health_textfile_dir": TEXTFILE_DIR,
    }


def slurm_serves_metrics(bp: Blueprint) -> bool:
    release = slurm_release_of(bp)
    return (release.major, release.minor) >= SLURM_METRICS_SINCE


def _address(bp: Blueprint, host: str) -> str:
    return next((e.address or e.name for e in host_entries(bp) if e.name == host), host)


def prometheus_config(bp: Blueprint) -> dict[str, Any]:
    interval = f"{bp.monitoring.scrape_interval_s}s"
    hosts = [
        {"targets": [f"{e.address or e.name}:{NODE_EXPORTER_PORT}"], "labels": {"host": e.name}}
        for e in host_entries(bp)
    ]
    login = bp.login[0].host
    jobs: list[dict[str, Any]] = [
        {"job_name": "prometheus", "static_configs": [{"targets": [f"localhost:{PROMETHEUS_PORT}"]}]},
        {"job_name": "node", "static_configs": hosts},
        {
            "job_name": "hpckit-slurm",
            "static_configs": [
                {"targets": [f"{_address(bp, login)}:{bp.monitoring.slurm_exporter_port}"], "labels": {"host": login}}
            ],
        },
    ]
    if bp.monitoring.dcgm_exporter_port is not None:
        jobs.append({"job_name": "dcgm", "static_configs": _gpu_nodes(bp, bp.monitoring.dcgm_exporter_port)})
    if slurm_serves_metrics(bp):
        ctl = f"{_address(bp, bp.controller.host)}:{SLURMCTLD_PORT}"
        jobs += [
            {"job_name": f"slurmctld-{p}", "metrics_path": f"/metrics/{p}", "static_configs": [{"targets": [ctl]}]}
            for p in SLURM_METRICS_PATHS
        ]
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [RULES_FILE],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"localhost:{ALERTMANAGER_PORT}"]}]}]},
        "scrape_configs": jobs,
    }


# Prometheus' own templates ({{ $labels.node }}) are written [[ $labels.node ]] in these variables: Ansible
# would render {{ }} in a variable as Jinja. The role's templates, and prometheus_text, turn them back.
_OPEN, _CLOSE = "[[", "]]"


def prometheus_text(text: str) -> str:
    """A rule file's text as Prometheus reads it (what the role's template writes)."""
    return text.replace(_OPEN, "{{").replace(_CLOSE, "}}")


def _gpu_nodes(bp: Blueprint, port: int) -> list[dict[str, Any]]:
    gpu = {name for part, name, _ in bp.compute_hosts() if any(hw.gpus for hw in bp.node_hardware(part))}
    return [
        {"targets": [f"{e.address or e.name}:{port}"], "labels": {"host": e.name}}
        for e in host_entries(bp)
        if e.name in gpu
    ]


def _rule(name: str, expr: str, for_s: int, severity: str, summary: str) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_s:
        rule["for"] = f"{for_s}s"
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {"summary": summary}
    return rule


def alert_rules(bp: Blueprint) -> dict[str, Any]:
    """The rule groups: Slurm's daemons and nodes, then what the health checks found."""
    mon = bp.monitoring
    down = mon.node_down_for_s
    slurm = [
        _rule("HpckitSlurmExporterDown", 'up{job="hpckit-slurm"} == 0', 120, "critical",
              "hpckit's Slurm exporter on [[ $labels.host ]] does not answer: no Slurm metrics, no Slurm alerts"),
        _rule("SlurmctldUnreachable", "slurm_up == 0", 120, "critical",
              "slurmctld does not answer the Slurm clients on [[ $labels.host ]]"),
        _rule("SlurmNodeDown", "slurm_node_up == 0", down, "warning",
              "[[ $labels.node ]] is down or not responding to slurmctld"),
        _rule("HpckitNodeDrained", "slurm_node_drained_by_hpckit == 1", 0, "warning",
              "hpckit drained [[ $labels.node ]]: [[ $labels.reason ]]"),
        _rule("SlurmJobsPendingOnResources",
              f'slurm_job_pending_oldest_seconds{{reason="Resources"}} > {mon.pending_resources_max_s}', 0, "warning",
              f"a job has waited for resources longer than {mon.pending_resources_max_s} s"),
        _rule("NodeExporterDown", 'up{job="node"} == 0', down, "warning",
              "[[ $labels.host ]] does not answer Prometheus (node exporter)"),
    ]  # fmt: skip
    if bp.slurm.accounting:
        dbd = "slurmdbd does not answer: accounting and limits are not enforced from the database"
        slurm.insert(2, _rule("SlurmdbdUnreachable", "slurm_dbd_up == 0", 300, "critical", dbd))
    return {"groups": [{"name": "hpckit-slurm", "rules": slurm}, {"name": "hpckit-health", "rules": _health_rules(bp)}]}


def _health_rules(bp: Blueprint) -> list[dict[str, Any]]:
    rules = [
        _rule("HpckitCircuitBreakerHolding", "hpckit_health_circuit_breaker_tripped > 0", 0, "critical",
              "[[ $labels.check ]] fails on [[ $value ]] nodes: hpckit holds its drains, look at the fleet"),
        _rule("SharedFilesystemMissing", f'hpckit_health_status{{check="host.mounts"}} == {FAIL}', 0, "critical",
              "[[ $labels.node ]]: a shared filesystem is missing or read-only ([[ $labels.metric ]])"),
        _rule("HpckitHealthSweepStale", "time() - hpckit_health_last_sweep_timestamp_seconds > 172800", 0, "warning",
              "the nightly health sweep has not run for two days"),
    ]  # fmt: skip
    if any(hw.gpus for part in bp.partitions for hw in bp.node_hardware(part)):
        rules += [
            _rule("GpuXidErrors", f'hpckit_health_status{{check="gpu.xid"}} == {FAIL}', 0, "critical",
                  "[[ $labels.node ]]: GPU XID errors ([[ $labels.metric ]])"),
            _rule("GpuEccErrors", f'hpckit_health_status{{check=~"gpu.ecc|gpu.remap"}} == {FAIL}', 0, "critical",
                  "[[ $labels.node ]]: GPU memory errors ([[ $labels.check ]], [[ $labels.metric ]])"),
        ]  # fmt: skip
    return rules


def alertmanager_config(bp: Blueprint) -> dict[str, Any]:
    """One receiver with every address the blueprint gives (none: alerts show in Alertmanager only)."""
    alerts = bp.monitoring.alerts
    receiver: dict[str, Any] = {"name": "hpckit"}
    if alerts.webhooks:
        receiver["webhook_configs"] = [{"url": url, "send_resolved": True} for url in alerts.webhooks]
    if alerts.email:
        receiver["email_configs"] = [
            {"to": to, "from": alerts.email_from, "smarthost": alerts.smarthost, "send_resolved": True}
            for to in alerts.email
        ]
    return {
        "route": {
            "receiver": "hpckit",
            "group_by": ["alertname", "node"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
        },
        "receivers": [receiver],
    }
