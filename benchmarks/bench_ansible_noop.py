"""No-op re-run of ansible/site.yml on a 6-host lab: ansible/ansible.cfg against Ansible's defaults.

Brings up a lab (ctl, login, node1-4 with 4 GPUs each), deploys once (cold), then times no-op runs,
alternating the tuned configuration (ansible/ansible.cfg) and an empty one (Ansible's defaults), and
takes the lab down. Targets: tuned no-op <= 15 s and <= 0.5x the plain one. Needs root and the lab's
host packages.

Run: python benchmarks/bench_ansible_noop.py [--runs 3] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hpckit.lab.provider import lab_down, lab_up, ssh_identity  # noqa: E402
from hpckit.lab.spec import LabNode, LabSpec  # noqa: E402

CLUSTER = "ansbench"
NET = "10.77.5"
NODES = (
    LabNode("ctl", f"{NET}.10"),
    LabNode("login", f"{NET}.11"),
    *(LabNode(f"node{i}", f"{NET}.{20 + i}", gpus=4) for i in range(1, 5)),
)
SPEC = LabSpec(cluster=CLUSTER, nodes=NODES, subnet=f"{NET}.0/24", bridge="hpcka5", shared_dirs=("/shared",))
EXTRAVARS = f"""\
hpckit_cluster_name: {CLUSTER}
hpckit_lab: true
slurm_controller_host: ctl
slurm_controller_addr: {NET}.10
slurm_accounting: true
slurm_dbd_host: ctl
slurm_nodes:
  - {{names: "node[1-4]", addrs: "{NET}.[21-24]", cpus: 2, sockets: 1, cores_per_socket: 2,
     threads_per_core: 1, real_memory: 1000, gres: "gpu:h100:4"}}
slurm_partitions:
  - {{name: gpu, nodes: "node[1-4]", default: true, max_time: INFINITE}}
slurm_conf_overrides: {{}}
slurm_proctrack_type: proctrack/linuxproc
slurm_task_plugin: task/affinity
slurm_cgroup_enabled: false
slurmd_config_overrides: true
slurm_accounting_mariadb_skip_networking: true
"""


def inventory() -> str:
    ident = ssh_identity(CLUSTER)
    pad = " " * 12
    nodes = "\n".join(
        f"{pad}{n.name}: {{ansible_host: {n.address}, hpckit_gpu_count: {n.gpus}, hpckit_gpu_type: h100}}"
        for n in NODES
        if n.gpus
    )
    return f"""\
all:
  vars:
    ansible_user: root
    ansible_port: 22
    ansible_ssh_private_key_file: {ident.private_key}
    ansible_ssh_common_args: "-o UserKnownHostsFile={ident.known_hosts} -o StrictHostKeyChecking=accept-new"
    ansible_python_interpreter: /usr/bin/python3
  children:
    slurm_controller: {{hosts: {{ctl: {{ansible_host: {NET}.10}}}}}}
    slurm_dbd: {{hosts: {{ctl: {{}}}}}}
    slurm_login: {{hosts: {{login: {{ansible_host: {NET}.11}}}}}}
    slurm_compute:
      children:
        partition_gpu:
          hosts:
{nodes}
"""


def playbook(work: Path, config: Path) -> tuple[float, str]:
    """One ansible-playbook run; its wall time and its recap (its CPU time is printed)."""
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(config),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(work / "facts"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    argv = [
        "ansible-playbook",
        "-i",
        str(work / "inventory.yml"),
        "-e",
        f"@{work / 'extravars.yml'}",
        "site.yml",
    ]
    before, start = _children_cpu(), time.monotonic()
    done = subprocess.run(argv, cwd=REPO / "ansible", env=env, capture_output=True, text=True, check=False)
    took = time.monotonic() - start
    print(f"  {config.name}: {took:.1f} s wall, {_children_cpu() - before:.1f} s CPU on this side", flush=True)
    if done.returncode != 0:
        raise SystemExit(f"ansible-playbook failed ({config}):\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}")
    return took, done.stdout[done.stdout.rfind("PLAY RECAP") :]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def changed(recap: str) -> int:
    return sum(int(n) for n in re.findall(r"changed=(\d+)", recap))


def measure(work: Path, runs: int) -> dict[str, list[float]]:
    tuned, plain = REPO / "ansible" / "ansible.cfg", work / "empty.cfg"
    plain.write_text("[defaults]\n")
    times: dict[str, list[float]] = {"cold": [], "tuned": [], "plain": []}
    took, recap = playbook(work, tuned)
    times["cold"].append(took)
    print(f"cold deploy: {took:.1f} s, changed={changed(recap)}", flush=True)
    for _ in range(runs):
        for label, config in (("tuned", tuned), ("plain", plain)):
            took, recap = playbook(work, config)
            if changed(recap):
                raise SystemExit(f"{label} re-run was not a no-op:\n{recap}")
            times[label].append(took)
            print(f"{label} no-op: {took:.1f} s", flush=True)
    return times


def report(times: dict[str, list[float]]) -> str:
    tuned, plain = statistics.median(times["tuned"]), statistics.median(times["plain"])
    ratio = tuned / plain
    rows = [
        f"| cold deploy | {times['cold'][0]:.1f} s | |",
        f"| no-op, ansible/ansible.cfg | {tuned:.1f} s | {_runs(times['tuned'])} |",
        f"| no-op, Ansible defaults (empty config) | {plain:.1f} s | {_runs(times['plain'])} |",
    ]
    checks = [
        f"- tuned no-op {tuned:.1f} s (target <= 15 s): {'ok' if tuned <= 15 else 'MISSED'}",
        f"- tuned / plain = {ratio:.2f} (target <= 0.5): {'ok' if ratio <= 0.5 else 'MISSED'}",
    ]
    return (
        "## Ansible no-op re-run, 6 lab hosts (`benchmarks/bench_ansible_noop.py`)\n\n"
        "`ansible-playbook site.yml` on ctl, login, node1-4 after a first deploy; medians of\n"
        "alternating runs.\n"
        "The machine is shared, so its load (other labs, tests) moves these numbers.\n\n"
        "| run | median | runs |\n| --- | --- | --- |\n" + "\n".join(rows) + "\n\n" + "\n".join(checks)
    )


def _runs(times: list[float]) -> str:
    return ", ".join(f"{t:.1f}" for t in times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hpckit-ansible-bench-"))
    try:
        lab_up(SPEC)
        (work / "inventory.yml").write_text(inventory())
        (work / "extravars.yml").write_text(EXTRAVARS)
        body = report(measure(work, args.runs))
    finally:
        lab_down(CLUSTER)
    print(body)
    if not args.no_record:
        from benchmarks._record import record  # type: ignore[import-not-found,unused-ignore]

        record("ansible-noop", body)


if __name__ == "__main__":
    main()
