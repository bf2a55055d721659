"""What the deploy installs for `hpckit bench` and `verify`, and where: derived from the blueprint alone, so that the
deploy's variables, its record and the bench agree. Pure.

Per partition: nccl-tests where its nodes have GPUs and the blueprint asks for nccl-tests (a build on each node, or an
image run through pyxis), else hpckit's torch_sweep in the torch virtualenv when the blueprint asks for one, else
nothing (the bench then uses its own defaults: `python3` on the nodes, /opt/nccl-tests/build).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

from hpckit.blueprint.models import Blueprint, Partition, TorchToolchain

NODE_ROOT = "/opt/hpckit/toolchain"  # a virtualenv per node
NCCL_TESTS_ROOT = "/opt/nccl-tests"  # a build per node: each node's own CUDA and NCCL


@dataclass(frozen=True)
class PartitionToolchain:
    backend: Literal["nccl-tests", "torch"] | None = None
    python: str | None = None  # the torch virtualenv's interpreter
    nccl_tests_dir: str | None = None  # where the *_perf binaries are (in the image, for a container)
    container: str | None = None  # the image nccl-tests runs in

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def torch_key(torch: TorchToolchain) -> str:
    """Names the virtualenv: a change of requirements or source makes a new one beside the old."""
    what = {"requirements": torch.requirements, "wheels": torch.wheels, "index_url": torch.index_url}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]


def torch_shared(bp: Blueprint) -> bool:
    torch = bp.bench.torch
    return torch is not None and (torch.location or ("shared" if bp.filesystems else "node")) == "shared"


def torch_venv(bp: Blueprint) -> str | None:
    torch = bp.bench.torch
    if torch is None:
        return None
    root = f"{bp.filesystems[0].mount.rstrip('/')}/hpckit/toolchain" if torch_shared(bp) else NODE_ROOT
    return f"{root}/torch-{torch_key(torch)}"


def nccl_tests_dir(bp: Blueprint) -> str | None:
    tests = bp.bench.nccl_tests
    if tests is None:
        return None
    return tests.image_bin_dir if tests.image else f"{NCCL_TESTS_ROOT}/{tests.version}/build"


def has_gpus(bp: Blueprint, part: Partition) -> bool:
    return any(hw.gpus is not None for hw in bp.node_hardware(part))


def partition_toolchain(bp: Blueprint, part: Partition) -> PartitionToolchain:
    venv = torch_venv(bp)
    python = f"{venv}/bin/python" if venv else None
    tests = bp.bench.nccl_tests
    if tests is not None and has_gpus(bp, part):
        return PartitionToolchain("nccl-tests", python, nccl_tests_dir(bp), tests.image)
    if python is not None:
        return PartitionToolchain("torch", python)
    return PartitionToolchain()


def nccl_tests_partitions(bp: Blueprint) -> list[str]:
    """The partitions whose nodes build nccl-tests."""
    tests = bp.bench.nccl_tests
    if tests is None or tests.image:
        return []
    return [p.name for p in bp.partitions if has_gpus(bp, p)]


def toolchain_record(bp: Blueprint) -> dict[str, Any]:
    """The record's toolchain.json: what was installed, where, and what each partition's benchmarks run."""
    torch, tests = bp.bench.torch, bp.bench.nccl_tests
    return {
        "torch": None
        if torch is None
        else {
            "venv": torch_venv(bp),
            "location": "shared" if torch_shared(bp) else "node",
            "requirements": list(torch.requirements),
            "source": f"wheels {torch.wheels}" if torch.wheels else f"index {torch.index_url or '(the hosts pip)'}",
        },
        "nccl_tests": None
        if tests is None
        else {
            "version": tests.version,
            "image": tests.image,
            "bin_dir": nccl_tests_dir(bp),
            "built_on": nccl_tests_partitions(bp),
        },
        "partitions": {p.name: partition_toolchain(bp, p).as_dict() for p in bp.partitions},
    }
