"""benchmarks/gpu_proof.py, kept ready for a GPU machine: run here with no driver, and with an nvidia-smi that
prints recorded real outputs (an H200's), so its parsing and its record are exercised before a GPU is at hand."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SMI = Path(__file__).resolve().parent / "data" / "hw" / "nvidia-smi"
FAKE = f"""#!/bin/sh
case "$*" in
  "-q") cat {SMI}/q-h200-driver590-idle-masked.txt ;;
  --query-gpu=*) cat {SMI}/query-gpu-csv-allfields-h100-driver590-idle-masked.txt ;;
  "topo -m") cat {SMI}/topo-m-h100-1gpu-vm-ansi-escapes-driver590.txt ;;
  "nvlink --status") cat {SMI}/nvlink-s-h200-driver590-masked.txt ;;
  *) echo "fake nvidia-smi: $*" >&2; exit 9 ;;
esac
"""


def proof(tmp_path: Path, path: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "benchmarks.gpu_proof", "--out", str(tmp_path / "out")]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_without_a_driver_it_says_so_and_exits_2(tmp_path: Path) -> None:
    done = proof(tmp_path, "/usr/bin:/bin")
    assert done.returncode == 2 and "no nvidia-smi here" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # the whole script on recorded outputs: ~11 s
def test_recorded_nvidia_smi_outputs_are_parsed_and_every_step_is_recorded(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text(FAKE)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    done = proof(tmp_path, f"{bin_dir}:/usr/bin:/bin")
    out = tmp_path / "out"
    steps = {s["name"]: s for s in json.loads((out / "proof.json").read_text())}
    assert list(steps) == ["smi", "nvml", "health-quick", "health-nightly", "torch-sweep"], done.stdout
    smi = steps["smi"]
    assert smi["status"] == "ok", smi["error"]
    assert [g["name"] for g in smi["found"]["gpus"]] == ["NVIDIA H200"]
    assert (out / "nvidia-smi-q.txt").read_text().startswith((SMI / "q-h200-driver590-idle-masked.txt").read_text())
    # the node config names the table's entry for the GPU nvidia-smi reported, so the checks judge it
    assert json.loads((out / "health.json").read_text())["gpus"] == {"type": "h200-sxm", "count": 1}
    quick = steps["health-quick"]
    assert quick["status"] == "ok" and sum(quick["found"]["statuses"].values()) > 0, quick
    # no torch in the test's environment: the sweep fails, says why, and the run exits 1
    assert steps["torch-sweep"]["status"] in ("failed", "unavailable") and steps["torch-sweep"]["error"]
    assert done.returncode == 1
    assert (out / "PROOF.md").read_text().startswith("| step | status | seconds | found |")
