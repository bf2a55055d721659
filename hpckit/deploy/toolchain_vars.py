"""Blueprint `bench:` -> the bench_toolchain role's variables. Pure; what goes where is hpckit.blueprint.toolchain's."""

from __future__ import annotations

from typing import Any

from hpckit.blueprint.models import Blueprint
from hpckit.blueprint.toolchain import nccl_tests_partitions, torch_shared, torch_venv

__all__ = ["toolchain_extravars"]


def toolchain_extravars(bp: Blueprint) -> dict[str, Any]:
    torch, tests = bp.bench.torch, bp.bench.nccl_tests
    built = nccl_tests_partitions(bp)
    out: dict[str, Any] = {"bench_toolchain_enabled": torch is not None or bool(built)}
    if torch is not None:
        out |= {
            "bench_toolchain_torch_venv": torch_venv(bp),
            "bench_toolchain_torch_shared": torch_shared(bp),
            "bench_toolchain_torch_requirements": list(torch.requirements),
            "bench_toolchain_torch_wheels": torch.wheels or "",
            "bench_toolchain_torch_index_url": torch.index_url or "",
        }
    if tests is not None and built:
        out |= {
            "bench_toolchain_nccl_tests_partitions": built,
            "bench_toolchain_nccl_tests_version": tests.version,
            "bench_toolchain_nccl_tests_source": tests.tarball,
            "bench_toolchain_nccl_tests_sha256": tests.sha256 or "",
            "bench_toolchain_cuda_home": tests.cuda_home,
            "bench_toolchain_nccl_home": tests.nccl_home,
            "bench_toolchain_mpi_home": tests.mpi_home,
            "bench_toolchain_gencode": tests.gencode or "",
        }
    return out
