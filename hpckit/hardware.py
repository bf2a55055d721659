"""The hardware table (hpckit/data/hardware.yaml): what each GPU and fabric should give."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict

from hpckit.paths import DATA_DIR

HARDWARE_FILE = DATA_DIR / "hardware.yaml"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NvlinkBusbw(_Frozen):
    nvls: float | None = None
    plain: float | None = None


class HealthFractions(_Frozen):
    gemm_fraction: float
    copy_fraction: float
    tolerance: float


class GpuType(_Frozen):
    key: str = ""
    gres: str
    names: tuple[str, ...] = ()
    memory_gib: float
    bf16_dense_tflops: float | None = None
    mem_bw_gbps: float | None = None
    nvlink_busbw_gbps: NvlinkBusbw | None = None
    health: HealthFractions | None = None


class FabricEfficiency(_Frozen):
    low: float
    high: float


class Fabric(_Frozen):
    ib_allreduce_efficiency: FabricEfficiency


class HardwareTable(_Frozen):
    gpus: dict[str, GpuType]
    ib_rates: dict[str, int]
    fabric: Fabric

    def gpu(self, key: str) -> GpuType | None:
        """Look a GPU up by table key, GRES name or product name (case-insensitive)."""
        wanted = key.strip().lower()
        for gpu in self.gpus.values():
            if wanted in {gpu.key, gpu.gres.lower(), *(n.lower() for n in gpu.names)}:
                return gpu
        return None

    def ib_allreduce_range(self, hcas: int, rate_gbps: float) -> tuple[float, float]:
        """Expected inter-node all_reduce busbw (GB/s) for `hcas` ports of `rate_gbps` each."""
        raw = hcas * rate_gbps / 8.0
        eff = self.fabric.ib_allreduce_efficiency
        return raw * eff.low, raw * eff.high


@cache
def hardware_table(path: Path = HARDWARE_FILE) -> HardwareTable:
    raw = yaml.safe_load(path.read_text())
    for key, gpu in raw["gpus"].items():
        gpu["key"] = key
    return HardwareTable.model_validate(raw)
