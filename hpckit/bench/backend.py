"""Which program measures the collective (nccl-tests or hpckit's torch_sweep) and the job that runs it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from hpckit.bench.registry import Benchmark
from hpckit.errors import InputError
from hpckit.jobs.params import ParamValue

Backend = Literal["nccl-tests", "torch"]
BACKENDS = ("auto", "nccl-tests", "torch")
TEMPLATES: dict[Backend, str] = {"nccl-tests": "nccl-tests", "torch": "bench-torch"}
NCCL_TESTS_DIR = "/opt/nccl-tests/build"
_SIZE = re.compile(r"^\d+[KMG]?$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# sweeps that reach the plateau on GPUs; small ones on CPUs (gloo), where a big sweep takes minutes
GPU_SIZES = ("8", "8G")
CPU_SIZES = ("1K", "16M")


def choose_backend(requested: str, gpus_per_node: int, configured: bool, binary_found: bool) -> Backend:
    """`auto`: nccl-tests where there are GPUs and its binaries (or a container) are configured, else torch.

    `configured`: the user named a container or an nccl-tests directory; `binary_found`: the binary is
    where nccl-tests' template looks for it by default.
    """
    if requested not in BACKENDS:
        raise InputError(f"unknown backend {requested!r} (choose from {', '.join(BACKENDS)})")
    if requested == "nccl-tests":
        if gpus_per_node < 1:
            raise InputError("the nccl-tests backend needs GPUs (--gpus-per-node >= 1); use --backend torch")
        return "nccl-tests"
    if requested == "torch":
        return "torch"
    return "nccl-tests" if gpus_per_node >= 1 and (configured or binary_found) else "torch"


def parse_size(text: str) -> int:
    """nccl-tests sizes: bytes, or K, M, G (powers of 1024)."""
    text = text.strip().upper()
    if not _SIZE.match(text):
        raise InputError(f"size {text!r}: expected bytes or a number with K, M or G (1K, 16M, 8G)")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1], 1)
    return int(text.rstrip("KMG")) * scale


def check_env(settings: tuple[str, ...]) -> tuple[str, ...]:
    for setting in settings:
        if not _ENV.match(setting):
            raise InputError(f"--env {setting!r}: expected NAME=VALUE (NCCL_ALGO=Ring)")
    return settings


@dataclass(frozen=True)
class Sweep:
    """The measurement asked for, whichever program makes it."""

    bench: Benchmark
    nodes: int
    gpus_per_node: int
    min_bytes: str
    max_bytes: str
    factor: int = 2
    warmup: int = 5
    iters: int = 20
    check: bool = True
    env: tuple[str, ...] = ()
    tasks_per_node: int = 0  # ranks per node; 0: one per GPU, one on a CPU node (torch backend only)

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise InputError("--nodes must be at least 1")
        if parse_size(self.min_bytes) <= 0 or parse_size(self.min_bytes) > parse_size(self.max_bytes):
            raise InputError(f"sizes: need 0 < --min-bytes <= --max-bytes, got {self.min_bytes}..{self.max_bytes}")
        if self.factor < 2 or self.iters < 1 or self.warmup < 0:
            raise InputError("need --factor >= 2, --iters >= 1 and --warmup >= 0")
        check_env(self.env)
        if self.tasks_per_node < 0:
            raise InputError("tasks per node must be 0 (one per GPU) or more")

    @property
    def ranks_per_node(self) -> int:
        return self.tasks_per_node or self.gpus_per_node or 1


@dataclass(frozen=True)
class JobPlace:
    """Where and how the job runs: Slurm placement and the files it uses on the shared filesystem."""

    partition: str | None
    log_dir: str
    cpus_per_task: int = 0
    overcommit: bool = False  # more ranks than the node has CPUs (a 1-CPU node's two-rank test)
    time: str = "00:15:00"
    python: str = "python3"
    program: str = ""  # torch_sweep.py as staged on the cluster
    nccl_tests_dir: str = NCCL_TESTS_DIR
    container: str = ""
    nodelist: tuple[str, ...] = ()  # these nodes exactly (the bisect's probes); empty: any


def template_values(backend: Backend, sweep: Sweep, place: JobPlace) -> tuple[str, dict[str, ParamValue]]:
    """The sbatch template and its parameters for this sweep."""
    common: dict[str, ParamValue] = {
        "job_name": f"bench-{sweep.bench.name}",
        "nodes": sweep.nodes,
        "gpus_per_node": sweep.gpus_per_node,
        "time": place.time,
        "log_dir": place.log_dir,
        "partition": place.partition or "",
        "cpus_per_task": place.cpus_per_task,
        "overcommit": place.overcommit,
        "min_bytes": sweep.min_bytes,
        "max_bytes": sweep.max_bytes,
        "step_factor": sweep.factor,
        "warmup": sweep.warmup,
        "iters": sweep.iters,
        "check": int(sweep.check),
        "op": sweep.bench.op,
        "container": place.container,
        "env": sweep.env,
        "nodelist": ",".join(place.nodelist),
    }
    if backend == "nccl-tests":
        if sweep.tasks_per_node not in (0, sweep.gpus_per_node):
            raise InputError("nccl-tests runs one task per GPU: tasks per node cannot differ from GPUs per node")
        return TEMPLATES[backend], {**common, "bin_dir": place.nccl_tests_dir, "exclusive": True}
    torch: dict[str, ParamValue] = {
        "python": place.python,
        "program": place.program,
        "tasks_per_node": sweep.tasks_per_node,
    }
    return TEMPLATES[backend], {**common, **torch}
