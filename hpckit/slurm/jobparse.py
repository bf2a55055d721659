"""Pure parsers of the job commands' output: sbatch, squeue, sacct, scontrol show job (text in, typed values out)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import hostlist

from hpckit.slurm.parsers import SlurmParseError

# Base job states after which nothing more happens (squeue(1), JOB STATE CODES). COMPLETING is not
# among them for squeue, but there the batch script has already exited and accounting has its result.
TERMINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "SPECIAL_EXIT",
        "TIMEOUT",
    }
)
FINISHED_QUEUE_STATES = TERMINAL_STATES | {"COMPLETING"}
# One job as Slurm's commands name it (slurm_xlate_job_id): N, an array task N_M, a heterogeneous job's
# component N+K. ASCII digits with no leading zero: Python's int() would also take blanks, signs, '_'
# between digits and other scripts' digits, and scontrol prints "JobId=7" for "007".
_JOB_ID = re.compile(r"[1-9][0-9]*(?:[_+](?:0|[1-9][0-9]*))?")
_NO_NODES = {"", "(null)", "None assigned", "None"}


@dataclass(frozen=True)
class JobRecord:
    """What became of a job once it left the queue."""

    job_id: str
    state: str  # base state, upper case: COMPLETED, FAILED, CANCELLED, TIMEOUT ...
    exit_code: int  # the batch script's exit status
    signal: int  # the signal that ended it, 0 if none
    nodes: tuple[str, ...]
    source: str  # "sacct" or "scontrol": which view of the job this came from
    reason: str = ""
    batch_host: str = ""

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def ok(self) -> bool:
        return self.state == "COMPLETED" and self.exit_code == 0 and self.signal == 0

    @property
    def status(self) -> int:
        """A process exit status for the job, as a shell would give it: the code, 128+signal, or 1."""
        if self.exit_code:
            return self.exit_code
        if self.signal:
            return 128 + self.signal
        return 0 if self.ok else 1


@dataclass(frozen=True)
class TestOnlyEstimate:
    """`sbatch --test-only`: the job would be accepted, and when and where it would start."""

    job_id: str
    start: str
    processors: int | None
    nodes: str
    partition: str


def base_state(text: str) -> str:
    """'CANCELLED by 1000' -> 'CANCELLED'; 'completed' -> 'COMPLETED'."""
    words = text.strip().split()
    if not words:
        raise SlurmParseError("empty job state")
    return words[0].upper().rstrip("+")


def is_job_id(text: str) -> bool:
    return _JOB_ID.fullmatch(text) is not None


def parse_submit(stdout: str) -> str:
    """`sbatch --parsable` prints `ID` or `ID;CLUSTER`."""
    first = next((line.strip() for line in stdout.splitlines() if line.strip()), "")
    job_id = first.split(";", 1)[0]
    if not re.fullmatch(r"\d+", job_id):
        raise SlurmParseError(f"sbatch --parsable printed {stdout.strip()!r}, not a job id")
    return job_id


_ERROR_LINE = re.compile(r"^[a-z_]+:\s*error:\s*(?P<msg>.*)$", re.M)


def slurm_error(stderr: str) -> str:
    """The `sbatch: error: ...` messages of a failed command, joined; the whole text if there are none."""
    messages = [m.group("msg").strip() for m in _ERROR_LINE.finditer(stderr) if m.group("msg").strip()]
    return "; ".join(messages) if messages else stderr.strip()


_TEST_ONLY = re.compile(
    r"Job (?P<id>\d+) to start at (?P<start>\S+)"
    r"(?:.*? using (?P<procs>\d+) processors)?"
    r"(?: on (?:nodes )?(?P<nodes>\S+))?"
    r"(?: in partition (?P<partition>\S+))?"
)


def parse_test_only(text: str) -> TestOnlyEstimate:
    """`sbatch: Job 704798 to start at 2026-09-18T23:38:40 using 8 processors on nodes n1 in partition p`."""
    match = _TEST_ONLY.search(text)
    if not match:
        raise SlurmParseError(f"no start estimate in the --test-only output: {text.strip()!r}")
    procs = match.group("procs")
    return TestOnlyEstimate(
        match.group("id"),
        match.group("start"),
        int(procs) if procs else None,
        match.group("nodes") or "",
        match.group("partition") or "",
    )


def parse_queue_state(stdout: str) -> str | None:
    """`squeue -h -j ID -o %T`: the job's state, or None once it has left the queue."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    return base_state(lines[0]) if lines else None


def parse_exit_code(text: str) -> tuple[int, int]:
    """Slurm's `EXIT:SIGNAL` ('0:0', '1:0', '0:15')."""
    match = re.fullmatch(r"\s*(\d+):(\d+)\s*", text)
    if not match:
        raise SlurmParseError(f"not a Slurm exit code (EXIT:SIGNAL): {text!r}")
    return int(match.group(1)), int(match.group(2))


def expand_nodes(text: str) -> tuple[str, ...]:
    text = text.strip()
    if text in _NO_NODES:
        return ()
    try:
        return tuple(hostlist.expand_hostlist(text))
    except hostlist.BadHostlist as exc:
        raise SlurmParseError(f"not a Slurm node list: {text!r} ({exc})") from None


def parse_delimited(
    text: str, fields: Sequence[str] | None = None, *, delimiter: str = "|", header: bool = False
) -> list[dict[str, str]]:
    """sacct/squeue `--parsable2` rows as dicts: columns named by `fields`, or by the first line when `header`."""
    lines = [line for line in text.splitlines() if line.strip()]
    if header:
        if not lines:
            return []
        names = lines[0].split(delimiter)
        lines = lines[1:]
    elif fields is None:
        raise ValueError("parse_delimited needs the field names or a header line")
    else:
        names = list(fields)
    rows = []
    for lineno, line in enumerate(lines, 2 if header else 1):
        cells = line.split(delimiter)
        if len(cells) != len(names):
            raise SlurmParseError(f"line {lineno}: {len(cells)} fields, expected {len(names)}: {line[:120]!r}")
        # A repeated column name (sinfo -o %all has some) keeps its first value.
        row: dict[str, str] = {}
        for name, cell in zip(names, cells, strict=True):
            row.setdefault(name, cell)
        rows.append(row)
    return rows


SACCT_FIELDS = ("JobID", "State", "ExitCode", "NodeList")


def record_from_sacct(rows: Sequence[Mapping[str, str]], job_id: str) -> JobRecord | None:
    """The allocation row (JobID exactly `job_id`, not a step `ID.batch`) of sacct's rows, as a JobRecord."""
    for row in rows:
        if row.get("JobID", job_id) != job_id:
            continue
        code, signal = parse_exit_code(row["ExitCode"])
        return JobRecord(job_id, base_state(row["State"]), code, signal, expand_nodes(row["NodeList"]), "sacct")
    return None


# A key is a word, possibly with ':' or '/' inside (AllocNode:Sid, CPUs/Task), directly followed by '='.
_KEY = re.compile(r"(?:^|(?<=\s))(?P<key>[A-Za-z][A-Za-z0-9_:/]*)=")


def parse_scontrol(text: str) -> list[dict[str, str]]:
    """`scontrol show job [-o] [-d]` records: `Key=Value` pairs, one record per line (-o) or per blank-line block.

    A value runs to the next key, so values with spaces (Reason=..., Comment=...) stay whole.
    """
    records: list[dict[str, str]] = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines:
            continue
        # -o prints one record per line; without it a record's lines are indented continuations.
        groups = [[line] for line in lines] if all(not line[0].isspace() for line in lines) else [lines]
        records.extend(_pairs(" ".join(group)) for group in groups)
    return records


def _pairs(line: str) -> dict[str, str]:
    matches = list(_KEY.finditer(line))
    if not matches:
        raise SlurmParseError(f"no Key=Value pairs in scontrol output: {line[:120]!r}")
    fields: dict[str, str] = {}
    for match, following in zip(matches, [*matches[1:], None], strict=True):
        end = following.start() if following else len(line)
        fields.setdefault(match.group("key"), line[match.end() : end].strip())
    return fields


def record_from_scontrol(fields: Mapping[str, str]) -> JobRecord:
    try:
        code, signal = parse_exit_code(fields["ExitCode"])
        return JobRecord(
            fields["JobId"],
            base_state(fields["JobState"]),
            code,
            signal,
            expand_nodes(fields.get("NodeList", "")),
            "scontrol",
            reason=fields.get("Reason", "") if fields.get("Reason") not in (None, "None") else "",
            batch_host=fields.get("BatchHost", "") if fields.get("BatchHost") != "(null)" else "",
        )
    except KeyError as exc:
        raise SlurmParseError(f"scontrol show job: no {exc.args[0]} field") from None


def expand_output_path(pattern: str, fields: Mapping[str, str]) -> str:
    """Fill sbatch's filename patterns (%j %x %u %N %A %a %%) from a job's scontrol fields.

    scontrol shows StdOut with the patterns in some releases and already filled in others.
    """
    user = fields.get("UserId", "").split("(", 1)[0]
    first_node = (expand_nodes(fields.get("NodeList", "")) or ("",))[0]
    values = {
        "j": fields.get("JobId", ""),
        "J": fields.get("JobId", ""),
        "x": fields.get("JobName", ""),
        "u": user,
        "N": fields.get("BatchHost", "") or first_node,
        "A": fields.get("ArrayJobId", fields.get("JobId", "")),
        "a": fields.get("ArrayTaskId", ""),
        "%": "%",
    }
    return re.sub(r"%(\d*)([jJxuNAa%])", lambda m: _fill(values[m.group(2)], m.group(1)), pattern)


def _fill(value: str, width: str) -> str:
    return value.zfill(int(width)) if width and value.isdigit() else value


@dataclass(frozen=True)
class TaskFailure:
    """One of srun's reports of tasks that ended badly (src/srun/launch.c: `NODES: task(s) IDS: WHAT`)."""

    hosts: str  # as srun prints them: node3, node[1-2]
    tasks: str  # 2, 0-3, 0,2
    exit_code: int | None  # None when a signal or the OOM killer ended them
    what: str  # "exit code 1", "Killed", "Out Of Memory" ...
    line: int  # where in the output (0-based)

    def describe(self) -> str:
        plural = "s" if any(c in self.tasks for c in ",-") else ""
        return f"task{plural} {self.tasks} on {self.hosts} ({self.what})"


_TASK_FAILURE = re.compile(
    r"^srun: error: (?P<hosts>\S+): tasks? (?P<tasks>[0-9][0-9,\-]*): "
    r"(?:Exited with exit code (?P<code>\d+)|(?P<what>.+?))\s*$"
)


def task_failures(output: str) -> list[TaskFailure]:
    """srun's lines about tasks that failed, in the order srun learnt of them: the first is where a
    multi-node job broke (the others are often ranks killed after it, with higher exit codes)."""
    failures = []
    for lineno, line in enumerate(output.splitlines()):
        match = _TASK_FAILURE.match(line)
        if match:
            code = match.group("code")
            what = f"exit code {code}" if code is not None else match.group("what")
            failures.append(
                TaskFailure(match.group("hosts"), match.group("tasks"), int(code) if code else None, what, lineno)
            )
    return failures


@dataclass(frozen=True)
class QueuedJob:
    """A job the controller still has queued or running, as squeue lists it."""

    job_id: str  # 123, or 123_4 for an array task
    user: str
    state: str
    name: str

    def describe(self) -> str:
        return f"job {self.job_id} ({self.name}, user {self.user}, {self.state})"


# The name last: it is the one field that may hold the separator.
SQUEUE_LIST_FORMAT = "%i|%u|%T|%j"


def parse_queue_listing(stdout: str) -> list[QueuedJob]:
    """`squeue -h -o '%i|%u|%T|%j'` rows."""
    jobs = []
    for lineno, line in enumerate(stdout.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|", 3)
        if len(parts) != 4:
            raise SlurmParseError(f"squeue line {lineno}: expected ID|USER|STATE|NAME, got {line!r}")
        job_id, user, state, name = parts
        jobs.append(QueuedJob(job_id.strip(), user.strip(), base_state(state), name))
    return jobs
