"""What a check gets: the probe, the node's expected shape, and observations shared within one run."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpckit.health.config import NodeConfig
from hpckit.health.facts import GpuFacts, KernelLog, gather_gpus, read_kernel_log
from hpckit.health.model import Measure, Status

if TYPE_CHECKING:
    from hpckit.hardware import GpuType
    from hpckit.health.gpubench import BenchReport
    from hpckit.health.probe import Probe
    from hpckit.health.registry import Tier
    from hpckit.slurm.conf import NodeDecl


class LocalState:
    """Small JSON documents in the node-local state dir (kernel log cursor, IB counters).

    Changes are kept in memory until :meth:`commit`, so a dry run or a crashed run moves no cursor. An
    unwritable dir is not an error of the run: the next run reads the same lines again.
    """

    def __init__(self, directory: str | None) -> None:
        self.directory = directory
        self._pending: dict[str, Any] = {}
        self.error: str | None = None

    def load(self, name: str) -> dict[str, Any]:
        if name in self._pending:
            data: dict[str, Any] = self._pending[name]
            return data
        if self.directory is None:
            return {}
        try:
            loaded = json.loads(Path(self.directory, f"{name}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return loaded if isinstance(loaded, dict) else {}

    def save(self, name: str, data: dict[str, Any]) -> None:
        self._pending[name] = data

    def commit(self) -> None:
        if self.directory is None:
            return
        try:
            os.makedirs(self.directory, mode=0o755, exist_ok=True)
            for name, data in self._pending.items():
                target = Path(self.directory, f"{name}.json")
                tmp = target.with_suffix(f".tmp{os.getpid()}")
                tmp.write_text(json.dumps(data, sort_keys=True), encoding="utf-8")
                tmp.replace(target)
            self._pending.clear()
        except OSError as exc:
            self.error = f"node state not saved in {self.directory}: {exc.strerror or exc}"


class Context:
    def __init__(
        self,
        probe: Probe,
        config: NodeConfig,
        tier: Tier,
        local: LocalState | None = None,
    ) -> None:
        self.probe = probe
        self.config = config
        self.tier = tier
        self.node = probe.hostname
        self.local = local or LocalState(None)
        self.limits = config.thresholds
        self._gpus: GpuFacts | None = None
        self._kernel: KernelLog | None = None
        self._decl: tuple[NodeDecl | None, str] | None = None
        self._bench: BenchReport | Exception | None = None

    # --- GPUs ---------------------------------------------------------------------------------------

    def gpus(self) -> GpuFacts:
        if self._gpus is None:
            self._gpus = gather_gpus(self.probe)
        return self._gpus

    def gpu_type(self) -> GpuType | None:
        """The hardware table entry for this node's GPUs: the config's type, else the probed product name."""
        from hpckit.hardware import hardware_table

        table = hardware_table()
        if self.config.gpus is not None and (entry := table.gpu(self.config.gpus.type)) is not None:
            return entry
        names = {g.product_name for g in self.gpus().gpus if g.product_name}
        for name in sorted(names):
            if (entry := table.gpu(name)) is not None:
                return entry
        return None

    def expected_gpus(self) -> int | None:
        if self.config.gpus is not None:
            return self.config.gpus.count
        decl, _ = self.slurm_decl()
        return decl.gres_count("gpu") if decl is not None else None

    def bench(self) -> BenchReport:
        from hpckit.health.gpubench import BenchUnavailable

        if self._bench is None:
            try:
                self._bench = self.probe.gpu_bench(self.expected_gpus() or 0)
            except BenchUnavailable as exc:
                self._bench = exc
        if isinstance(self._bench, Exception):
            raise self._bench
        return self._bench

    # --- slurm.conf ---------------------------------------------------------------------------------

    def slurm_decl(self) -> tuple[NodeDecl | None, str]:
        """This node's NodeName entry, or None with the reason it could not be found."""
        if self._decl is None:
            self._decl = self._read_decl()
        return self._decl

    def _read_decl(self) -> tuple[NodeDecl | None, str]:
        from hpckit.slurm.conf import SlurmConfError, parse_nodes

        text = self.probe.read_text(self.config.slurm_conf)
        if text is None:
            return None, f"cannot read {self.config.slurm_conf}"
        try:
            nodes = parse_nodes(text, self.config.slurm_conf)
        except SlurmConfError as exc:
            return None, str(exc)
        for decl in nodes:
            if decl.name == self.node:
                return decl, ""
        return None, f"{self.config.slurm_conf} has no NodeName entry for {self.node}"

    # --- kernel log ---------------------------------------------------------------------------------

    def boot_id(self) -> str:
        return (self.probe.read_text("/proc/sys/kernel/random/boot_id") or "unknown").strip()

    def kernel(self) -> KernelLog:
        """The kernel log since this tier's last run on this boot (the cursor moves at commit)."""
        if self._kernel is None:
            state = self.local.load(self._kernel_key)
            boot = self.boot_id()
            cursor = state.get("cursor") if state.get("boot_id") == boot else None
            self._kernel = read_kernel_log(self.probe, boot, float(cursor) if cursor is not None else None)
            sticky = state.get("sticky", {}) if state.get("boot_id") == boot else {}
            self.local.save(self._kernel_key, {"boot_id": boot, "cursor": self._kernel.cursor, "sticky": sticky})
        return self._kernel

    @property
    def _kernel_key(self) -> str:
        return f"kernel-{self.tier}"

    def sticky(self, check: str, found: Iterable[Measure]) -> list[Measure]:
        """Failures read from the kernel log stay failures until the node reboots (boot id changes):
        an Xid 79 seen once must not pass on the next run just because the log cursor moved past it."""
        self.kernel()
        state = self.local.load(self._kernel_key)
        stored: list[dict[str, Any]] = list(state.get("sticky", {}).get(check, []))
        seen = {(m["metric"], m["fault"], m["evidence"]) for m in stored}
        merged = [Measure(m["metric"], Status.FAIL, None, "", None, m["fault"], m["evidence"]) for m in stored]
        for m in found:
            key = (m.metric, m.fault, m.evidence)
            if m.status == Status.FAIL and key not in seen:
                seen.add(key)
                merged.append(m)
                stored.append({"metric": m.metric, "fault": m.fault, "evidence": m.evidence})
        sticky = dict(state.get("sticky", {}))
        sticky[check] = stored[-50:]  # bounded: a storm of one Xid must not grow the file without end
        self.local.save(self._kernel_key, {**state, "sticky": sticky})
        others = [m for m in found if m.status != Status.FAIL]
        return merged + others
