"""``nvidia-smi topo -m`` -> the GPU/NIC connection matrix and each GPU's CPU and NUMA affinity.

The nvidia role writes the CPU affinity into gres.conf ``Cores=``, so the affinity cells are kept exactly
as printed (``0-47,96-143``) next to their expanded CPU list.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from hpckit.hw.errors import HwParseError, no_value, parse_cpu_list

SOURCE = "nvidia-smi topo -m"

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_LINK_CELL = re.compile(r"^(X|NV\d+|[A-Z]{2,5}|N/A)$")
_GPU_LABEL = re.compile(r"^GPU(\d+)$")
_NIC_LEGEND = re.compile(r"^(?P<nic>NIC\d+):\s*(?P<name>\S+)$")


@dataclass(frozen=True)
class GpuAffinity:
    name: str  # "GPU0"
    index: int
    cpu_affinity: str | None  # as printed, e.g. "0-47,96-143"; None when the cell is empty or N/A
    cpus: tuple[int, ...]
    numa_affinity: str | None
    numa_nodes: tuple[int, ...]
    gpu_numa_id: int | None


@dataclass(frozen=True)
class TopoMatrix:
    devices: tuple[str, ...]  # column order: GPU0..GPUn, then NICs (or mlx5_N on older drivers)
    links: Mapping[str, Mapping[str, str]]  # links["GPU0"]["NIC0"] == "PIX"; "X" on the diagonal
    gpus: tuple[GpuAffinity, ...]
    nic_names: Mapping[str, str] = field(default_factory=dict)  # "NIC0" -> "mlx5_0" from the NIC Legend

    def link(self, a: str, b: str) -> str:
        return self.links[a][b]

    def nvlinks(self, a: str, b: str) -> int:
        """How many bonded NVLinks join two devices (``NV18`` -> 18); 0 when the path is PCIe."""
        match = re.fullmatch(r"NV(\d+)", self.links[a][b])
        return int(match.group(1)) if match else 0


def parse_topo_m(text: str, source: str = SOURCE) -> TopoMatrix:
    """Parse ``nvidia-smi topo -m`` (tab-separated as printed; ANSI underline escapes are removed)."""
    lines = [_ANSI.sub("", raw).rstrip("\r\n") for raw in text.splitlines()]
    numbered = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    if not numbered:
        raise HwParseError(source, None, "empty output")
    header_line, header = numbered[0]
    devices, affinity_names = _header(header, header_line, source)
    links: dict[str, dict[str, str]] = {}
    gpus: list[GpuAffinity] = []
    for number, line in _matrix_rows(lines, header_line):
        label, cells, rest = _split_row(line, len(devices), number, source)
        if label not in devices or label in links:
            raise HwParseError(source, number, f"unexpected row label {label!r}")
        links[label] = _link_cells(devices, cells, number, source)
        gpu = _GPU_LABEL.match(label)
        if gpu is not None:
            gpus.append(_affinity(label, int(gpu.group(1)), affinity_names, rest, number, source))
    missing = [d for d in devices if d not in links]
    if missing:
        raise HwParseError(source, None, f"no matrix row for {', '.join(missing)} (truncated output?)")
    return TopoMatrix(tuple(devices), links, tuple(gpus), _nic_legend(lines))


def _split_cells(line: str) -> list[str]:
    # Real output is tab-separated (with empty cells); copies that lost the tabs are split on spaces.
    return line.split("\t") if "\t" in line else ["", *re.split(r"\s{2,}", line.strip())]


def _header(line: str, number: int, source: str) -> tuple[list[str], list[str]]:
    cells = [c.strip() for c in _split_cells(line)]
    if cells and cells[0] == "":
        cells = cells[1:]
    names = [c for c in cells if c]
    cut = next((i for i, name in enumerate(names) if name in _AFFINITY_COLUMNS), len(names))
    devices, affinity = names[:cut], names[cut:]
    if not devices or not all(re.fullmatch(r"[A-Za-z][\w-]*", d) for d in devices):
        raise HwParseError(source, number, "not a `nvidia-smi topo -m` header (expected GPU0 ... columns)")
    if len(set(devices)) != len(devices):
        raise HwParseError(source, number, "duplicate device column")
    return devices, affinity


def _matrix_rows(lines: list[str], header_line: int) -> list[tuple[int, str]]:
    """The rows after the header, up to the first blank line (the legends follow it)."""
    rows: list[tuple[int, str]] = []
    for number in range(header_line + 1, len(lines) + 1):
        line = lines[number - 1]
        if not line.strip() or line.strip().startswith("Legend"):
            break
        rows.append((number, line))
    return rows


def _split_row(line: str, width: int, number: int, source: str) -> tuple[str, list[str], list[str]]:
    cells = line.split("\t") if "\t" in line else line.split()
    if len(cells) < width + 1:
        raise HwParseError(source, number, f"expected {width} matrix cells, got {len(cells) - 1}")
    return (
        cells[0].strip(),
        [c.strip() for c in cells[1 : width + 1]],
        [c.strip() for c in cells[width + 1 :]],
    )


def _link_cells(devices: list[str], cells: list[str], number: int, source: str) -> dict[str, str]:
    for cell in cells:
        if _LINK_CELL.match(cell) is None:
            raise HwParseError(source, number, f"unknown connection type {cell!r}")
    return dict(zip(devices, cells, strict=True))


def _affinity(label: str, index: int, names: list[str], cells: list[str], number: int, source: str) -> GpuAffinity:
    values = _assign(names, cells)
    cpu = values.get("CPU Affinity")
    numa = values.get("NUMA Affinity")
    numa_id = values.get("GPU NUMA ID")
    if numa_id is not None and not re.fullmatch(r"\d+", numa_id):
        raise HwParseError(source, number, f"{label}: bad GPU NUMA ID {numa_id!r}")
    return GpuAffinity(
        name=label,
        index=index,
        cpu_affinity=cpu,
        cpus=parse_cpu_list(cpu or "", source, number),
        numa_affinity=numa,
        numa_nodes=parse_cpu_list(numa or "", source, number),
        gpu_numa_id=int(numa_id) if numa_id is not None else None,
    )


def _assign(names: list[str], cells: list[str]) -> dict[str, str]:
    """Pair affinity columns with cells. nvidia-smi prints one extra empty cell before ``GPU NUMA ID``, so
    when there are more cells than names the last name takes the last cell."""
    pairs = list(zip(names, cells, strict=False))
    if len(cells) > len(names) and names:
        pairs = [*zip(names[:-1], cells, strict=False), (names[-1], cells[-1])]
    return {name: cell for name, cell in pairs if not no_value(cell)}


def _nic_legend(lines: list[str]) -> dict[str, str]:
    names: dict[str, str] = {}
    for line in lines:
        match = _NIC_LEGEND.match(line.strip())
        if match is not None:
            names[match.group("nic")] = match.group("name")
    return names
