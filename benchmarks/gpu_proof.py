"""hpckit on a real GPU machine, in one run: what needs a GPU and is otherwise tested on recorded outputs.

    bash benchmarks/gpu_proof.sh [OUT]        (OUT defaults to benchmarks/gpu-proof/<date>-<host>)

Steps, each kept whatever the others did (evidence, not a pass/fail gate):
1. smi: nvidia-smi's -q, --query-gpu CSV, topo -m and nvlink --status, saved raw and read by hpckit's parsers;
2. nvml: the same GPUs through NVML (nvidia-ml-py), compared with what nvidia-smi -q said;
3. health-quick: `hpckit health check --tier quick` (no drain, no store), its rows as JSON;
4. health-nightly: the nightly tier, whose GEMM and device-copy figures are judged against the hardware
   table's figure for this GPU (hpckit/data/hardware.yaml);
5. torch-sweep: hpckit's torch_sweep with NCCL on every GPU of the machine, parsed into pandas (CSV kept).

Writes OUT/proof.json (every step: status, seconds, what it found) and OUT/PROOF.md (the same as a table),
beside the raw outputs. Exit 0 when every step ran, 1 when one failed, 2 when there is no NVIDIA GPU here.
Needs no registry: only the working tree and the machine's own Python with torch (see gpu_proof.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
QUERY_FIELDS = (
    "index,name,uuid,driver_version,memory.total,power.limit,clocks.max.sm,pcie.link.gen.max,ecc.mode.current"
)
SMI_COMMANDS = {
    "nvidia-smi-q.txt": ["nvidia-smi", "-q"],
    "nvidia-smi-query-gpu.csv": ["nvidia-smi", f"--query-gpu={QUERY_FIELDS}", "--format=csv"],
    "nvidia-smi-topo-m.txt": ["nvidia-smi", "topo", "-m"],
    "nvidia-smi-nvlink-status.txt": ["nvidia-smi", "nvlink", "--status"],
}
STEP_TIMEOUT_S = 240  # the nightly tier's GEMM and copy on one GPU take well under a minute


@dataclass
class Step:
    name: str
    status: str = "not run"  # ok, failed, unavailable
    seconds: float = 0.0
    found: dict[str, Any] = field(default_factory=dict)
    error: str = ""


def run(argv: list[str], out: Path | None = None, timeout: float = STEP_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run a command from the repository's root; its stdout (and stderr after it) saved to `out`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env, check=False)
    if out is not None:
        out.write_text(done.stdout + (f"\n# stderr:\n{done.stderr}" if done.stderr.strip() else ""))
    return done


def step_smi(out: Path) -> dict[str, Any]:
    """nvidia-smi's outputs hpckit reads, each parsed by hpckit's own parser."""
    from hpckit.hw.nvidia_smi import parse_nvlink_status, parse_query_gpu_csv, parse_query_q, parse_topo_m

    texts = {}
    for name, argv in SMI_COMMANDS.items():
        done = run(argv, out / name)
        if done.returncode != 0:
            raise RuntimeError(f"`{' '.join(argv)}` exited {done.returncode}: {done.stderr.strip()[-300:]}")
        texts[name] = done.stdout
    gpus = parse_query_q(texts["nvidia-smi-q.txt"], "nvidia-smi -q")
    rows = parse_query_gpu_csv(texts["nvidia-smi-query-gpu.csv"])
    topo = parse_topo_m(texts["nvidia-smi-topo-m.txt"])
    links = parse_nvlink_status(texts["nvidia-smi-nvlink-status.txt"])
    return {
        "gpus": [
            {"index": g.index, "name": g.product_name, "driver": g.driver_version, "bus_id": g.bus_id} for g in gpus
        ],
        "query_gpu": rows,
        "topo_devices": list(topo.devices),
        "nvlink_active": {str(g.index): sum(1 for link in g.links if link.active) for g in links},
        "agree": [g.product_name for g in gpus] == [r.get("name") for r in rows],
    }


def step_nvml(out: Path, smi: Step) -> dict[str, Any]:
    """NVML's view of the same GPUs (hpckit's health checks prefer it to nvidia-smi)."""
    import pynvml

    from hpckit.hw.nvml import gpus_from_nvml

    pynvml.nvmlInit()
    try:
        gpus = gpus_from_nvml(pynvml)
    finally:
        pynvml.nvmlShutdown()
    names = [g.product_name for g in gpus]
    (out / "nvml.json").write_text(json.dumps([asdict(g) for g in gpus], default=str, indent=1))
    smi_names = [g["name"] for g in smi.found.get("gpus", [])]
    return {"names": names, "same_as_nvidia_smi": names == smi_names if smi.status == "ok" else None}


def health_config(out: Path, smi: Step) -> Path:
    """A node config naming what the machine has, so the checks judge it (not the lab's defaults)."""
    gpus = smi.found.get("gpus", [])
    config: dict[str, Any] = {"store": str(out / "health-store")}
    if gpus:
        from hpckit.hardware import hardware_table

        entry = hardware_table().gpu(str(gpus[0]["name"]))
        if entry is not None:
            config["gpus"] = {"type": entry.key, "count": len(gpus)}
    path = out / "health.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def step_health(out: Path, tier: str, config: Path) -> dict[str, Any]:
    argv = [sys.executable, "-m", "hpckit", "health", "check", "--tier", tier, "--config", str(config)]
    done = run([*argv, "--dry-run", "--no-store", "--json"], out / f"health-{tier}.json")
    if not done.stdout.strip():
        raise RuntimeError(
            f"`hpckit health check --tier {tier}` exited {done.returncode}: {done.stderr.strip()[-400:]}"
        )
    report = json.loads(done.stdout.splitlines()[-1])
    rows = report["rows"]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    # value, the table's figure, the lowest passing value, the verdict
    figures = {r["metric"]: [r["value"], r["expected"], r["lower"], r["status"]] for r in rows if _is_gpu_figure(r)}
    return {"exit": done.returncode, "statuses": counts, "gpu_figures": figures, "seconds": report["seconds"]}


def _is_gpu_figure(row: dict[str, Any]) -> bool:
    """The heavy tier's figures: GEMM TFLOP/s, device copy and NCCL GB/s."""
    return row.get("unit") in ("TFLOP/s", "GB/s")


def step_sweep(out: Path, gpus: int) -> dict[str, Any]:
    """torch_sweep with NCCL across the machine's GPUs, read by hpckit's results parser into pandas."""
    from hpckit.results.api import parse_text

    ranks = max(gpus, 1)
    # staged alone, as bench jobs stage it: run from hpckit/bench/, its bisect.py would shadow Python's
    program = out / "torch_sweep.py"
    shutil.copyfile(ROOT / "hpckit" / "bench" / "torch_sweep.py", program)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    argv += [str(program), "-o", "all_reduce", "-b", "1M", "-e", "1G", "-f", "4", "--backend", "nccl"]
    done = run(argv, out / "torch-sweep.out")
    if done.returncode != 0:
        raise RuntimeError(f"torch_sweep exited {done.returncode}: {cause(done.stdout + done.stderr)}")
    parsed = parse_text(done.stdout, "nccl-tests", "torch-sweep.out", "all_reduce")
    frame = parsed.frame
    frame.to_csv(out / "torch-sweep.csv", index=False)
    return {
        "ranks": ranks,
        "rows": len(frame),
        "wrong": int(frame["wrong"].fillna(0).sum()),
        "peak_algbw_gbps": float(frame["algbw_gbps"].max()),
        "peak_busbw_gbps": float(frame["busbw_gbps"].max()),  # 0 with one rank: all_reduce moves nothing
    }


def cause(text: str) -> str:
    """A failed run's own error lines (torchrun's summary after them says only that a rank failed)."""
    from hpckit.bench.follow import program_errors

    return "; ".join(program_errors(text)) or text.strip()[-400:]


def attempt(step: Step, work: Callable[[], dict[str, Any]]) -> Step:
    start = time.monotonic()
    try:
        step.found = work()
        step.status = "ok"
    except ModuleNotFoundError as exc:
        step.status, step.error = "unavailable", f"{exc} (carry its wheel: see benchmarks/gpu_proof.sh)"
    except Exception as exc:  # evidence of what broke, and the next step still runs
        step.status, step.error = "failed", f"{type(exc).__name__}: {exc}"
    step.seconds = round(time.monotonic() - start, 1)
    print(f"gpu-proof: {step.name}: {step.status} ({step.seconds} s) {step.error}", flush=True)
    return step


def summary(steps: list[Step]) -> str:
    lines = ["| step | status | seconds | found |", "| --- | --- | --- | --- |"]
    for s in steps:
        text = s.error or json.dumps(s.found, default=str)[:400]
        lines.append(f"| {s.name} | {s.status} | {s.seconds} | {text.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if shutil.which("nvidia-smi") is None:
        print("gpu-proof: no nvidia-smi here: this machine has no NVIDIA driver; nothing to prove", file=sys.stderr)
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    smi = attempt(Step("smi"), lambda: step_smi(out))
    steps = [smi, attempt(Step("nvml"), lambda: step_nvml(out, smi))]
    config = health_config(out, smi)
    for tier in ("quick", "nightly"):
        steps.append(attempt(Step(f"health-{tier}"), partial(step_health, out, tier, config)))
    steps.append(attempt(Step("torch-sweep"), lambda: step_sweep(out, len(smi.found.get("gpus", [])))))
    (out / "proof.json").write_text(json.dumps([asdict(s) for s in steps], default=str, indent=1))
    (out / "PROOF.md").write_text(summary(steps))
    print(summary(steps))
    return 0 if all(s.status == "ok" for s in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
