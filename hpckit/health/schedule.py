"""When the nightly sweep runs where there is neither scrontab nor systemd (Debian 12's slurm-client ships no
scrontab): a batch job held until the next cron time (hpckit.cron), which first queues its successor and then
sweeps, so that the chain survives a failed sweep.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from hpckit.cron import Cron
from hpckit.slurm.client import SLURM_TIME
from hpckit.slurm.nodes import JobOps

JOB_NAME = "hpckit-health-sweep"


def ensure_chain(
    jobs: JobOps,
    cron: Cron,
    launcher: Sequence[str],
    *,
    output: str,
    time_limit_min: int,
    partition: str | None,
    now: dt.datetime,
) -> str:
    """Make sure exactly one sweep job waits for the next cron time; returns what was done."""
    begin = cron.next_after(now)
    stamp = begin.strftime(SLURM_TIME)
    waiting = jobs.pending(JOB_NAME)
    if len(waiting) == 1 and waiting[0].begin == stamp:
        return f"sweep job {waiting[0].job_id} already waits for {stamp}"
    for job in waiting:
        jobs.cancel(job.job_id)
    me = " ".join(launcher)
    # The job queues its successor before sweeping, so that the chain survives a failed sweep.
    command = f"{me} schedule; exec {me} sweep"
    job_id = jobs.submit_held(
        JOB_NAME, command, begin, output=output, time_limit_min=time_limit_min, partition=partition
    )
    return f"sweep job {job_id} queued for {stamp}"
