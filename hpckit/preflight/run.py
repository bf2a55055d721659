"""`hpckit preflight`: probe every host over SSH in parallel, compare with the blueprint, report."""

from __future__ import annotations

from dataclasses import dataclass

from hpckit.blueprint.models import Blueprint
from hpckit.deploy.targets import Target
from hpckit.preflight.compare import build_report
from hpckit.preflight.expect import HostPlan, expectations
from hpckit.preflight.model import Report
from hpckit.preflight.probes import Connection, probe_hosts


@dataclass(frozen=True)
class PreflightOptions:
    gpu_driver: str = ""  # pin the NVIDIA driver on every GPU node ("" = the blueprint's, or any)
    workers: int = 32
    timeout: float = 30.0  # per command


def preflight(bp: Blueprint, target: Target, opts: PreflightOptions | None = None) -> Report:
    opts = opts or PreflightOptions()
    exp = expectations(bp, opts.gpu_driver)

    def connect(plan: HostPlan) -> Connection:
        return target.transport(plan.host)  # connects on its first command

    probes = probe_hosts(exp.plans, connect, workers=opts.workers, timeout=opts.timeout)
    return build_report(exp, probes)
