"""Find the node, and on InfiniBand nodes the NIC rail, that drags an all-node collective down (pure logic).

The search runs rounds of probes; a probe is one benchmark job on exactly the nodes it lists, and the
probes of one round run at the same time on disjoint nodes (a `Runner` runs them):

1. every node alone (in-node bandwidth: NVLink on GPU nodes, loopback on CPU ones);
2. the nodes that pass, in two halves, each half on its own; a slow half is split in two again, and so
   on. A group of one is tested with a partner already known to be fast (a pair). One slow node among
   N is named in about log2(N) rounds of two jobs each: never the N(N-1)/2 pairs of an all-pairs test;
3. on nodes with InfiniBand, each slow node with a fast partner once per HCA (`NCCL_IB_HCA==<hca>`),
   which names the rail.

A probe is slow when it is below the figure the hardware table gives for its shape (NVLink alone, the
fabric across nodes, one HCA for a rail) or, where there is no figure (CPU nodes, the torch backend),
below `ratio` times a reference: the median of the single-node probes; the median of the fast multi-node
probes so far (those within 1/ratio of the best: a ring collective's bus bandwidth does not depend on the
node count, and one lucky probe must not make the others look slow); likewise among a node's rails.
Without a figure the search needs one half of the nodes to be free of slow ones to learn what fast is.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from hpckit.bench.expect import gbps
from hpckit.errors import HpckitError

ProbeKind = Literal["single", "all", "group", "pair", "rail"]  # all: a partition's every node (verify)
# A probe below this fraction of its reference is slow (where the hardware table has no figure). On CPU
# nodes that share cores, healthy probes were seen up to 8x apart (lab nodes on a busy 2-core box); a
# throttled link is 30-100x down. A NIC at half speed is 2x down: the table's figures (GPU nodes) judge that.
DEFAULT_RATIO = 0.1


class OutOfTime(HpckitError):
    """The search's time box ran out (the runner cancelled the jobs still running)."""


@dataclass(frozen=True)
class Probe:
    kind: ProbeKind
    nodes: tuple[str, ...]  # where the job runs
    suspects: tuple[str, ...]  # the nodes under test (a pair's partner is known to be fast)
    rail: str | None = None  # the one HCA the job may use
    partition: str | None = None

    def describe(self) -> str:
        text = ",".join(self.nodes)
        return f"{text} on {self.rail}" if self.rail else text


@dataclass(frozen=True)
class Measurement:
    probe: Probe
    busbw: float | None  # None: the job failed
    job_id: str = ""
    expected_low: float | None = None  # the hardware table's (or --expect's) lowest acceptable busbw
    error: str = ""  # the failed job's whole account: its headline, its causes, its last lines
    history_median: float | None = None  # earlier runs of the same shape on this cluster
    blamed: tuple[str, ...] = ()  # the nodes the failed job's own evidence names (Slurm lost them ...)


@dataclass(frozen=True)
class Judged:
    measurement: Measurement
    slow: bool
    why: str
    unmeasured: bool = False  # the job failed and nothing ties that to its nodes: neither slow nor fast


@dataclass(frozen=True)
class Round:
    number: int
    kind: str
    judged: tuple[Judged, ...]
    seconds: float


class Runner(Protocol):
    def __call__(self, probes: Sequence[Probe]) -> list[Measurement]:
        """Run the probes at once (their nodes are disjoint); one measurement per probe, in order."""
        ...


def halves(nodes: Sequence[str]) -> list[tuple[str, ...]]:
    mid = (len(nodes) + 1) // 2
    return [tuple(nodes[:mid]), tuple(nodes[mid:])] if len(nodes) > 1 else [tuple(nodes)]


def all_pairs(n: int) -> int:
    """Jobs an all-pairs test runs on n nodes (the comparison the search is measured against)."""
    return n * (n - 1) // 2


@dataclass
class Report:
    nodes: tuple[str, ...]
    rounds: list[Round] = field(default_factory=list)
    slow_nodes: dict[str, str] = field(default_factory=dict)  # node -> why
    slow_rails: dict[str, list[str]] = field(default_factory=dict)  # node -> its slow HCAs
    notes: list[str] = field(default_factory=list)
    complete: bool = True
    unmeasured: list[str] = field(default_factory=list)  # "nodes: the failed job's account", per probe

    @property
    def jobs(self) -> int:
        return sum(len(r.judged) for r in self.rounds)

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.rounds)

    def to_json(self) -> dict[str, object]:
        return {
            "nodes": list(self.nodes),
            "slow_nodes": [
                {"node": n, "why": w, "rails": self.slow_rails.get(n, [])} for n, w in self.slow_nodes.items()
            ],
            "slow_rails": {n: list(r) for n, r in self.slow_rails.items()},
            "jobs": self.jobs,
            "all_pairs_jobs": all_pairs(len(self.nodes)),
            "rounds": [_round_json(r) for r in self.rounds],
            "seconds": round(self.seconds, 1),
            "notes": list(self.notes),
            "complete": self.complete,
            "could_not_measure": list(self.unmeasured),
        }


def _round_json(r: Round) -> dict[str, object]:
    jobs = []
    for j in r.judged:
        m = j.measurement
        jobs.append(
            {
                "job_id": m.job_id,
                "kind": m.probe.kind,
                "nodes": list(m.probe.nodes),
                "suspects": list(m.probe.suspects),
                "rail": m.probe.rail,
                "busbw_gbps": m.busbw,
                "expected_low_gbps": m.expected_low,
                "slow": j.slow,
                "why": j.why,
                "error": m.error,
            }
        )
    return {"round": r.number, "kind": r.kind, "seconds": round(r.seconds, 1), "jobs": jobs}


@dataclass
class Search:
    """The state of one search: what was run, which nodes are known fast or slow."""

    runner: Runner
    ratio: float = DEFAULT_RATIO
    clock: Callable[[], float] = time.monotonic
    report: Report = field(default_factory=lambda: Report(()))
    fast: set[str] = field(default_factory=set)
    _values: list[float] = field(default_factory=list)  # the current fabric search's multi-node figures

    def _round(
        self, kind: str, probes: Sequence[Probe], judge: Callable[[list[Measurement]], list[Judged]]
    ) -> list[Judged]:
        """Run one round of probes at once, judge it, and keep it as evidence."""
        start = self.clock()
        judged = self._settle(judge(self.runner(probes)))
        self.report.rounds.append(Round(len(self.report.rounds) + 1, kind, tuple(judged), self.clock() - start))
        return judged

    # ------------------------------------------------------------ 1. every node alone

    def singles(self, nodes: Sequence[str], partition: str | None = None) -> list[str]:
        """Test every node alone, at once; the nodes that pass (the slow ones go to the report)."""
        return self.singles_by_partition({partition: nodes})[partition]

    def singles_by_partition(self, groups: Mapping[str | None, Sequence[str]]) -> dict[str | None, list[str]]:
        """Every node of every partition alone, in one round; each partition's nodes that pass."""
        for nodes in groups.values():
            self._add_nodes(nodes)
        probes = [Probe("single", (n,), (n,), partition=part) for part, nodes in groups.items() for n in nodes]
        judged = self._round("single", probes, self._judge_singles)
        passed: dict[str | None, list[str]] = {part: [] for part in groups}
        for j in judged:
            probe = j.measurement.probe
            if j.slow:
                self.report.slow_nodes[probe.nodes[0]] = f"in-node: {j.why}"
            elif not j.unmeasured:
                passed[probe.partition].append(probe.nodes[0])
        return passed

    def _judge_singles(self, measured: list[Measurement]) -> list[Judged]:
        """Against the table's figure, else against the median of the same partition's single-node tests."""
        found: dict[str | None, list[float]] = {}
        for m in measured:
            if m.busbw is not None and m.expected_low is None:
                found.setdefault(m.probe.partition, []).append(m.busbw)
        medians = {part: statistics.median(values) for part, values in found.items()}
        what = "the median of the partition's single-node tests"
        return [self._judge(m, medians.get(m.probe.partition), what) for m in measured]

    def together(self, nodes: Sequence[str], partition: str | None = None) -> Judged:
        """All of a partition's nodes in one job, judged against the table or the cluster's history."""
        self._add_nodes(nodes)
        probe = Probe("all", tuple(nodes), tuple(nodes), None, partition)
        judged = self._round("all", [probe], lambda ms: [self._judge(m, None, "") for m in ms])[0]
        if not judged.slow and not judged.unmeasured:
            self.fast.update(nodes)
        return judged

    # ------------------------------------------------------------ 2. halves, then pairs

    def fabric(self, nodes: Sequence[str], partition: str | None = None, reference: float | None = None) -> None:
        """Find the slow nodes among `nodes` (all passed their single-node test) by halving."""
        self._add_nodes(nodes)
        self._values = [reference] if reference is not None else []
        if len(nodes) < 2:
            return
        if len(nodes) == 3:
            self._triangle(tuple(nodes), partition)
            return
        if len(nodes) == 2:
            self._two(tuple(nodes), partition)
            return
        pending = halves(nodes)
        slow_groups: list[tuple[str, ...]] = []
        while pending:
            probes, held = self._schedule(pending, partition)
            if not probes:
                stuck = sorted({n for g in held for n in g})
                self.report.notes.append(
                    f"cannot tell which of {', '.join(stuck)} is slow: no node tested fast to pair them with"
                )
                self.report.complete = False
                return
            kind = "pairs" if all(p.kind == "pair" for p in probes) else "halves"
            judged = self._round(kind, probes, self._judge_fabric)
            pending = held + self._next(judged, slow_groups)
        for group in slow_groups:
            if not any(n in self.report.slow_nodes for n in group):
                self.report.notes.append(
                    f"{','.join(group)} tested slow together, but each part was fast with other nodes: "
                    "the slowness lies between them, or it passed; no node named for it"
                )

    def _two(self, nodes: tuple[str, ...], partition: str | None) -> None:
        """Two nodes: one job, and no third node to tell which of them is slow."""
        judged = self._round("pairs", [Probe("group", nodes, nodes, None, partition)], self._judge_fabric)[0]
        m = judged.measurement
        if judged.unmeasured:
            return
        if judged.slow:
            self.report.notes.append(f"{' and '.join(nodes)} are slow together; a third node would tell which")
            self.report.complete = False
        elif m.expected_low is None and m.history_median is None and self._values == [m.busbw]:
            self.report.notes.append(
                f"{' and '.join(nodes)}: {gbps(m.busbw)} GB/s, with nothing to judge it by (no table figure, no "
                "history, no third node)"
            )
            self.report.complete = False
        else:
            self.fast.update(nodes)

    def _triangle(self, nodes: tuple[str, ...], partition: str | None) -> None:
        """Three nodes: halves would be a pair and a node with no partner yet, and one pair alone has nothing
        to be compared with. The three pairs (one round each: they share nodes) are also the fewest jobs."""
        a, b, c = nodes
        measured: list[Measurement] = []

        def later(ms: list[Measurement]) -> list[Judged]:  # judged once all three are in
            measured.extend(ms)
            return []

        for pair in ((a, b), (b, c), (a, c)):
            self._round("pairs", [Probe("pair", pair, pair, None, partition)], later)
        judged = self._settle(self._judge_fabric(measured))
        self.report.rounds[-3:] = [
            replace(r, judged=(j,)) for r, j in zip(self.report.rounds[-3:], judged, strict=True)
        ]
        slow_pairs = [set(j.measurement.probe.nodes) for j in judged if j.slow]
        for j in judged:
            if not j.slow and not j.unmeasured:
                self.fast.update(j.measurement.probe.nodes)
        for node in nodes:
            if sum(node in pair for pair in slow_pairs) == 2:
                why = next(j.why for j in judged if j.slow and node in j.measurement.probe.nodes)
                self.report.slow_nodes[node] = f"fabric: {why}"

    def _schedule(
        self, pending: Sequence[tuple[str, ...]], partition: str | None
    ) -> tuple[list[Probe], list[tuple[str, ...]]]:
        """This round's probes (disjoint nodes; a group of one gets a fast partner) and the groups held back."""
        busy = {n for g in pending for n in g}
        partners = [n for n in sorted(self.fast) if n not in busy and n in self.report.nodes]
        probes, held = [], []
        for group in pending:
            if len(group) > 1:
                probes.append(Probe("group", group, group, None, partition))
            elif partners:
                probes.append(Probe("pair", (group[0], partners.pop(0)), group, None, partition))
            else:
                held.append(group)
        return probes, held

    def _judge_fabric(self, measured: Sequence[Measurement]) -> list[Judged]:
        self._values += [m.busbw for m in measured if m.busbw is not None]
        reference = self._fast_median(self._values)
        return [self._judge(m, reference, "the fast multi-node tests") for m in measured]

    def _fast_median(self, values: Sequence[float]) -> float | None:
        """The median of the figures within 1/ratio of the best: what fast is, robust to one lucky figure."""
        if not values:
            return None
        best = max(values)
        return statistics.median(v for v in values if v >= self.ratio * best)

    def _next(self, judged: Sequence[Judged], slow_groups: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
        """Record what the round showed; the groups to test next (the halves of each slow group)."""
        pending: list[tuple[str, ...]] = []
        for j in judged:
            probe = j.measurement.probe
            if j.unmeasured:
                continue
            if not j.slow:
                self.fast.update(probe.nodes)
            elif len(probe.suspects) == 1:
                self.report.slow_nodes[probe.suspects[0]] = f"fabric: {j.why}"
            else:
                slow_groups.append(probe.suspects)
                pending += halves(probe.suspects)
        return pending

    # ------------------------------------------------------------ 3. rails

    def rails(self, hcas: Sequence[str], partition: str | None = None) -> None:
        """Each node slow on the fabric, with a fast partner, once per HCA: which of its NICs is slow."""
        suspects = [n for n, why in self.report.slow_nodes.items() if why.startswith("fabric:")]
        partners = sorted(self.fast)
        if not suspects or not hcas:
            return
        if len(partners) < len(suspects):
            self.report.notes.append("not enough fast nodes to test every slow node's rails at once")
            suspects = suspects[: len(partners)]
        by_node: dict[str, list[Judged]] = {n: [] for n in suspects}
        for hca in hcas:
            probes = [Probe("rail", (n, partners[i]), (n,), hca, partition) for i, n in enumerate(suspects)]
            for j in self._round(f"rail {hca}", probes, lambda ms: [self._judge(m, None, "") for m in ms]):
                by_node[j.measurement.probe.suspects[0]].append(j)
        for node, judged in by_node.items():
            self._name_rails(node, judged)

    def _name_rails(self, node: str, judged: Sequence[Judged]) -> None:
        judged = [j for j in judged if not j.unmeasured]
        if not judged:
            return
        found = [j.measurement.busbw for j in judged if j.measurement.busbw is not None]
        fast = self._fast_median(found)
        slow = [j for j in judged if j.slow or self._judge(j.measurement, fast, "its fast rails").slow]
        if slow:
            self.report.slow_rails[node] = [str(j.measurement.probe.rail) for j in slow]
            detail = ", ".join(f"{j.measurement.probe.rail} {gbps(j.measurement.busbw)} GB/s" for j in slow)
            self.report.slow_nodes[node] += f"; slow rail: {detail}"
        else:
            self.report.notes.append(
                f"{node}: every rail is fast alone; its links are slow together (PCIe, CPU, switch)"
            )

    # ------------------------------------------------------------ judging

    def _settle(self, judged: list[Judged]) -> list[Judged]:
        """A failed job names its nodes only when its own evidence blames them, or when another probe of
        the round on the same partition measured (the same test ran there); otherwise the round could not
        measure that probe, and it names nobody: a benchmark that cannot run is not a slow node."""
        ran = {j.measurement.probe.partition for j in judged if j.measurement.busbw is not None}
        out = []
        for j in judged:
            m = j.measurement
            if m.busbw is not None:
                out.append(j)
            elif m.blamed or m.probe.partition in ran:
                out.append(Judged(m, True, f"job {m.job_id} failed: {cause(m.error)}"))
            else:
                out.append(Judged(m, False, f"could not measure: {cause(m.error)}", unmeasured=True))
                self.report.unmeasured.append(f"{m.probe.describe()}: {m.error}")
                self.report.complete = False
        return out

    def _judge(self, m: Measurement, reference: float | None, what: str) -> Judged:
        if m.busbw is None:  # _settle decides what a failed job means
            return Judged(m, False, m.error, unmeasured=True)
        shown = f"{gbps(m.busbw)} GB/s on {m.probe.describe()}"
        if m.expected_low is not None:
            if m.busbw < m.expected_low:
                return Judged(m, True, f"{shown} is below the expected {gbps(m.expected_low)} GB/s")
            return Judged(m, False, f"{shown} meets the expected {gbps(m.expected_low)} GB/s")
        if m.history_median is not None and (reference is None or m.history_median > reference):
            reference, what = m.history_median, "this cluster's history"
        if reference is None or reference <= 0:
            return Judged(m, False, f"{shown} (nothing to compare with)")
        pct = 100 * m.busbw / reference
        text = f"{shown} is {pct:.0f}% of {what} ({gbps(reference)} GB/s)"
        return Judged(m, m.busbw < self.ratio * reference, text)

    def _add_nodes(self, nodes: Sequence[str]) -> None:
        self.report.nodes = tuple(dict.fromkeys([*self.report.nodes, *nodes]))


def cause(error: str) -> str:
    """A failed job's account in one line: its headline and its first cause (the program's own error)."""
    lines = [ln for ln in error.splitlines() if ln.strip()] or ["no reason given"]
    head = lines[0].removeprefix("could not measure: ")
    if len(lines) > 1 and not lines[1].startswith("last lines of "):
        return f"{head}: {lines[1].strip()}"
    return head


def bisect(
    nodes: Sequence[str],
    runner: Runner,
    *,
    hcas: Sequence[str] = (),
    ratio: float = DEFAULT_RATIO,
    singles: bool = True,
    partition: str | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Report:
    """Single-node tests, then halves and pairs, then rails: the slow nodes and rails, with the evidence."""
    search = Search(runner, ratio, clock)
    try:
        passed = search.singles(nodes, partition) if singles else list(nodes)
        search.fabric(passed, partition)
        search.rails(hcas, partition)
    except OutOfTime as exc:
        search.report.notes.append(str(exc))
        search.report.complete = False
    return search.report
