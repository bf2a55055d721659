"""Slurm commands through a Transport: SlurmClient is the one class that knows their command lines and runs
them; NodeOps, JobOps and the jobs' CliBackend read and judge what it brings back."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from hpckit.errors import HpckitError
from hpckit.proc import CommandResult, Transport
from hpckit.slurm.jobparse import SACCT_FIELDS, SQUEUE_LIST_FORMAT, TERMINAL_STATES
from hpckit.slurm.parsers import SINFO_NODES_FORMAT, NodeState, parse_sinfo_nodes, parse_version

# %E (the reason) comes last: it is free text and may itself hold a "|".
SINFO_FLEET_FORMAT = "%N|%T|%P|%E"
# The metrics exporter's squeue fields: job id, long state, submit time, reason (last: free text, it may hold "|").
SQUEUE_METRICS_FORMAT = "%i|%T|%V|%r"
# How --begin takes a time, and squeue's %S prints one.
SLURM_TIME = "%Y-%m-%dT%H:%M:%S"


class SlurmCommandError(HpckitError):
    def __init__(self, result: CommandResult) -> None:
        self.result = result
        super().__init__(result.describe())


@dataclass
class SlurmClient:
    """Every Slurm command line hpckit runs. Methods named for a command return its result for the caller
    to judge; the others raise SlurmCommandError when the command fails."""

    transport: Transport

    def run(self, *argv: str, stdin: str | None = None, timeout: float | None = 30.0) -> CommandResult:
        return self.transport.run(argv, stdin=stdin, timeout=timeout)

    def _stdout(self, *argv: str, timeout: float = 30.0) -> str:
        result = self.run(*argv, timeout=timeout)
        if not result.ok:
            raise SlurmCommandError(result)
        return result.stdout

    # ---------------------------------------------------------------- nodes

    def nodes(self) -> list[NodeState]:
        result = self.sinfo_nodes()
        if not result.ok:
            raise SlurmCommandError(result)
        return parse_sinfo_nodes(result.stdout)

    def sinfo_version(self, timeout: float = 30.0) -> CommandResult:
        return self.run("sinfo", "--version", timeout=timeout)

    def version(self) -> str:
        done = self.sinfo_version()
        if not done.ok:
            raise SlurmCommandError(done)
        return parse_version(done.stdout)

    def fleet_text(self, nodes: Sequence[str] | None = None) -> str:
        """``sinfo -h -N -o '%N|%T|%P|%E'``: a line per node and partition (for slurm.nodes.parse_fleet)."""
        argv = ["sinfo", "-h", "-N", "-o", SINFO_FLEET_FORMAT]
        if nodes:
            argv += ["-n", ",".join(nodes)]
        return self._stdout(*argv)

    def update_node(self, node: str, *settings: str) -> None:
        """``scontrol update nodename=NODE`` with `settings` (state=drain, reason=...)."""
        self._stdout("scontrol", "update", f"nodename={node}", *settings)

    def sinfo_nodes(self, timeout: float = 30.0) -> CommandResult:
        """``sinfo -h -N -o '%N|%T|%E'`` (for parsers.parse_sinfo_nodes), for the caller to judge."""
        return self.run("sinfo", "-h", "-N", "-o", SINFO_NODES_FORMAT, timeout=timeout)

    def sdiag(self, timeout: float = 30.0) -> CommandResult:
        """slurmctld's own statistics, as text."""
        return self.run("sdiag", timeout=timeout)

    def clusters(self, timeout: float = 30.0) -> CommandResult:
        """The clusters slurmdbd knows: succeeds only when slurmdbd answers."""
        return self.run("sacctmgr", "-n", "-P", "show", "cluster", "format=cluster", timeout=timeout)

    def partitions(self) -> CommandResult:
        return self.run("sinfo", "-h", "-o", "%R")

    def srun_on(
        self,
        node: str,
        argv: Sequence[str],
        *,
        partition: str | None,
        time_limit_min: int,
        timeout: float,
        job_name: str,
    ) -> CommandResult:
        """``argv`` as a one-node exclusive job on ``node``, waited for; its stdout comes back through srun."""
        cmd = ["srun", f"--nodelist={node}", "--nodes=1", "--ntasks=1", "--exclusive", "--input=none"]
        cmd += [f"--job-name={job_name}", f"--time={time_limit_min}", "--immediate=60", "--quiet"]
        if partition:
            cmd.append(f"--partition={partition}")
        return self.run(*cmd, "--", *argv, timeout=timeout)

    # ---------------------------------------------------------------- jobs

    def sbatch(self, options: str, script: str, mkdirs: Sequence[str] = ()) -> CommandResult:
        """sbatch reading the script from its stdin, after creating `mkdirs` in the same command (over SSH
        each command is a round trip); exit MKDIR_FAILED when they cannot be created. `options`: hpckit's
        own, blank-separated (--parsable --hold)."""
        if not mkdirs:
            return self.run("sbatch", *options.split(), stdin=script)
        return self.run("sh", "-c", _MKDIR_SBATCH, "hpckit-submit", options, *mkdirs, stdin=script)

    def sbatch_wrap(
        self,
        job_name: str,
        command: str,
        begin: dt.datetime,
        *,
        output: str,
        time_limit_min: int,
        partition: str | None,
    ) -> str:
        """Queue `command` as a one-node job held until `begin`, one at a time of its name (singleton);
        the job id (``123`` of ``123;cluster``)."""
        argv = [
            "sbatch",
            "--parsable",
            f"--job-name={job_name}",
            f"--begin={begin.strftime(SLURM_TIME)}",
            "--dependency=singleton",
            f"--time={time_limit_min}",
            f"--output={output}",
            "--nodes=1",
            "--ntasks=1",
        ]
        if partition:
            argv.append(f"--partition={partition}")
        return self._stdout(*argv, f"--wrap={command}").strip().split(";")[0]

    def squeue_all(self, timeout: float = 30.0) -> CommandResult:
        """Every job of every user, hidden partitions too (-a), a line per array task (-r: a pending array
        counts as the jobs it will be), as SQUEUE_METRICS_FORMAT."""
        return self.run("squeue", "-h", "-a", "-r", "-o", SQUEUE_METRICS_FORMAT, timeout=timeout)

    def pending(self, name: str) -> str:
        """``JOBID|BEGIN`` lines of the pending jobs named `name`."""
        return self._stdout("squeue", "-h", "-n", name, "-t", "PENDING", "-o", "%i|%S")

    def queue_state(self, job_id: str) -> CommandResult:
        return self.run("squeue", "-h", "-j", job_id, "-o", "%T")

    def queued(self, job_id: str | None, name: str | None, user: str | None) -> CommandResult:
        """The live jobs matching all that is given; without a job id or a user, the caller's own (--me)."""
        argv = ["squeue", "-h", "-o", SQUEUE_LIST_FORMAT]
        if job_id is not None:
            argv += ["-j", job_id]
        if name is not None:
            argv += ["-n", name]
        if user is not None:
            argv += ["-u", user]
        elif job_id is None:
            argv.append("--me")
        return self.run(*argv)

    def accounting(self, job_id: str) -> CommandResult:
        return self.run("sacct", "-X", "-n", "-P", "-j", job_id, "-o", ",".join(SACCT_FIELDS))

    def show_job(self, job_id: str) -> CommandResult:
        return self.run("scontrol", "show", "job", "-o", job_id)

    def scancel(self, job_id: str) -> CommandResult:
        return self.run("scancel", job_id)

    def wait_on_login(self, job_id: str, limit_s: int, grace_ms: int) -> CommandResult:
        """Poll the job where the transport runs, in one command, until it has ended (see _WAIT_SCRIPT)."""
        return self.run("sh", "-c", _WAIT_SCRIPT, "hpckit-wait", job_id, str(limit_s), str(grace_ms), timeout=None)


# sh, given OPTIONS DIR...: create the directories, then sbatch OPTIONS reads the script from stdin.
# OPTIONS are hpckit's own (--parsable --hold), split on blanks by the unquoted $o.
MKDIR_FAILED = 97
_MKDIR_SBATCH = f'o=$1; shift; mkdir -p -- "$@" || exit {MKDIR_FAILED}; exec sbatch $o'

# POSIX sh, run on the login node with JOB_ID LIMIT_S GRACE_MS: the same polling as Jobs.wait (50 ms apart,
# growing by 0.1 s per second waited to 1 s) until the controller shows the job in a final state. Then it
# prints that record and, when the record's StdOut is a readable file (no pattern left in it), a marker
# line naming the file and the file itself. A job COMPLETING for GRACE_MS (an epilog hanging, a node gone)
# has its record printed too, for the caller to ask accounting. Exit 0 printing nothing when scontrol fails
# (the job forgotten, the controller unreachable: the caller sorts it out); exit 124 after LIMIT_S seconds
# (0: never). Integer milliseconds: no awk per poll.
OUTPUT_MARK = "\n--- hpckit: job output follows, from "
_OUTPUT_MARK_SH = OUTPUT_MARK.replace("\n", "\\n")  # as printf's format writes it
_FINAL_PATTERN = "|".join(f'*" JobState={state} "*' for state in sorted(TERMINAL_STATES))
_WAIT_SCRIPT = f"""
id=$1 limit_ms=$(($2 * 1000)) grace_ms=$3 waited=0 since=
while :; do
  record=$(scontrol show job -o "$id" 2>/dev/null) || exit 0
  case "$record" in
    {_FINAL_PATTERN})
      printf '%s\\n' "$record"
      out=${{record#* StdOut=}}; out=${{out%% *}}
      case "$out" in
        /*%*) ;;
        /*) if [ -f "$out" ] && [ -r "$out" ]; then printf '{_OUTPUT_MARK_SH}%s\\n' "$out"; cat -- "$out"; fi ;;
      esac
      exit 0 ;;
    *" JobState=COMPLETING "*)
      [ -n "$since" ] || since=$waited
      if [ $((waited - since)) -ge "$grace_ms" ]; then printf '%s\\n' "$record"; exit 0; fi ;;
  esac
  delay=$((50 + waited / 10)); [ "$delay" -gt 1000 ] && delay=1000
  if [ "$limit_ms" -gt 0 ] && [ "$waited" -ge "$limit_ms" ]; then exit 124; fi
  sleep "$((delay / 1000)).$(printf %03d $((delay % 1000)))"
  waited=$((waited + delay))
done
"""
