"""Blueprint -> the hpckit_health role's variables (pure), for the deploy's extravars and inventory."""

from __future__ import annotations

from typing import Any

from hpckit.blueprint.models import Blueprint, Partition


def health_extravars(bp: Blueprint) -> dict[str, Any]:
    """Cluster-wide variables of the hpckit_health role: the shared mounts and the ``health:`` settings."""
    settings = bp.health
    return {
        "hpckit_health_enabled": settings.enabled,
        "hpckit_health_mounts": [fs.mount for fs in bp.filesystems],
        "hpckit_health_settings": {
            "drain": settings.drain,
            "resume_after": settings.resume_after,
            "escalate_unknown_after": settings.escalate_unknown_after,
            "circuit_breaker": settings.circuit_breaker,
            "disabled_checks": disabled_checks(bp),
            "quick_interval_s": settings.quick_interval_s,
            "nightly": settings.nightly,
            "ssh_probe": settings.ssh_probe.model_dump() if settings.ssh_probe is not None else None,
        },
    }


def disabled_checks(bp: Blueprint) -> list[str]:
    """The blueprint's disabled checks, and host.munge where the cluster does not use MUNGE (auth/slurm):
    no munged runs there, and Slurm's own key is checked by every daemon that reads it."""
    disabled = list(bp.health.disabled_checks)
    if bp.slurm.auth != "munge" and "host.munge" not in disabled:
        disabled.append("host.munge")
    return disabled


def health_host_vars(part: Partition) -> dict[str, Any]:
    """Per compute host: the InfiniBand it must have (GPUs already travel as hpckit_gpu_type/count)."""
    ib = part.hardware.infiniband if part.hardware is not None else None
    if ib is None:  # also a partition of nodes declared elsewhere: they get these vars there
        return {}
    return {"hpckit_health_infiniband": {"hcas": list(ib.hcas), "rate_gbps": ib.rate_gbps, "roce": ib.roce}}


def slurm_conf_lines(bp: Blueprint, program: str = "/etc/hpckit/health-check") -> dict[str, str]:
    """The slurm.conf settings that run the quick tier (and allow scrontab for the nightly sweep)."""
    if not bp.health.enabled:
        return {}
    return {
        "HealthCheckProgram": program,
        "HealthCheckInterval": str(bp.health.quick_interval_s),
        "HealthCheckNodeState": "ANY",
        "ScronParameters": "enable",
    }
