"""Render a template and hand the script to Slurm: here on the login node, or through it with --cluster."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hpckit.jobs.library import SITE_DEFAULTS, Library, Rendered, local_site_defaults, read_site_defaults
from hpckit.proc import LocalTransport, Transport
from hpckit.slurm.jobparse import TestOnlyEstimate
from hpckit.slurm.jobs import JobOutcome, Jobs


def transport_for(cluster: str | None, state: Path | None = None) -> Transport:
    """The login node of a deployed cluster, or this machine when no cluster is named."""
    if cluster is None:
        return LocalTransport()
    from hpckit.slurm.connect import login_transport

    return login_transport(cluster, state)


@dataclass(frozen=True)
class Submitted:
    rendered: Rendered
    job_id: str
    outcome: JobOutcome | None  # set when waited for


def render(template: str, values: Mapping[str, object], library: Library | None = None) -> Rendered:
    return (library or Library(site_defaults=local_site_defaults())).get(template).render(values)


def library_for(jobs: Jobs | None) -> Library:
    """The templates with the site's defaults: those of the cluster's login node when `jobs` reach one
    over SSH, else this machine's."""
    if jobs is None or isinstance(jobs.transport, LocalTransport):
        return Library(site_defaults=local_site_defaults())
    text = jobs.read_file(str(SITE_DEFAULTS))
    return Library(site_defaults=read_site_defaults(text, f"{jobs.transport.where}:{SITE_DEFAULTS}"))


def submit(
    rendered: Rendered,
    jobs: Jobs,
    *,
    wait: bool = False,
    timeout: float | None = None,
    check: bool = True,
    hold: bool = False,
) -> Submitted:
    """Create the job's log directories, submit (`hold`: held), and (with `wait`) follow it to the end.

    With `check`, a job that fails raises JobFailedError, carrying its exit status and the log's tail.
    """
    start = jobs.clock()
    job_id = jobs.submit(rendered.script, rendered.mkdirs, hold=hold)
    outcome = jobs.follow(job_id, start, timeout, check=check) if wait else None
    return Submitted(rendered, job_id, outcome)


def check_accepted(rendered: Rendered, jobs: Jobs) -> TestOnlyEstimate:
    """`sbatch --test-only`: would Slurm accept the script, and where would it start."""
    return jobs.test_only(rendered.script)
